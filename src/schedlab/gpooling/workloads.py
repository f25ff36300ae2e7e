"""Jobs for the simulator: Alibaba GPU-sharing traces and seeded generators shaped like them.

gPooling (../shared/papers/14-gpooling.md) is evaluated with benchmarks derived from real cluster
traces. The format here is Alibaba's ``cluster-trace-gpu-v2023`` pod list (one pod a row:
``gpu_milli`` is the share of each GPU it asks for, ``num_gpu`` how many, ``creation_time`` /
``scheduled_time`` / ``deletion_time`` in seconds). That trace has no GPU-memory column, so a pod's
memory is modelled as ``gpu_milli/1000 * memory_per_gpu`` unless the file carries a
``gpu_memory_mib`` column (which :func:`write_pod_trace` writes). The generator mimics the
trace's shape -- about half whole-GPU pods, a few multi-GPU gangs, fractional shares clustered
around 0.25-0.8 -- without copying any of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.core.io import read_frame, write_frame
from schedlab.gpooling.devices import CATALOGUE, GIB, PhysicalDevice, StaticBackend
from schedlab.gpooling.simulator import Job
from schedlab.gpooling.state import FULL, Request
from schedlab.traces.alibaba_gpu2023 import Pod

MIB = 1 << 20
#: fractional shares and their weights: the generator's stand-in for the trace's histogram
SHARES = np.array([100, 200, 250, 320, 470, 500, 650, 810])
SHARE_WEIGHTS = np.array([0.06, 0.08, 0.10, 0.12, 0.22, 0.12, 0.10, 0.20])


def heterogeneous_cluster(devices: int) -> list[PhysicalDevice]:
    """A mixed NVIDIA/AMD pool of about ``devices`` accelerators (T4, A10, V100M32, G2, MI100)."""
    mix = {"T4": 0.3, "G2": 0.2, "A10": 0.2, "V100M32": 0.15, "MI100": 0.15}
    counts = {m: max(1, int(round(devices * share))) for m, share in mix.items()}
    return StaticBackend(",".join(f"{m}:{c}" for m, c in counts.items())).discover()


def synthetic_trace(jobs: int, devices: Sequence[PhysicalDevice], seed: int, *,
                    load: float = 0.9, mean_duration: float = 1800.0) -> list[Job]:
    """``jobs`` pods arriving as a Poisson process whose offered compute is ``load`` x pool.

    Offered load counts what the pods *ask for*; under device-level allocation the same pods
    occupy far more, which is the waste gPooling removes.
    """
    if jobs < 1 or not devices:
        raise BadInputError("need jobs >= 1 and a non-empty pool", field="jobs")
    if not math.isfinite(load) or load <= 0:
        raise BadInputError(f"must be a finite number > 0, got {load}", field="load")
    rng = np.random.default_rng(seed)
    kind = rng.choice(3, size=jobs, p=[0.45, 0.53, 0.02])  # whole GPU, fractional, gang
    milli = np.where(kind == 1, rng.choice(SHARES, size=jobs, p=SHARE_WEIGHTS), FULL)
    count = np.where(kind == 2, rng.choice([2, 4, 8], size=jobs, p=[0.5, 0.3, 0.2]), 1)
    largest = max(d.spec.memory for d in devices)
    whole_memory = rng.uniform(6, 30, size=jobs) * GIB
    share_memory = milli / FULL * rng.uniform(0.3, 1.0, size=jobs) * 16 * GIB
    memory = np.where(kind == 1, share_memory, whole_memory)
    memory = np.minimum((memory // (256 * MIB) + 1) * 256 * MIB, largest).astype(np.int64)
    duration = rng.lognormal(np.log(mean_duration) - 0.5, 1.0, size=jobs)
    demand = float((milli * count * duration).sum()) / FULL  # device-seconds asked for
    span = demand / (load * len(devices))
    arrival = np.sort(rng.uniform(0.0, span, size=jobs))
    return [Job(i, float(arrival[i]), float(duration[i]),
                Request(int(memory[i]), int(milli[i]), int(count[i])))
            for i in range(jobs)]


_POD_COLUMNS = {"gpu_milli": int, "num_gpu": int, "creation_time": float, "deletion_time": float}


def read_pod_trace(path: str | Path, *, memory_per_gpu: int = 16 * GIB,
                   time_scale: float = 1.0, limit: int | None = None) -> list[Job]:
    """Jobs from an Alibaba pod list (CSV or Parquet); CPU-only pods (num_gpu 0) are skipped.

    ``time_scale`` < 1 compresses arrivals (more load on the same pool); durations are kept.
    A pod still running at the end of the trace runs until its recorded deletion time.
    """
    path = Path(path)
    if not math.isfinite(time_scale) or time_scale <= 0:
        raise BadInputError(f"must be a finite number > 0, got {time_scale}", field="time-scale")
    if limit is not None and limit < 1:
        raise BadInputError(f"must be at least 1, got {limit}", field="limit")
    if memory_per_gpu < 1:
        raise BadInputError("must be at least one byte", field="memory-per-gpu")
    frame = read_frame(path, required=_POD_COLUMNS)
    optional = [c for c in ("scheduled_time", "gpu_memory_mib", "gpu_spec") if c in frame.columns]
    header = 2 if path.suffix.lower() == ".csv" else 1
    for column in ("scheduled_time", "gpu_memory_mib"):
        if column in frame.columns:
            frame = frame.with_columns(_optional_number(frame[column], path, header))
    jobs: list[Job] = []
    for n, row in enumerate(frame.select([*_POD_COLUMNS, *optional]).iter_rows(named=True)):
        if limit is not None and len(jobs) >= limit:
            break
        job = _pod_to_job(row, len(jobs), memory_per_gpu, time_scale, path, n + header)
        if job is not None:
            jobs.append(job)
    if not jobs:
        raise BadInputError("the trace has no GPU pods", path=path, field="num_gpu")
    start = min(j.arrival for j in jobs)
    return [Job(j.id, j.arrival - start, j.duration, j.request) for j in jobs]


def _optional_number(series: pl.Series, path: Path, header: int) -> pl.Series:
    """Cast an optional numeric column; blanks stay null, anything else unparsable is named."""
    cast = series.cast(pl.Float64, strict=False)
    text = series.cast(pl.String).str.strip_chars()
    bad = cast.is_null() & text.is_not_null() & (text != "")
    if bad.any():
        index = int(bad.arg_max())
        raise BadInputError(f"value {series[index]!r} is not a number", path=path,
                            line=index + header, field=series.name)
    return cast


def _pod_to_job(row: dict, index: int, memory_per_gpu: int, time_scale: float, path: Path,
                line: int) -> Job | None:
    def bad(message: str, column: str) -> BadInputError:
        return BadInputError(message, path=path, line=line, field=column)

    for column in _POD_COLUMNS:
        if row[column] is None:
            raise bad("missing value", column)
    if row["num_gpu"] < 0:
        raise bad("must not be negative", "num_gpu")
    if row["num_gpu"] == 0:
        return None
    milli = row["gpu_milli"]
    if not 0 < milli <= FULL:
        raise bad(f"must be in 1..{FULL}, got {milli}", "gpu_milli")
    created, deleted = row["creation_time"], row["deletion_time"]
    started = row.get("scheduled_time")
    started = created if started is None or started != started else float(started)
    if not (np.isfinite(created) and np.isfinite(deleted)) or created < 0:
        raise bad("times must be finite and non-negative", "creation_time")
    if deleted < started:
        raise bad("deletion before start", "deletion_time")
    memory_mib = row.get("gpu_memory_mib")
    if memory_mib is not None and memory_mib == memory_mib:
        try:
            memory = int(float(memory_mib)) * MIB
        except (TypeError, ValueError) as exc:
            raise bad(f"'{memory_mib}' is not a number", "gpu_memory_mib") from exc
        if memory < 0:
            raise bad("must not be negative", "gpu_memory_mib")
    else:
        memory = milli * memory_per_gpu // FULL
    spec = row.get("gpu_spec") or None
    model = spec if spec in CATALOGUE else None  # alternatives ("A|B") are not constraints here
    duration = max(float(deleted - started), 1.0)
    return Job(index, float(created) * time_scale, duration,
               Request(memory, int(milli), int(row["num_gpu"]), model))


def write_pod_trace(jobs: Sequence[Job], path: str | Path) -> Path:
    """Write jobs in the pod-list format (plus ``gpu_memory_mib``), atomically."""
    frame = pl.DataFrame(dict(
        name=[f"pod-{j.id:06d}" for j in jobs],
        num_gpu=[j.request.count for j in jobs],
        gpu_milli=[j.request.milli for j in jobs],
        gpu_memory_mib=[j.request.memory // MIB for j in jobs],
        gpu_spec=[j.request.model or "" for j in jobs],
        creation_time=[round(j.arrival, 3) for j in jobs],
        scheduled_time=[round(j.arrival, 3) for j in jobs],
        deletion_time=[round(j.arrival + j.duration, 3) for j in jobs],
    ))
    return write_frame(frame, path)


def resampled_pods(pods: Sequence[Pod], gpus: int, load: float, *, horizon: float = 86_400.0,
                   max_life: float = 86_400.0, seed: int = 0) -> list[Pod]:
    """Pods drawn from ``pods`` (with replacement, each keeping its CPU, memory, GPU request and
    recorded lifetime, truncated at ``max_life``) arriving as a Poisson process over
    ``horizon`` seconds at the rate that offers ``load`` x the GPU capacity of ``gpus`` GPUs.

    This is the time-based counterpart of FGD's inflation: the trace's own request mix and
    lifetimes, with the arrival rate as the load knob (the public pod list alone offers only
    ~0.002 of its node list's capacity, see ``simulator.replay``).
    """
    if not math.isfinite(load) or load <= 0:
        raise BadInputError(f"must be a finite number > 0, got {load}", field="load")
    if gpus < 1 or horizon <= 0 or max_life <= 0:
        raise BadInputError("need gpus >= 1 and a positive horizon and max_life",
                            field="horizon")
    source = [p for p in pods if p.deletion_time >= p.creation_time]
    if not any(p.num_gpu for p in source):
        raise BadInputError("no GPU pods to resample", field="trace")
    life = np.array([min(max(p.deletion_time - (p.scheduled_time if p.scheduled_time
                                                 is not None else p.creation_time), 1.0),
                         max_life) for p in source])
    demand = np.array([p.gpu_demand for p in source], dtype=float) / FULL
    per_pod = float((demand * life).mean())  # GPU-seconds one draw offers on average
    count = max(1, int(round(load * gpus * horizon / per_pod)))
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(source), size=count)
    arrival = np.sort(rng.uniform(0.0, horizon, size=count))
    return [replace(source[k], name=f"draw-{i:07d}", creation_time=float(arrival[i]),
                    scheduled_time=float(arrival[i]),
                    deletion_time=float(arrival[i] + life[k]))
            for i, k in enumerate(picks)]
