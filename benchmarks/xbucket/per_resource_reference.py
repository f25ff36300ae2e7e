"""Per-resource replays, row by row: cctools' bucketing (C, via xbucket_ref_driver.c) next to ours.

Each resource is replayed alone on both sides (the driver's RESOURCE argument; ours
``compare(per_resource=True)``): every other type gets exactly the task's peak, so a failure is
charged only to the resource that caused it. Same defaults as the driver (10 sampling tasks,
1 core / 1000 MB / 1000 MB first, x2, <= 10 buckets), peak semantics, kill fraction 1.

Two schedlab columns:
  * ``matched``: the driver's settings (one state per category, no pooled fallback, an uncapped
    worker: ``Machine.covering``); this is the one the difference is taken against;
  * ``cli``: ``schedlab xbucket replay --per-resource`` as shipped (pooled fallback on, Whole
    Machine = trace max caps allocations).

Usage (a cctools tree whose dttools/src holds libdttools.a, see docs/systems/xbucket.md):
    python benchmarks/xbucket/per_resource_reference.py --cctools /tmp/cctools-ref \
        --out /tmp/xbucket-per-resource.csv [--blind] [--jobs 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import polars as pl

from schedlab.core.data import data_dir
from schedlab.xbucket.compare import category_blind, compare
from schedlab.xbucket.reference import _token, build_driver
from schedlab.xbucket.simulator import ReplayConfig
from schedlab.xbucket.types import Defaults, Machine, Task
from schedlab.xbucket.workloads import read_reports

DATA = data_dir() / "xbucket"
TRACES = ("bioblast", "coffea", "lobsterCMSanalysis", "lobsterCMSsimulation")
RESOURCES = ("cores", "memory", "disk")
#: cctools mode (driver name) -> our algorithm
MODES: dict[str, str] = {
    "greedy": "pg-bucket",
    "exhaust": "pe-bucket",
    "det-greedy": "dg-bucket",
    "det-exhaust": "de-bucket",
    "quantized": "quantized",
}


def one_mode(
    driver: Path, trace: Path, mode: str, blind: bool = False, limit: int = 0, seed: int = 0
) -> list[dict[str, object]]:
    """Rows (one per resource) for one trace and one cctools mode."""
    tasks = read_reports(trace)
    tasks = tasks[:limit] if limit else tasks
    if blind:
        tasks = category_blind(tasks)
    ours = MODES[mode]
    matched = compare(
        tasks,
        [ours],
        ReplayConfig(semantics="peak", machine=Machine.covering(tasks)),
        defaults=Defaults.cctools(),
        seed=seed,
        per_resource=True,
    ).row(0, named=True)
    cli = compare(
        tasks,
        [ours],
        ReplayConfig(semantics="peak", machine=Machine.trace_max(tasks)),
        seed=seed,
        per_resource=True,
    ).row(0, named=True)
    rows = []
    for resource in RESOURCES:
        ref = run_alone(driver, tasks, mode, resource)
        rows.append(
            dict(
                trace=trace.stem,
                categories="blind" if blind else "per-category",
                resource=resource,
                mode=mode,
                ours=ours,
                tasks=len(tasks),
                cctools=ref[f"efficiency_{resource}"],
                schedlab=matched[f"efficiency_{resource}"],
                schedlab_cli=cli[f"efficiency_{resource}"],
                cctools_retries=int(ref["retries"]),
                schedlab_retries=matched[f"retries_{resource}"],
            )
        )
    return rows


def run_alone(driver: Path, tasks: list[Task], mode: str, resource: str) -> dict[str, float]:
    """The driver with its RESOURCE argument (per-resource replay), peak semantics."""
    lines = "".join(
        f"{_token(t.category)} {t.peak.cores} {t.peak.memory} {t.peak.disk} {t.wall_time}\n"
        for t in tasks
    )
    done = subprocess.run(
        [str(driver), mode, "peak", "1.0", resource],
        input=lines,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    return {k: float(v) for k, v in (p.split("=") for p in done.stdout.split())}


def table(
    driver: Path,
    traces: list[Path],
    modes: tuple[str, ...] = tuple(MODES),
    blind: bool = False,
    jobs: int = 1,
    limit: int = 0,
) -> pl.DataFrame:
    """Every (trace, resource, mode) row, with the difference schedlab - cctools."""
    work = [(driver, t, m, blind, limit) for t in traces for m in modes]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(_star, work))
    frame = pl.DataFrame([r for part in parts for r in part])
    return frame.with_columns(difference=pl.col("schedlab") - pl.col("cctools")).sort(
        "trace", "categories", "resource", "mode"
    )


def _star(args):
    return one_mode(*args)


def markdown(frame: pl.DataFrame) -> str:
    lines = [
        "| trace | resource | mode (cctools / ours) | cctools | schedlab | difference "
        "| schedlab `replay --per-resource` |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in frame.iter_rows(named=True):
        name = r["trace"] + (" (blind)" if r["categories"] == "blind" else "")
        lines.append(
            f"| {name} | {r['resource']} | {r['mode']} / {r['ours']} | "
            f"{r['cctools']:.4f} | {r['schedlab']:.4f} | {r['difference']:+.4f} | "
            f"{r['schedlab_cli']:.4f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cctools", required=True, type=Path)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--blind", action="store_true", help="merge categories on both sides")
    parser.add_argument("--mode", action="append", choices=tuple(MODES))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0)
    args = parser.parse_args(argv)
    driver = build_driver(args.cctools, Path(args.out or "/tmp/x").with_suffix(".driver"))
    traces = [args.data / f"{t}.txt" for t in TRACES if (args.data / f"{t}.txt").is_file()]
    frame = table(driver, traces, tuple(args.mode or MODES), args.blind, args.jobs, args.limit)
    if args.out:
        frame.write_csv(args.out)
    print(markdown(frame))
    within = (frame["difference"].abs() <= 0.01).sum()
    print(f"\n{within}/{frame.height} rows within 0.01", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
