"""What the diagnosers look at: tier cost models, contention and producer-consumer analysis.

DataFlowDrs (paper 09, part (d)) quantifies bottlenecks on the DFL graph. This module derives,
from one trace, the facts every diagnoser (policies.py) may use:

* a cost model per storage tier, ``time = latency + bytes / bandwidth`` per I/O call, fitted by
  bounded least squares to the calls' lower envelope, since contention only adds time (tiers
  the run did not touch fall back to their configured model plus the measured per-call
  overhead);
* storage contention per tier: measured I/O time over the uncontended model, and the mean
  number of tasks doing I/O on the tier at once;
* producer-consumer pairs: for every intermediate file, who wrote it, who read it, how long it
  lived and on which tier.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from schedlab.core.metrics import union_length
from schedlab.dataflowdrs.compress import Compressed, compress
from schedlab.dataflowdrs.dfl import DFL, _tier_of, build_dfl
from schedlab.dataflowdrs.traces import TraceData

IDEAL_BLOCK = 1 << 20  # the call size a coalesced access would use
# the most program work per I/O call that fewer calls would remove: interpreter / library
# overhead (a Python file call ~5-20 us, an HDF5 chunk ~30-100 us). A longer gap between
# calls is per-byte work (gzip compressing the block it read) that coalescing keeps.
PER_CALL_WORK = 50e-6
_MIN_OVERHEAD = 2e-6
_MIN_FIT_BYTES = 32 * 1024  # below this per-call sizes say nothing about bandwidth


@dataclass(frozen=True)
class TierModel:
    """Per-call cost on a tier: ``latency + bytes / bandwidth`` (bandwidth inf: unthrottled)."""

    latency: float
    bandwidth: float
    observed: bool

    def cost(self, ops: float, nbytes: float) -> float:
        return ops * self.latency + nbytes / self.bandwidth


@dataclass
class Analysis:
    """One run, analysed: the DFL, its compression, tier models and the derived tables."""

    dfl: DFL
    compressed: Compressed
    tier_models: dict[str, TierModel]
    contention: pl.DataFrame
    producer_consumer: pl.DataFrame
    issues: list = field(default_factory=list)
    cores: int = 1
    call_cpu: float = _MIN_OVERHEAD  # CPU seconds one traced I/O call costs (not sleeping)
    available_cores: float = 1.0  # cores the tasks actually got when several ran together
    trace: TraceData | None = None  # what was read (meta: source, nprocs, modules)
    profile: pl.DataFrame | None = None  # I/O counters per (task, file, module)
    io_spans: dict = field(default_factory=dict)  # task -> first to last I/O call (s)
    call_gap: dict = field(default_factory=dict)  # task -> median time between calls (s)

    def best_tier(self, ops: float, nbytes: float) -> tuple[str, float]:
        """The tier where ``ops`` calls moving ``nbytes`` would cost least, and that cost."""
        costs = {t: m.cost(ops, nbytes) for t, m in self.tier_models.items()}
        name = min(costs, key=costs.get)
        return name, costs[name]


def _least_squares_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Latency and seconds per byte through per-row means (Darshan's counters average many
    calls per (rank, file), so a row's time is not one call's and its lower envelope says
    little: the minimum of a handful of means would drop the per-byte term)."""
    if len(y) >= 2 and np.ptp(x) > 0:
        (lat, per_byte), *_ = np.linalg.lstsq(np.column_stack([np.ones_like(x), x]), y,
                                              rcond=None)
        return float(lat), float(per_byte)
    return (float(np.median(y)) if len(y) else _MIN_OVERHEAD), 0.0


