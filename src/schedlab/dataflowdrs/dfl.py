"""The data-flow lifecycle (DFL) graph: tasks and files, edges weighted by bytes and time.

DataFlowDrs (paper 09) models a workflow run as a DFL graph: a task node has its measured
duration, a file node its size and tier, and each producer->file / file->consumer edge carries
the bytes moved, the number of I/O calls and the time spent in them (from the tracer). From it
come the per-task time breakdown (queue wait, I/O, compute) and the critical path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath

import networkx as nx
import polars as pl

from schedlab.dataflowdrs.traces import TraceData

_DIGITS = re.compile(r"\d+")


def group_name(name: str) -> str:
    """A task or file's group when the workflow did not say: its name with numbers removed."""
    stem = PurePath(name).name.split(".")[0]
    return _DIGITS.sub("", stem).strip("_-") or stem


@dataclass
class DFL:
    """The DFL graph of one run plus the tables it was built from."""

    graph: nx.DiGraph
    tasks: pl.DataFrame  # one row per task: times, io, compute, wait, critical
    access: pl.DataFrame  # one row per (task, file, direction): bytes, ops, time, tier
    makespan: float
    parallelism: int
    tiers: dict  # tier -> {root, bandwidth, latency}
    deps: dict[str, set[str]]  # task -> tasks it read data from

    def dependency_path(self) -> float:
        """Longest chain of measured task durations over data edges only (no queueing)."""
        duration = dict(zip(self.tasks["task"].to_list(), self.tasks["duration"].to_list(),
                            strict=True))
        dag = nx.DiGraph()
        dag.add_nodes_from(duration)
        dag.add_edges_from((d, t) for t, ds in self.deps.items() for d in ds if d in duration)
        if not nx.is_directed_acyclic_graph(dag):
            return max(duration.values(), default=0.0)
        finish: dict[str, float] = {}
        for node in nx.topological_sort(dag):
            finish[node] = duration.get(node, 0.0) + max(
                (finish[p] for p in dag.predecessors(node)), default=0.0)
        return max(finish.values(), default=0.0)


def _tier_of(path: str, tiers: dict) -> str:
    best, best_len = "other", -1
    for name, info in tiers.items():
        root = str(info.get("root", ""))
        if root and (path == root or path.startswith(root.rstrip("/") + "/")):
            if len(root) > best_len:
                best, best_len = name, len(root)
    if best == "other" and path.startswith("/"):
        parts = PurePath(path).parts
        return "/".join(parts[:3]) if len(parts) > 2 else path
    return best


def _access_table(trace: TraceData, pid_task: dict[int, str], tiers: dict,
                  file_groups: dict) -> pl.DataFrame:
    ops = trace.ops.filter(pl.col("op").is_in(["read", "write"]) & (pl.col("path") != ""))
    fallback = trace.tasks["task"][0] if trace.tasks.height == 1 else None
    task_col = [pid_task.get(p, fallback or f"pid-{p}") for p in ops["pid"].to_list()]
    ops = ops.with_columns(pl.Series("task", task_col, dtype=pl.String))
    table = ops.group_by(["task", "path", "op"]).agg(
        pl.col("bytes").sum().alias("bytes"), pl.col("calls").sum().alias("ops"),
        pl.col("calls").filter(pl.col("bytes") > 0).sum().alias("data_ops"),
        pl.col("dur").sum().alias("time"), pl.col("ts").min().alias("first"),
        (pl.col("ts") + pl.col("dur")).max().alias("last"))
    paths = table["path"].to_list()
    return table.with_columns(
        pl.Series("tier", [_tier_of(p, tiers) for p in paths], dtype=pl.String),
        pl.Series("file_group", [file_groups.get(p) or group_name(p) for p in paths],
                  dtype=pl.String),
    ).sort(["task", "path", "op"])


def _dependencies(tasks: pl.DataFrame, access: pl.DataFrame) -> dict[str, set[str]]:
    """Task -> producers of what it read: declared by the runner, else inferred from the trace."""
    producer: dict[str, str] = {}
    for row in tasks.iter_rows(named=True):
        for path in row["outputs"] or []:
            producer[path] = row["task"]
    for row in access.filter(pl.col("op") == "write").iter_rows(named=True):
        producer.setdefault(row["path"], row["task"])
    deps: dict[str, set[str]] = {t: set() for t in tasks["task"].to_list()}
    reads = {(r["task"], r["path"]) for r in access.filter(pl.col("op") == "read").iter_rows(
        named=True)}
    for row in tasks.iter_rows(named=True):
        reads |= {(row["task"], p) for p in row["inputs"] or []}
    for task, path in reads:
        source = producer.get(path)
        if source is not None and source != task and task in deps:
            deps[task].add(source)
    return deps


