"""Bottleneck diagnosers: DataFlowDrs and the baselines it is compared against.

DataFlowDrs (paper 09, part (d)) quantifies each candidate bottleneck as the time it would save
on the *critical path* of the DFL graph, separating slow storage (bytes over a slow tier),
small-I/O storms (calls that could be coalesced), serial fan-in tasks (compute that could be
split) and too little parallelism (tasks queued for a worker while resources idle), then ranks
them. The baselines are what a workflow user has without it:

* ``io-volume``  Darshan-style totals: the file group that moved most bytes is the bottleneck.
* ``io-time``    an I/O profiler: the file group with most time in I/O calls (not path-aware).
* ``task-time``  a task profiler: the task group with most run time; serial if one instance.

Every diagnoser implements :class:`Diagnoser` and is listed in :data:`DIAGNOSERS`; the
experiment and the CLI take the name and never branch on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import polars as pl

from schedlab.core.registry import lookup
from schedlab.dataflowdrs.bottleneck import Bottleneck, Diagnoser
from schedlab.dataflowdrs.diagnosis import IDEAL_BLOCK, Analysis

__all__ = ["DIAGNOSERS", "Bottleneck", "DataFlowDrs", "Diagnoser", "IoTime", "IoVolume", "TaskTime",
           "make_diagnoser"]

SMALL_CALL = 64 * 1024  # calls smaller than this on average are a small-I/O pattern


def _sorted(found: dict[tuple[str, str], list]) -> list[Bottleneck]:
    items = [Bottleneck(kind, target, float(v[0]), v[1]) for (kind, target), v in found.items()
             if v[0] > 0]
    return sorted(items, key=lambda b: (-b.saving, b.kind, b.target))


FINDING_FLOOR = 0.10  # under this share of the run in I/O calls: not I/O-bound
MIN_SAVING = 0.01  # an I/O finding must save at least this share of the run
NOT_IO = frozenset({"serial-task", "parallelism"})  # compute / scheduling kinds: no floor


def io_share_of(analysis: Analysis) -> float:
    """The run's I/O-call share (insights.io_share): slowest rank or critical path."""
    if analysis.trace is None or analysis.profile is None:
        return 1.0
    from schedlab.dataflowdrs.insights import io_share

    critical = set(analysis.dfl.tasks.filter(pl.col("critical"))["task"].to_list())
    return io_share(analysis.trace, analysis.profile, critical,
                    analysis.dfl.makespan)["io_share"]


def run_length(analysis: Analysis) -> float:
    """The run's length: the job's run time (Darshan) or the traced makespan."""
    meta = analysis.trace.meta if analysis.trace is not None else {}
    if meta.get("source") == "darshan":
        return float(meta.get("runtime") or 0.0)
    return float(analysis.dfl.makespan or 0.0)