def _lower_envelope_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Latency and seconds per byte of the *uncontended* calls: the lower envelope.

    Queueing behind other tasks only ever adds time, so a plain least-squares line through
    every call is pulled about by contention (on a loaded machine an empty EOF read can wait as
    long as a 64 KiB one, giving a flat or negative slope and an infinite bandwidth). Instead
    each size bucket (half a power of two) keeps its fastest call, and the line is fitted
    through those minima with both coefficients bounded below (``scipy.optimize.lsq_linear``).
    The "minimum" is the 10th percentile, so one lucky call does not set it. A per-byte term
    is fitted only when calls reach ``_MIN_FIT_BYTES``: between an empty EOF read and a 512 B
    read the difference is per-call work, not bandwidth (dd bs=512 would otherwise get a
    bandwidth that makes its calls look cheap to coalesce).
    """
    if not len(y):
        return _MIN_OVERHEAD, 0.0
    buckets = np.round(2.0 * np.log2(x + 1.0)).astype(int)
    keys = np.unique(buckets)
    bx = np.array([x[buckets == k].mean() for k in keys])
    by = np.array([np.quantile(y[buckets == k], 0.1) for k in keys])
    if len(keys) < 2 or bx.max() < _MIN_FIT_BYTES:
        return float(np.quantile(y, 0.1)), 0.0
    from scipy.optimize import lsq_linear

    scale = max(float(bx.max()), 1.0)  # keep the two columns comparable for the solver
    design = np.column_stack([np.ones_like(bx), bx / scale])
    fit = lsq_linear(design, by, bounds=([_MIN_OVERHEAD, 0.0], [np.inf, np.inf]))
    return float(fit.x[0]), float(fit.x[1]) / scale


def fit_tier_models(trace: TraceData, tiers: dict) -> tuple[dict[str, TierModel], float]:
    """Uncontended latency/bandwidth per tier from the traced read/write calls.

    Also returns the per-call overhead (fitted latency less the configured one, smallest over
    tiers): the CPU a call costs in the kernel and the tracer, as opposed to waiting on storage.
    """
    ops = trace.ops.filter(pl.col("op").is_in(["read", "write"]) & (pl.col("path") != ""))
    tier_col = [_tier_of(p, tiers) for p in ops["path"].to_list()]
    ops = ops.with_columns(pl.Series("tier", tier_col, dtype=pl.String))
    models: dict[str, TierModel] = {}
    overheads = []
    for (tier,), part in ops.group_by(["tier"]):
        calls = part["calls"].to_numpy().astype(float).clip(min=1)
        x = part["bytes"].to_numpy().astype(float) / calls  # per call (Darshan rows: many)
        y = part["dur"].to_numpy() / calls
        if part["calls"].max() > 1:  # aggregated counters (Darshan): each row is already a mean
            lat, per_byte = _least_squares_fit(x, y)
        else:  # one row per traced call: contention shows, so fit its lower envelope
            lat, per_byte = _lower_envelope_fit(x, y)
        lat = max(float(lat), _MIN_OVERHEAD)
        bw = 1.0 / per_byte if per_byte > 1e-15 else float("inf")
        models[tier] = TierModel(lat, bw, True)
        configured = tiers.get(tier, {})
        overheads.append(lat - float(configured.get("latency") or 0.0))
    overhead = max(_MIN_OVERHEAD, min(overheads)) if overheads else _MIN_OVERHEAD
    for name, info in tiers.items():
        if name not in models:
            bw = info.get("bandwidth") or float("inf")
            models[name] = TierModel(overhead + float(info.get("latency") or 0.0), bw, False)
    return models, overhead


def contention_table(dfl: DFL, models: dict[str, TierModel]) -> pl.DataFrame:
    """Per tier: bytes, calls, time, slowdown over the uncontended model, mean concurrency."""
    rows = []
    for (tier,), part in dfl.access.group_by(["tier"]):
        model = models.get(tier)
        time = float(part["time"].sum())
        ideal = model.cost(float(part["ops"].sum()), float(part["bytes"].sum())) if model else 0
        spans = sorted(zip(part["first"].to_list(), part["last"].to_list(), strict=True))
        busy = union_length(spans)
        active = sum(b - a for a, b in spans)
        rows.append(dict(tier=tier, bytes=int(part["bytes"].sum()), ops=int(part["ops"].sum()),
                         io_time=time, slowdown=time / ideal if ideal > 0 else 1.0,
                         concurrency=active / busy if busy > 0 else 0.0))
    schema = {"tier": pl.String, "bytes": pl.Int64, "ops": pl.Int64, "io_time": pl.Float64,
              "slowdown": pl.Float64, "concurrency": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort("io_time", descending=True)


def producer_consumer(dfl: DFL) -> pl.DataFrame:
    """Every file written and read in the run: producer, consumers, lifetime, tier, bytes."""
    writes = dfl.access.filter(pl.col("op") == "write").select(
        "path", pl.col("task").alias("producer"), pl.col("last").alias("written"),
        pl.col("bytes").alias("bytes_written"), "tier", "file_group")
    reads = dfl.access.filter(pl.col("op") == "read").group_by("path").agg(
        pl.col("task").alias("consumers"), pl.col("first").min().alias("first_read"),
        pl.col("last").max().alias("last_read"), pl.col("bytes").sum().alias("bytes_read"),
        pl.col("time").sum().alias("read_time"))
    table = writes.join(reads, on="path", how="inner")
    return table.with_columns(
        (pl.col("first_read") - pl.col("written")).alias("handoff_gap"),
        (pl.col("last_read") - pl.col("written")).alias("lifetime"),
        pl.col("consumers").list.len().alias("n_consumers"),
    ).sort("bytes_read", descending=True)


def available_cores(tasks: pl.DataFrame, cores: int) -> float:
    """How many cores the run's tasks really got while two or more ran at once.

    Each task's measured CPU time over its duration is its share of a core; summed over the
    tasks running in a stretch of time, that is what the machine gave the workflow. On a
    machine shared with other users it is below the core count, and splitting work further
    helps less. Without CPU measurements, assume the cores were ours.
    """
    if "cpu" not in tasks.columns or tasks["cpu"].null_count() == tasks.height:
        return float(cores)
    rows = [(r["start"], r["end"], min(1.0, (r["cpu"] or 0.0) / r["duration"]))
            for r in tasks.iter_rows(named=True) if r["duration"] > 0 and r["cpu"] is not None]
    edges = sorted({t for a, b, _ in rows for t in (a, b)})
    weighted = length = 0.0
    for lo, hi in zip(edges, edges[1:], strict=False):
        running = [rate for a, b, rate in rows if a < hi and b > lo]
        if len(running) >= 2:
            weighted += sum(running) * (hi - lo)
            length += hi - lo
    if length == 0:
        return float(cores)
    return float(min(cores, max(1.0, weighted / length)))


def analyse(trace: TraceData) -> Analysis:
    """Build everything the diagnosers need from one trace."""
    dfl = build_dfl(trace)
    models, overhead = fit_tier_models(trace, dfl.tiers)
    from schedlab.dataflowdrs.insights import io_profile

    cores = int(trace.meta.get("cores") or os.cpu_count() or 1)
    pid_task = dict(zip(dfl.tasks["pid"].to_list(), dfl.tasks["task"].to_list(), strict=True))
    profile = io_profile(trace, pid_task)
    fallback = dfl.tasks["task"][0] if dfl.tasks.height == 1 else None
    spans: dict[str, float] = {}
    gap: dict[str, float] = {}
    if trace.ops.height:
        # the program's own work per I/O call: the median gap between one call's end and the
        # next call's start (a task's few long compute stretches do not move the median)
        per_pid = (trace.ops.sort("pid", "ts").with_columns(
            (pl.col("ts") - (pl.col("ts") + pl.col("dur")).shift(1).over("pid"))
            .clip(lower_bound=0).alias("gap"))
            .group_by("pid").agg(
                ((pl.col("ts") + pl.col("dur")).max() - pl.col("ts").min()).alias("span"),
                pl.col("gap").drop_nulls().median().alias("gap")))
        for pid, span, median in per_pid.iter_rows():
            task = pid_task.get(pid, fallback or f"pid-{pid}")
            spans[task] = spans.get(task, 0.0) + float(span)
            gap[task] = min(PER_CALL_WORK, max(gap.get(task, 0.0), float(median or 0.0)))
    return Analysis(dfl=dfl, compressed=compress(dfl.graph), tier_models=models,
                    contention=contention_table(dfl, models),
                    producer_consumer=producer_consumer(dfl), issues=list(trace.issues),
                    cores=cores, call_cpu=overhead,
                    available_cores=available_cores(dfl.tasks, cores), trace=trace,
                    profile=profile, io_spans=spans, call_gap=gap)
