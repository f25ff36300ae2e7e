"""Bottleneck kinds from the field: metadata, misaligned I/O, shared files, read-after-write.

DataFlowDrs (paper 09, part (d)) ranks bottlenecks by the time they cost. The DFL findings
(policies.py: slow tier, small I/O, serial task, parallelism) need task events; the ones here
need I/O *counters*, which every input has: an :func:`io_profile` per (task, file, module) --
Darshan's own counters for a Darshan log, the same counters counted from the calls for a
dftracer or strace trace. Each finding carries its evidence (counts, rates, times) and a
saving in seconds:

* ``metadata``     open/stat/create/unlink calls: their time plus the program's own work per
                   call (the task's median gap between consecutive I/O calls, so long compute
                   stretches are not charged), times ``1 - 1/files`` (packing the files into
                   one container removes all but one open/stat);
* ``misaligned-io`` requests whose file offset is not a multiple of the alignment (Darshan's
                   ``POSIX_FILE_ALIGNMENT``, else 4 KiB): half their data time (a straddling
                   request touches two blocks; aligned, one);
* ``shared-file``  a file several ranks/tasks write: rank imbalance on it (slowest minus
                   fastest rank's I/O time, Darshan) or, for traces, the overlap of the
                   writers' I/O on it;
* ``slow-storage-target`` (Darshan, LUSTRE module) OSTs under half the median OST's
                   bandwidth: the slowest rank's I/O time on them above the median's;
* ``read-after-write`` an intermediate file a task reads after another task wrote it on
                   storage: the consumer's read time and the hand-off gap on the critical path
                   (passing it in memory or on node-local storage removes them).

Scope: for traces the critical path's tasks (sum); for a Darshan log the slowest rank (MPI
ranks run side by side): per-rank times plus shared (rank -1) records' times over nprocs.
"""

from __future__ import annotations

from collections import defaultdict

import polars as pl

from schedlab.core.metrics import union_length
from schedlab.dataflowdrs.darshan import PROFILE_SCHEMA, SMALL
from schedlab.dataflowdrs.traces import METADATA_KINDS, TraceData

ALIGNMENT = 4096
MISALIGNED_SHARE = 0.1  # below this share of requests, misalignment is not a finding


def io_profile(trace: TraceData, pid_task: dict[int, str] | None = None) -> pl.DataFrame:
    """Counters per (task, file, module): the log's own for Darshan, else counted from calls."""
    if trace.profile is not None:
        return trace.profile
    if pid_task is None:
        pid_task = dict(zip(trace.tasks["pid"].to_list(), trace.tasks["task"].to_list(),
                            strict=True))
    fallback = trace.tasks["task"][0] if trace.tasks.height == 1 else None
    ops = trace.ops.filter(pl.col("path") != "")
    tasks = [pid_task.get(p, fallback or f"pid-{p}") for p in ops["pid"].to_list()]
    ops = ops.with_columns(pl.Series("task", tasks, dtype=pl.String))
    data = pl.col("op").is_in(["read", "write"])
    known = pl.col("offset").is_not_null() & data & (pl.col("bytes") > 0)
    table = ops.group_by(["task", "path"]).agg(
        (pl.col("op") == "open").sum().alias("opens"),
        (pl.col("op") == "stat").sum().alias("stats"),
        (pl.col("op") == "meta").sum().alias("meta_ops"),
        ((pl.col("op") == "read") & (pl.col("bytes") > 0)).sum().alias("reads"),
        ((pl.col("op") == "write") & (pl.col("bytes") > 0)).sum().alias("writes"),
        pl.col("bytes").filter(pl.col("op") == "read").sum().alias("bytes_read"),
        pl.col("bytes").filter(pl.col("op") == "write").sum().alias("bytes_written"),
        ((pl.col("op") == "read") & (pl.col("bytes") > 0) & (pl.col("bytes") < SMALL))
        .sum().alias("small_reads"),
        ((pl.col("op") == "write") & (pl.col("bytes") > 0) & (pl.col("bytes") < SMALL))
        .sum().alias("small_writes"),
        (known & (pl.col("offset") % ALIGNMENT != 0)).sum().alias("misaligned"),
        pl.col("dur").filter(pl.col("op") == "read").sum().alias("read_time"),
        pl.col("dur").filter(pl.col("op") == "write").sum().alias("write_time"),
        pl.col("dur").filter(pl.col("op").is_in(list(METADATA_KINDS))).sum()
        .alias("meta_time"),
    )
    writers = (table.filter(pl.col("writes") > 0).group_by("path")
               .agg(pl.len().alias("_writers")))
    table = table.join(writers, on="path", how="left").with_columns(
        pl.lit(0, dtype=pl.Int64).alias("rank"),
        pl.lit("POSIX").alias("module"), pl.lit(0, dtype=pl.Int64).alias("mem_misaligned"),
        pl.lit(0, dtype=pl.Int64).alias("seq_reads"),
        pl.lit(0, dtype=pl.Int64).alias("seq_writes"),
        pl.lit(0, dtype=pl.Int64).alias("max_byte_read"),
        pl.lit(0, dtype=pl.Int64).alias("max_byte_written"),
        pl.lit(0, dtype=pl.Int64).alias("coll_ops"), pl.lit(0, dtype=pl.Int64).alias(
            "indep_ops"), pl.lit(0.0).alias("slowest_time"), pl.lit(0.0).alias("fastest_time"),
        (pl.col("_writers").fill_null(0) >= 2).alias("shared"), pl.lit("").alias("osts"))
    return table.select([pl.col(k).cast(t) for k, t in PROFILE_SCHEMA.items()])