class DataFlowDrs:
    """Critical-path, tier-model and pattern-aware ranking (the paper's method)."""

    name = "dataflowdrs"

    def __init__(self) -> None:
        self.below_floor: list[Bottleneck] = []  # I/O findings the floor held back (last rank)

    def rank(self, analysis: Analysis) -> list[Bottleneck]:
        found: dict[tuple[str, str], list] = {}
        darshan = analysis.trace is not None and analysis.trace.meta.get("source") == "darshan"
        if darshan:  # counters, no task events: the slowest rank's time per kind
            _darshan_data(analysis, found)
        else:
            self._io(analysis, found)
            self._serial(analysis, found)
            # tasks inferred from a bare trace have no scheduler events: a gap before one
            # starts is process start-up or the program's own pacing, not a worker queue
            if not (analysis.trace is not None and analysis.trace.meta.get("tasks_inferred")):
                self._parallelism(analysis, found)
        self._field(analysis, found)
        if darshan:  # a rank cannot save more than the job ran (blocked opens can sum higher)
            runtime = float(analysis.trace.meta.get("runtime") or 0.0)
            for entry in found.values():
                if runtime and entry[0] > runtime:
                    entry[0] = runtime
                    entry[1] += f" (capped at the job's {runtime:.0f} s)"
        run = run_length(analysis)
        if not darshan and run > 0:  # no cause saves more than the whole run
            for entry in found.values():
                if entry[0] > run:
                    entry[0] = run
                    entry[1] += f" (capped at the run's {run:.3g} s)"
        ranked = _sorted(found)
        # the floor: a run that spends under FINDING_FLOOR of its time in I/O calls is not
        # I/O-bound and gets no I/O finding (a 5-file "pack-files" on a job that spends 6 %
        # of its time in I/O); in any run, an I/O cause worth under MIN_SAVING of it is noise
        share = io_share_of(analysis)
        self.below_floor = [b for b in ranked if b.kind not in NOT_IO and run > 0 and (
            share < FINDING_FLOOR or b.saving < MIN_SAVING * run)]
        return [b for b in ranked if b not in self.below_floor]

    def _field(self, analysis: Analysis, found: dict) -> None:
        """Metadata, misaligned, shared-file and read-after-write findings (insights.py)."""
        if analysis.trace is None or analysis.profile is None:
            return
        from schedlab.dataflowdrs.insights import field_findings

        critical = set(analysis.dfl.tasks.filter(pl.col("critical"))["task"].to_list())
        for kind, target, saving, evidence in field_findings(
                analysis.trace, analysis.profile, critical, analysis.call_gap,
                analysis.producer_consumer, lambda o, b: analysis.best_tier(o, b)[1]):
            self._add(found, (kind, target), saving, evidence)

    @staticmethod
    def _add(found: dict, key: tuple[str, str], saving: float, evidence: str) -> None:
        entry = found.setdefault(key, [0.0, evidence])
        entry[0] += saving

    def _io(self, analysis: Analysis, found: dict) -> None:
        """Split each critical I/O access into tier time and call-count time."""
        dfl = analysis.dfl
        critical = dfl.tasks.filter(pl.col("critical")).select("task", "group")
        rows = dfl.access.join(critical, on="task", how="inner")
        calls: dict[str, list[float]] = {}
        for r in rows.iter_rows(named=True):
            model = analysis.tier_models.get(r["tier"])
            if model is None or r["time"] <= 0:
                continue
            # calls that moved bytes: an end-of-file read returning 0 is not coalescable
            ops, nbytes = float(max(r["data_ops"], 1)), float(r["bytes"])
            ideal = max(1.0, min(ops, -(-nbytes // IDEAL_BLOCK)))
            predicted = model.cost(ops, nbytes)
            scale = r["time"] / predicted if predicted > 0 else 1.0  # contention inflation
            best, best_cost = analysis.best_tier(ideal, nbytes)
            tier_saving = scale * max(0.0, model.cost(ideal, nbytes) - best_cost)
            self._add(found, ("slow-tier", r["file_group"]), tier_saving,
                      f"on tier {r['tier']} ({model.bandwidth / 1e6:.3g} MB/s, "
                      f"{model.latency * 1e6:.0f} us/call fitted); {best} would be faster")
            if nbytes / max(ops, 1.0) >= SMALL_CALL:
                continue
            # a storm also costs the program's own per-call work between calls: the task's
            # median gap between consecutive calls, per call (not the span, which would
            # charge the work between calls on *other* files -- e.g. opening them -- to it)
            span = min(max(r["time"], r["last"] - r["first"]),
                       r["time"] + analysis.call_gap.get(r["task"], 0.0) * ops)
            # fewer calls remove per-call costs only (the tier's fitted per-call latency,
            # inflated by the contention seen, plus the program's per-call work), never the
            # per-byte time: a block-reading tool such as gzip keeps its copying
            per_call = scale * model.latency + analysis.call_gap.get(r["task"], 0.0)
            saving = min(span * max(0.0, 1.0 - ideal / ops), (ops - ideal) * per_call)
            self._add(found, ("small-io", r["group"]), max(0.0, saving), "")
            total = calls.setdefault(r["group"], [0.0, 0.0])
            total[0] += ops
            total[1] += nbytes
        for group, (ops, nbytes) in calls.items():
            if ("small-io", group) in found:
                found[("small-io", group)][1] = (f"{int(ops)} calls of {nbytes / ops:.0f} B "
                                                 f"on average on the critical path")

    def _serial(self, analysis: Analysis, found: dict) -> None:
        """Fan-in tasks on the critical path whose compute could be split across workers."""
        dfl = analysis.dfl
        tasks = dfl.tasks
        if tasks.height == 0:
            return
        floor = float(tasks["compute"].min())  # process start-up every task pays
        workers = max(1, min(dfl.parallelism, os.cpu_count() or 1))
        fan_in = _fan_in_tasks(analysis)
        for r in tasks.filter(pl.col("critical")).iter_rows(named=True):
            if r["task"] not in fan_in or workers < 2:
                continue
            saving = max(0.0, r["compute"] - floor) * (1 - 1 / workers)
            self._add(found, ("serial-task", r["group"]), saving,
                      f"{r['compute']:.3f} s of compute in one fan-in task")

    def _parallelism(self, analysis: Analysis, found: dict) -> None:
        """Critical-path queueing for a worker, counted only where CPUs had room to spare.

        While a critical task waited for a slot, the running tasks demanded
        sum(cpu/duration) CPUs (cpu: compute plus the CPU part of I/O calls); more workers
        only help with the cores left over.
        """
        tasks = analysis.dfl.tasks
        if tasks.height == 0:
            return
        cores = analysis.cores
        calls = dict(analysis.dfl.access.group_by("task").agg(pl.col("ops").sum()).iter_rows())
        rows = list(tasks.iter_rows(named=True))
        for r in rows:  # CPU time = compute + the CPU part of I/O calls; the rest of I/O waits
            r["cpu"] = min(r["duration"], r["compute"] + calls.get(r["task"], 0) *
                           analysis.call_cpu)
            r["sleep"] = max(0.0, r["io"] - (r["cpu"] - r["compute"]))
        saving, queued = 0.0, 0.0
        for r in rows:
            if not r["critical"] or r["wait"] <= 0:
                continue
            lo, hi = r["start"] - r["wait"], r["start"]
            cpu = io = 0.0
            for o in rows:
                overlap = max(0.0, min(hi, o["end"]) - max(lo, o["start"]))
                if o["duration"] > 0 and o["task"] != r["task"] and overlap > 0:
                    cpu += o["cpu"] / o["duration"] * overlap
                    io += o["sleep"] / o["duration"] * overlap
            # idle CPUs help only if storage is not the thing everyone is waiting for
            busy = max(cpu / (r["wait"] * cores), io / r["wait"])
            saving += r["wait"] * max(0.0, 1.0 - busy)
            queued += r["wait"]
        self._add(found, ("parallelism", "workflow"), saving,
                  f"{queued:.3f} s queued for a worker on the critical path "
                  f"(parallelism {analysis.dfl.parallelism}, {cores} cores)")


def _darshan_data(analysis: Analysis, found: dict) -> None:
    """Small requests on a Darshan log: per rank (shared records' time over nprocs), the data
    time that 1 MiB requests would save, on the slowest rank."""
    from schedlab.dataflowdrs.insights import rank_sums

    nprocs = int(analysis.trace.meta.get("nprocs") or 1)
    best = (0.0, "")
    for s in rank_sums(analysis.profile, nprocs, ["POSIX", "STDIO"]).iter_rows(named=True):
        unit = s["unit"]
        calls = s["reads"] + s["writes"]
        small = s["small_reads"] + s["small_writes"]
        if not calls or not small:
            continue
        ideal = max(1.0, -(-(s["bytes_read"] + s["bytes_written"]) // IDEAL_BLOCK))
        data = s["read_time"] + s["write_time"]
        saving = data * (small / calls) * max(0.0, 1 - ideal / calls)
        if saving > best[0]:
            best = (saving, f"{unit}: {small} of {calls} requests under 1 MiB "
                            f"({small / calls:.0%}); {data:.3f} s of data I/O")
    if best[0] > 0:
        found[("small-io", "job")] = [best[0], best[1]]


def _fan_in_tasks(analysis: Analysis) -> set[str]:
    """Tasks that read files written by two or more tasks of one other group."""
    graph = analysis.dfl.graph
    result = set()
    for node, data in graph.nodes(data=True):
        if data["kind"] != "task":
            continue
        producers: dict[str, set] = {}
        for file in graph.predecessors(node):
            for producer in graph.predecessors(file):
                group = graph.nodes[producer].get("group")
                producers.setdefault(group, set()).add(producer)
        if any(len(p) >= 2 for p in producers.values()):
            result.add(node[1])
    return result


class IoVolume:
    """Baseline: Darshan-style aggregate volume per file group."""

    name = "io-volume"

    def rank(self, analysis: Analysis) -> list[Bottleneck]:
        totals = (analysis.dfl.access.group_by("file_group")
                  .agg(pl.col("bytes").sum(), pl.col("time").sum())
                  .sort(["bytes", "file_group"], descending=[True, False]))
        # only the order matters to this baseline: the largest volume first, then the rest
        found = {("slow-tier", r["file_group"]): [float(totals.height - i), f"{r['bytes']} B"]
                 for i, r in enumerate(totals.iter_rows(named=True)) if r["bytes"] > 0}
        return _sorted(found)


class IoTime:
    """Baseline: total time in I/O calls per file group, whole run (no critical path)."""

    name = "io-time"

    def rank(self, analysis: Analysis) -> list[Bottleneck]:
        totals = analysis.dfl.access.group_by("file_group").agg(pl.col("time").sum())
        return _sorted({("slow-tier", r["file_group"]): [float(r["time"]), "I/O time"]
                        for r in totals.iter_rows(named=True)})


class TaskTime:
    """Baseline: the task group with the most run time; serial when it has one instance."""

    name = "task-time"

    def rank(self, analysis: Analysis) -> list[Bottleneck]:
        totals = analysis.dfl.tasks.group_by("group").agg(pl.col("duration").sum(),
                                                          pl.len().alias("n"))
        found = {}
        for r in totals.iter_rows(named=True):
            kind = "serial-task" if r["n"] == 1 else "parallelism"
            target = r["group"] if kind == "serial-task" else "workflow"
            key = (kind, target)
            if key not in found or found[key][0] < r["duration"]:
                found[key] = [float(r["duration"]), f"group {r['group']}: {r['n']} tasks"]
        return _sorted(found)


def _drishti() -> Diagnoser:
    from schedlab.dataflowdrs.drishti import DrishtiBaseline

    return DrishtiBaseline()


_drishti.__doc__ = "Baseline: Drishti's published insight rules and thresholds (drishti.py)."

DIAGNOSERS: dict[str, Callable[[], Diagnoser]] = {
    "dataflowdrs": DataFlowDrs,
    "io-volume": IoVolume,
    "io-time": IoTime,
    "task-time": TaskTime,
    "drishti": _drishti,
}


def make_diagnoser(name: str) -> Diagnoser:
    return lookup(DIAGNOSERS, "diagnoser", name)()
