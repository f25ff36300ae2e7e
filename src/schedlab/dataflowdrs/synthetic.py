"""Synthetic traces: a workflow's DFL trace from a cost model instead of a real run.

DataFlowDrs (paper 09) analyses traces of any size; real runs here are small. To test the
analysis deterministically and to benchmark it on traces with thousands of tasks, this module
list-schedules a :class:`~schedlab.dataflowdrs.runner.Workflow` on ``parallelism`` workers with
a simple cost model (start-up + hashing work + per-call latency + bytes / bandwidth per tier,
no contention) and emits exactly what the tracer and runner would write: the I/O calls, the
task events and the run metadata. :func:`write_trace` stores it in dftracer's file format.
"""

from __future__ import annotations

import heapq
import json
from pathlib import Path

from schedlab.core.io import ensure_directory, write_text
from schedlab.dataflowdrs.runner import Workflow
from schedlab.dataflowdrs.tiers import TierLayout
from schedlab.dataflowdrs.tracedata import TraceData, ops_frame, tasks_frame

STARTUP_S = 0.02  # process start-up per task
HASH_BPS = 800e6  # hashing speed of the task program
CALL_S = 3e-6  # per-call CPU cost on an unthrottled tier


def _io(layout: TierLayout, path: str, size: int, block: int, op: str, pid: int, t: float,
        rows: list) -> float:
    tier = layout.tiers[layout.tier_of(path) or "tmpfs"]
    latency = CALL_S + tier.latency
    per_byte = 1.0 / tier.bandwidth if tier.bandwidth else 0.0
    left = size
    while True:
        n = min(block, left)
        dur = latency + n * per_byte
        rows.append((pid, t, dur, op, n, path))
        t += dur
        left -= n
        if left <= 0 and (op == "write" or n == 0):
            break
    return t


def simulate_trace(workflow: Workflow, layout: TierLayout, parallelism: int,
                   t0: float = 1_000.0) -> TraceData:
    """The trace a run of ``workflow`` would produce under the cost model above."""
    deps = workflow.dependencies()
    sizes = dict(workflow.initial) | {p: s for t in workflow.tasks for p, s in t.outputs}
    order = {t.id: i for i, t in enumerate(workflow.tasks)}
    by_id = {t.id: t for t in workflow.tasks}
    waiting = {tid: set(d) for tid, d in deps.items() if d}
    ready = {tid: t0 for tid, d in deps.items() if not d}
    free = [t0] * parallelism
    finished: list[tuple[float, str]] = []
    rows: list[tuple] = []
    events: list[dict] = []
    while ready or waiting:
        worker = min(range(parallelism), key=free.__getitem__)
        horizon = max(free[worker], min(ready.values(), default=float("inf")))
        if finished and (not ready or finished[0][0] <= horizon):
            end, done = heapq.heappop(finished)  # release what this completion unblocks
            for tid in list(waiting):
                waiting[tid].discard(done)
                if not waiting[tid]:
                    del waiting[tid]
                    ready[tid] = end
            continue
        tid = min((k for k, r in ready.items() if r <= horizon), key=lambda k: (ready[k],
                                                                                 order[k]))
        gate = ready.pop(tid)
        start = max(gate, free[worker])
        task = by_id[tid]
        pid = 1000 + len(events)
        t = start + STARTUP_S
        for path in task.inputs:
            t = _io(layout, path, sizes[path], task.block, "read", pid, t, rows)
        t += task.work_mb * (1 << 20) / HASH_BPS
        for path, size in task.outputs:
            t = _io(layout, path, size, task.block, "write", pid, t, rows)
        free[worker] = t
        heapq.heappush(finished, (t, tid))
        events.append(dict(task=tid, group=task.group, pid=pid, ready=gate, start=start,
                           end=t, inputs=list(task.inputs),
                           outputs=[p for p, _ in task.outputs]))
    makespan = max(e["end"] for e in events) - t0 if events else 0.0
    meta = dict(workflow=workflow.name, parallelism=parallelism, makespan=makespan, t0=t0,
                cores=parallelism, tracer="synthetic", tiers=layout.as_dict(),
                file_groups=workflow.file_groups, config=workflow.config)
    ops = ops_frame(rows)
    return TraceData(ops=ops, tasks=tasks_frame(events), meta=meta)


def write_trace(trace: TraceData, directory: str | Path) -> Path:
    """Write ``trace`` as dftracer ``.pfw`` files (one per pid), tasks.jsonl and meta.json."""
    out = ensure_directory(directory)
    by_pid: dict[int, list[str]] = {}
    hashes: dict[str, str] = {}
    for pid, ts, dur, op, nbytes, path in trace.ops.select(
            "pid", "ts", "dur", "op", "bytes", "path").iter_rows():
        lines = by_pid.setdefault(pid, [])
        if path not in hashes:
            hashes[path] = f"{len(hashes):016x}"
        lines.append(json.dumps({"name": "FH", "cat": "dftracer", "pid": pid, "ph": "M",
                                 "args": {"name": path, "value": hashes[path]}}))
        lines.append(json.dumps({"id": len(lines), "name": op, "cat": "POSIX", "pid": pid,
                                 "tid": pid, "ts": round(ts * 1e6), "dur": round(dur * 1e6),
                                 "ph": "X", "args": {"ret": nbytes, "count": nbytes,
                                                     "fhash": hashes[path]}}))
    for pid, lines in by_pid.items():
        write_text(out / f"trace-{pid}-preload.pfw", "\n".join(lines) + "\n")
    write_text(out / "tasks.jsonl", "".join(json.dumps(e) + "\n"
                                            for e in trace.tasks.to_dicts()))
    write_text(out / "meta.json", json.dumps(trace.meta, default=str))
    return out