_TIMES = ["read_time", "write_time", "meta_time"]
_COUNTS = ["opens", "stats", "meta_ops", "reads", "writes", "small_reads", "small_writes",
           "misaligned"]
_SUMS = [*_COUNTS, "bytes_read", "bytes_written", *_TIMES]


def _scope(profile: pl.DataFrame, critical: set[str], darshan: bool,
           nprocs: int) -> dict[str, pl.DataFrame]:
    """Rows that count, for traces: the critical tasks' (one unit, ``critical path``)."""
    if not darshan:
        return {"critical path": profile.filter(pl.col("task").is_in(list(critical)))}
    raise ValueError("Darshan logs are scoped per rank by rank_sums()")


def rank_sums(profile: pl.DataFrame, nprocs: int,
              modules: list[str] | None = None) -> pl.DataFrame:
    """Per MPI rank, in one pass: the rank's own counters plus the shared (rank -1) records'
    over nprocs (counts rounded per record), and ``meta_files``, the distinct files the rank
    (or the shared records) opened or stat'ed. One row per rank (``unit`` "rank N"), or one
    row "every rank" when the log has only shared records; no per-rank Python loop."""
    if modules is not None:
        profile = profile.filter(pl.col("module").is_in(modules))
    scale = 1.0 / max(1, nprocs)
    shared = profile.filter(pl.col("rank") < 0).with_columns(
        [pl.col(t) * scale for t in _TIMES]
        + [(pl.col(c) * scale).round().cast(pl.Int64) for c in _COUNTS])
    own = profile.filter(pl.col("rank") >= 0)
    meta = pl.col("opens") + pl.col("stats") + pl.col("meta_ops") > 0
    shared_sums = shared.select([pl.col(c).sum() for c in _SUMS]).row(0, named=True)
    shared_meta = set(shared.filter(meta)["path"].to_list())
    if own.height == 0:
        row = {c: shared_sums[c] or 0 for c in _SUMS}
        return pl.DataFrame([dict(unit="every rank", rank=-1, **row,
                                  meta_files=len(shared_meta))])
    sums = own.group_by("rank").agg([pl.col(c).sum() for c in _SUMS])
    own_meta = own.filter(meta).select("rank", "path").unique()
    if shared_meta:  # files a rank opened that the shared records also name count once
        own_meta = own_meta.filter(~pl.col("path").is_in(list(shared_meta)))
    files = own_meta.group_by("rank").agg(pl.len().alias("meta_files"))
    return (sums.join(files, on="rank", how="left")
            .with_columns([pl.col(c) + (shared_sums[c] or 0) for c in _SUMS]
                          + [pl.col("meta_files").fill_null(0) + len(shared_meta),
                             pl.format("rank {}", pl.col("rank")).alias("unit")])
            .sort("rank"))


def _sum_row(rows: pl.DataFrame) -> dict:
    s = rows.select([pl.col(c).sum() for c in _SUMS]).row(0, named=True)
    meta = pl.col("opens") + pl.col("stats") + pl.col("meta_ops") > 0
    s["meta_files"] = rows.filter(meta)["path"].n_unique()
    return s


