"""Side-by-side check against the reference X-Bucket implementation (cctools, in C).

X-Bucket (../shared/papers/15-xbucket.md) ships in cctools (dttools/src/bucketing*.c). Given a
built cctools tree (``./configure && make -C dttools/src libdttools.a``), this module compiles
``benchmarks/xbucket/xbucket_ref_driver.c`` against it and replays the same trace through the
reference and through ours, with the same defaults and failure semantics, in one call. Nothing
of the reference is copied into schedlab; the driver only calls its public API.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import polars as pl

from schedlab.core.errors import BadInputError, MissingDependencyError
from schedlab.xbucket.compare import compare
from schedlab.xbucket.experiment import time_predictions
from schedlab.xbucket.simulator import ReplayConfig
from schedlab.xbucket.types import Defaults, Machine, Task

#: our algorithm name -> the reference's mode name
MODES: dict[str, str] = {"pg-bucket": "greedy", "pe-bucket": "exhaust",
                         "dg-bucket": "det-greedy", "de-bucket": "det-exhaust"}
DRIVER_SOURCE = Path(__file__).resolve().parents[3] / "benchmarks" / "xbucket" / \
    "xbucket_ref_driver.c"


def build_driver(cctools: str | Path, out: str | Path | None = None) -> Path:
    """Compile the driver against ``cctools``'s dttools (libdttools.a must exist)."""
    src = Path(cctools) / "dttools" / "src"
    if not (src / "libdttools.a").is_file():
        raise MissingDependencyError(f"{src / 'libdttools.a'} not found",
                                     hint="./configure && make -C dttools/src libdttools.a")
    if not DRIVER_SOURCE.is_file():
        raise MissingDependencyError(f"{DRIVER_SOURCE} not found (needs a source checkout)")
    out = Path(out) if out else Path(tempfile.gettempdir()) / "xbucket_ref_driver"
    command = ["gcc", "-O2", "-I", str(src), "-o", str(out), str(DRIVER_SOURCE),
               str(src / "libdttools.a"), "-lm", "-lz", "-ldl", "-lssl", "-lcrypto"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise MissingDependencyError(f"building the reference driver failed: "
                                     f"{done.stderr.strip()[:300]}")
    return out


def run_reference(driver: Path, tasks: list[Task], mode: str, semantics: str,
                  kill_fraction: float = 1.0, timeout: float = 600.0) -> dict[str, float]:
    """Replay ``tasks`` through the reference; its efficiencies, retries and timings."""
    lines = "".join(f"{_token(t.category)} {t.peak.cores} {t.peak.memory} {t.peak.disk} "
                    f"{t.wall_time}\n" for t in tasks)
    start = time.perf_counter()
    done = subprocess.run([str(driver), mode, semantics, str(kill_fraction)], input=lines,
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise BadInputError(f"reference driver failed: {done.stderr.strip()[:300]}")
    out = {k: float(v) for k, v in (p.split("=") for p in done.stdout.split())}
    out["seconds"] = time.perf_counter() - start
    return out


def _token(category: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in category) or "default"


def side_by_side(driver: Path, tasks: list[Task], workflow: str,
                 algorithms: tuple[str, ...] = tuple(MODES), kill_fraction: float = 1.0,
                 seed: int = 0) -> pl.DataFrame:
    """For each algorithm and both failure semantics: our and the reference's efficiency."""
    rows = []
    # as the driver: no cap from a trace-max worker (the former 64 GiB worker grown to fit, which
    # never binds) and one manager per category with no pooled fallback
    machine = Machine.covering(tasks)
    defaults = Defaults.cctools()
    for semantics in ("peak", "allocation"):
        config = ReplayConfig(semantics=semantics, kill_fraction=kill_fraction, machine=machine)
        ours = compare(tasks, algorithms, config, defaults=defaults, seed=seed)
        for row in ours.iter_rows(named=True):
            ref = run_reference(driver, tasks, MODES[row["algorithm"]], semantics, kill_fraction)
            rows.append(dict(
                workflow=workflow, algorithm=row["algorithm"], semantics=semantics,
                tasks=len(tasks),
                **{f"ours_efficiency_{r}": row[f"efficiency_{r}"] for r in
                   ("cores", "memory", "disk")},
                **{f"ref_efficiency_{r}": ref[f"efficiency_{r}"] for r in
                   ("cores", "memory", "disk")},
                ours_retries=row["retries"], ref_retries=ref["retries"],
                ref_predict_mean_us=ref["predict_mean_ns"] / 1e3,
                ref_predict_p99_us=ref["predict_p99_ns"] / 1e3,
                ref_add_mean_us=ref["add_mean_ns"] / 1e3,
            ))
    frame = pl.DataFrame(rows)
    means = [(pl.col(f"ours_efficiency_{r}") + 0) for r in ("cores", "memory", "disk")]
    refs = [pl.col(f"ref_efficiency_{r}") for r in ("cores", "memory", "disk")]
    return frame.with_columns(
        ours_efficiency_mean=pl.mean_horizontal(means),
        ref_efficiency_mean=pl.mean_horizontal(refs),
    )


def our_timings(algorithms: tuple[str, ...] = tuple(MODES), tasks: int = 2000,
                seed: int = 0) -> pl.DataFrame:
    """Our per-prediction and per-report costs on a ``tasks``-task trace, for the same modes."""
    return pl.DataFrame([dict(algorithm=a, **time_predictions(a, "trimodal", tasks, seed))
                         for a in algorithms])