def critical_path(tasks: pl.DataFrame, deps: dict[str, set[str]],
                  slack: float = 5e-3) -> list[str]:
    """The chain of tasks that determined the makespan, walked back from the last to finish.

    A task started either when its last dependency finished (a data edge) or, when it started
    later than that, when a worker slot freed up: then the task that finished just before it
    started is its predecessor (a resource edge), as in resource-constrained scheduling.
    """
    if tasks.height == 0:
        return []
    ids = tasks["task"].to_list()
    start = dict(zip(ids, tasks["start"].to_list(), strict=True))
    end = dict(zip(ids, tasks["end"].to_list(), strict=True))
    by_end = sorted(ids, key=end.get)
    node = by_end[-1]
    path, seen = [node], {node}
    while True:
        gate = max((end[d] for d in deps.get(node, ()) if d in end), default=None)
        if gate is not None and start[node] - gate <= slack:
            node = max((d for d in deps[node] if d in end), key=end.get)
        else:
            earlier = [t for t in by_end if end[t] <= start[node] + slack and t not in seen]
            if not earlier or (gate is None and start[node] - min(start.values()) <= slack):
                break
            node = earlier[-1]
        if node in seen:
            break
        path.append(node)
        seen.add(node)
    return path[::-1]


def build_dfl(trace: TraceData) -> DFL:
    """Assemble the DFL graph and the per-task breakdown from one trace."""
    meta = trace.meta
    tiers = meta.get("tiers", {})
    tasks = trace.tasks
    pid_task = dict(zip(tasks["pid"].to_list(), tasks["task"].to_list(), strict=True))
    access = _access_table(trace, pid_task, tiers, meta.get("file_groups", {}))
    deps = _dependencies(tasks, access)
    io = access.group_by("task").agg(pl.col("time").sum().alias("io"))
    end = dict(zip(tasks["task"].to_list(), tasks["end"].to_list(), strict=True))
    gate = [max((end[d] for d in deps.get(t, ()) if d in end), default=r)
            for t, r in zip(tasks["task"].to_list(), tasks["ready"].to_list(), strict=True)]
    table = (tasks.with_columns(pl.Series("gate", gate, dtype=pl.Float64))
             .join(io, on="task", how="left")
             .with_columns(pl.col("io").fill_null(0.0),
                           (pl.col("end") - pl.col("start")).alias("duration"),
                           (pl.col("start") - pl.col("gate")).clip(lower_bound=0).alias("wait"))
             .with_columns((pl.col("duration") - pl.col("io")).clip(lower_bound=0)
                           .alias("compute")))
    cp = set(critical_path(table, deps))
    table = table.with_columns(pl.col("task").is_in(list(cp)).alias("critical"))
    t0 = float(meta.get("t0", table["start"].min() if table.height else 0.0))
    makespan = float(meta.get("makespan", (table["end"].max() or t0) - t0)) if table.height \
        else 0.0
    graph = _graph(table, access, deps)
    return DFL(graph, table, access, makespan, int(meta.get("parallelism", 1)), tiers, deps)


def _graph(tasks: pl.DataFrame, access: pl.DataFrame, deps: dict[str, set[str]]) -> nx.DiGraph:
    graph = nx.DiGraph()
    for row in tasks.iter_rows(named=True):
        graph.add_node(("task", row["task"]), kind="task", group=row["group"],
                       time=row["duration"], io=row["io"], critical=row["critical"])
    for row in access.iter_rows(named=True):
        file = ("file", row["path"])
        if file not in graph:
            graph.add_node(file, kind="file", group=row["file_group"], tier=row["tier"],
                           bytes=0)
        task = ("task", row["task"])
        if task not in graph:
            graph.add_node(task, kind="task", group=group_name(row["task"]), time=0.0, io=0.0,
                           critical=False)
        edge = (task, file) if row["op"] == "write" else (file, task)
        graph.add_edge(*edge, bytes=row["bytes"], ops=row["ops"], time=row["time"],
                       op=row["op"])
        if row["op"] == "write":
            graph.nodes[file]["bytes"] += row["bytes"]
    for task, sources in deps.items():  # declared dependencies with no traced file between
        for source in sources:
            if not nx.has_path(graph, ("task", source), ("task", task)):
                graph.add_edge(("task", source), ("task", task), bytes=0, ops=0, time=0.0,
                               op="dep")
    return graph