def io_share(trace: TraceData, profile: pl.DataFrame, critical: set[str],
             makespan: float) -> dict:
    """How I/O-bound the run is: I/O-call seconds (data + metadata) of the critical path's
    tasks (traces) or of the slowest rank (Darshan), over the run's length."""
    darshan = trace.meta.get("source") == "darshan"
    nprocs = int(trace.meta.get("nprocs") or 1)
    if darshan:
        sums = rank_sums(profile, nprocs)
        worst = float(sums.select(pl.sum_horizontal(_TIMES).max()).item() or 0.0)
    else:
        rows = _scope(profile, critical, False, nprocs)["critical path"]
        worst = float(rows.select(pl.col(*_TIMES).sum()).sum_horizontal()[0] or 0.0
                      ) if rows.height else 0.0
    length = float(trace.meta.get("runtime") or makespan or 0.0)
    return dict(io_seconds=worst, run_seconds=length,
                io_share=min(1.0, worst / length) if length > 0 else 0.0,
                scope="slowest rank" if darshan else "critical path")


def field_findings(trace: TraceData, profile: pl.DataFrame, critical: set[str],
                   gaps: dict[str, float], producer_consumer: pl.DataFrame | None = None,
                   best_cost=None) -> list[tuple[str, str, float, str]]:
    """(kind, target, saving seconds, evidence) for the kinds this module covers."""
    darshan = trace.meta.get("source") == "darshan"
    nprocs = int(trace.meta.get("nprocs") or 1)
    best: dict[tuple[str, str], tuple[float, str]] = {}

    def keep(kind: str, target: str, saving: float, evidence: str) -> None:
        if saving > 0 and saving > best.get((kind, target), (0.0, ""))[0]:
            best[(kind, target)] = (saving, evidence)

    if darshan:
        for s in rank_sums(profile, nprocs).iter_rows(named=True):
            _metadata(s, s["unit"], 0.0, True, keep)
            _misaligned(s, s["unit"], keep)
    else:
        for unit, rows in _scope(profile, critical, darshan, nprocs).items():
            if rows.height == 0:
                continue
            # the program's own work per call (median gap between calls), per task
            per_task = rows.group_by("task").agg(
                (pl.col("opens") + pl.col("stats") + pl.col("meta_ops")).sum().alias("n"))
            extra = sum(gaps.get(t, 0.0) * n for t, n in per_task.iter_rows())
            s = _sum_row(rows)
            _metadata(s, unit, extra, False, keep)
            _misaligned(s, unit, keep)
    _shared(profile, trace, critical, keep)
    if darshan:
        _storage_targets(profile, keep)
    if producer_consumer is not None and not darshan:
        _read_after_write(producer_consumer, critical, keep, best_cost)
    return [(k, t, s, e) for (k, t), (s, e) in best.items()]


def _metadata(s: dict, unit: str, extra: float, darshan: bool, keep) -> None:
    n_files = s["meta_files"]
    meta_calls = s["opens"] + s["stats"] + s["meta_ops"]
    if meta_calls == 0 or n_files < 2:
        return
    io_time = s["meta_time"] + s["read_time"] + s["write_time"]
    saving = (s["meta_time"] + extra) * (1 - 1 / n_files)
    rate = meta_calls / max(io_time + extra, 1e-9)
    keep("metadata", "workflow" if not darshan else "job", saving,
         f"{unit}: {s['opens']} opens, {s['stats']} stats, {s['meta_ops']} other namespace "
         f"calls over {n_files} files; {s['meta_time']:.3f} s in them "
         f"({s['meta_time'] / max(io_time, 1e-12):.0%} of I/O-call time), "
         f"{rate:.0f} metadata calls/s of I/O activity; {s['reads'] + s['writes']} data calls")


def _misaligned(s: dict, unit: str, keep) -> None:
    calls = s["reads"] + s["writes"]
    if not calls or not s["misaligned"]:
        return
    share = min(1.0, s["misaligned"] / calls)
    if share < MISALIGNED_SHARE:
        return
    saving = 0.5 * share * (s["read_time"] + s["write_time"])
    keep("misaligned-io", "job" if unit.startswith(("rank", "every")) else "workflow", saving,
         f"{unit}: {s['misaligned']} of {calls} requests ({share:.0%}) not aligned to "
         f"the file-system block; {s['read_time'] + s['write_time']:.3f} s of data I/O")


def _shared(profile: pl.DataFrame, trace: TraceData, critical: set[str], keep) -> None:
    darshan = trace.meta.get("source") == "darshan"
    if darshan:
        shared = profile.filter(pl.col("shared") & (pl.col("module") == "POSIX"))
        for r in shared.iter_rows(named=True):
            spread = max(0.0, r["slowest_time"] - r["fastest_time"])
            keep("shared-file", r["path"], spread,
                 f"{r['path']}: one file for all ranks ({r['bytes_written']} B written, "
                 f"{r['writes']} writes); slowest rank {r['slowest_time']:.3f} s vs fastest "
                 f"{r['fastest_time']:.3f} s in I/O on it")
        return
    ops = trace.ops.filter(pl.col("op") == "write")
    writers = profile.filter(pl.col("shared"))
    for path in set(writers["path"].to_list()):
        tasks = writers.filter(pl.col("path") == path)
        if not set(tasks["task"].to_list()) & critical:
            continue
        calls = ops.filter(pl.col("path") == path)
        total = float(calls["dur"].sum())
        spans = sorted(zip(calls["ts"].to_list(), (calls["ts"] + calls["dur"]).to_list(),
                           strict=True))
        busy = union_length(spans)
        overlap = max(0.0, total - busy)  # time writers spent on it at the same time
        keep("shared-file", path, overlap,
             f"{path}: written by {tasks.height} tasks; {total:.3f} s of write calls, "
             f"{overlap:.3f} s of them overlapping")


SLOW_TARGET = 0.5  # a storage target under half the median target's bandwidth is slow


def _storage_targets(profile: pl.DataFrame, keep) -> None:
    """Lustre OSTs far slower than the others (Darshan LUSTRE module): the time the slowest
    rank lost on them -- its files' I/O time above what the median OST's bandwidth gives."""
    rows = profile.filter((pl.col("module") == "POSIX") & (pl.col("osts") != "")).with_columns(
        (pl.col("bytes_read") + pl.col("bytes_written")).alias("b"),
        (pl.col("read_time") + pl.col("write_time")).alias("t"))
    rows = rows.filter((pl.col("b") > 0) & (pl.col("t") > 0))
    single = rows.filter(~pl.col("osts").str.contains(","))  # one target: attributable
    per_ost = single.group_by("osts").agg(pl.col("b").sum(), pl.col("t").sum(), pl.len())
    if per_ost.height < 3:
        return
    per_ost = per_ost.with_columns((pl.col("b") / pl.col("t")).alias("bw"))
    median = float(per_ost["bw"].median())
    slow = per_ost.filter(pl.col("bw") < SLOW_TARGET * median)
    if slow.height == 0 or median <= 0:
        return
    slow_ids = set(slow["osts"].to_list())
    lost = (single.filter(pl.col("osts").is_in(list(slow_ids)))
            .with_columns((pl.col("t") - pl.col("b") / median).clip(lower_bound=0).alias("x"))
            .group_by("rank").agg(pl.col("x").sum()))
    saving = float(lost["x"].max() or 0.0)
    worst = slow.sort("bw").row(0, named=True)
    keep("slow-storage-target", "OST " + ",".join(sorted(slow_ids, key=int)), saving,
         f"{slow.height} of {per_ost.height} OSTs under {SLOW_TARGET:.0%} of the median "
         f"OST's {median / 1e6:.0f} MB/s (OST {worst['osts']}: {worst['bw'] / 1e6:.0f} MB/s "
         f"over {worst['len']} files); the slowest rank lost {saving:.3f} s on them")


def _read_after_write(pc: pl.DataFrame, critical: set[str], keep, best_cost=None) -> None:
    """Saving: what reading the intermediates back costs even on the fastest tier (staging
    to a faster tier is the slow-tier finding's; passing data in memory removes the rest)."""
    by_file: dict[str, list] = defaultdict(list)
    for r in pc.iter_rows(named=True):
        consumers = [c for c in r["consumers"] if c != r["producer"]]
        if not consumers or not (set(consumers) | {r["producer"]}) & critical:
            continue
        by_file[r["file_group"]].append((r, consumers))
    for group, items in by_file.items():
        read = sum(r["read_time"] for r, _ in items)
        floor = sum(best_cost(max(1.0, -(-r["bytes_read"] // (1 << 20))), r["bytes_read"])
                    for r, _ in items) if best_cost else read
        first = items[0][0]
        keep("read-after-write", group, min(read, floor),
             f"{len(items)} files of group {group} written then read by another task "
             f"(e.g. {first['path']}: {first['producer']} -> {', '.join(items[0][1][:3])}, "
             f"hand-off gap {first['handoff_gap']:.3f} s); {read:.3f} s reading them back "
             f"from {first['tier']}")


__all__ = ["ALIGNMENT", "field_findings", "io_profile", "io_share", "rank_sums"]
