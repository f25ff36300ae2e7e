"""Trace replay: run a workflow's tasks through an allocator on a pool of workers.

The engine of X-Bucket's evaluation (../shared/papers/15-xbucket.md). It knows nothing of the
policy: it asks ``allocate``, runs the attempt against the task's true peaks, and reports back
with ``observe``. Per attempt, a success wastes (allocation - peak) x wall time; a failure
(any type exceeded) wastes the whole allocation x the time until it was killed
(``kill_fraction`` x wall time; 1.0 = at the end, the conservative reading) and the task is
retried with ``last_failed`` set.

Tasks are all ready at time 0 (a dynamic workflow's frontier) and dispatched first-come
first-served onto ``workers`` identical machines, packed concurrently by their allocations
(at most ``slots`` at once per worker; ``workers=1, slots=1`` is the one-at-a-time replay the
reference comparison uses). A retry goes to the head of the queue. Discrete events on a heap.

``only="memory"`` (or ``"cores"``, ``"disk"``) replays that resource alone, as cctools' harness
does: the other types are given exactly the task's peak (they never fail and waste nothing), so
a failure is charged to the resource that caused it only. ``only=None`` is the joint replay: a
task short of any type fails and its whole allocation of every type is wasted.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from schedlab.core.errors import ConfigError, SchedlabError
from schedlab.xbucket.policies import Allocator
from schedlab.xbucket.types import RESOURCES, Machine, ResourceReport, Resources, Task

Semantics = Literal["peak", "allocation"]


@dataclass(frozen=True)
class ReplayConfig:
    """How the replay runs; every field is a documented model parameter."""

    workers: int = 1
    slots: int | None = 1  # concurrent tasks per worker; None = as many as the resources allow
    semantics: Semantics = "peak"  # what a failed attempt reports for the exceeded type
    kill_fraction: float = 1.0  # share of the wall time a failed attempt ran before its kill
    machine: Machine | None = None  # None: Machine.trace_max(tasks)
    max_attempts: int = 64
    only: str | None = None  # replay one resource type alone (per-resource mode)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError("must be at least 1", field="workers")
        if self.slots is not None and self.slots < 1:
            raise ConfigError("must be at least 1 (or None)", field="slots")
        if self.semantics not in ("peak", "allocation"):
            raise ConfigError("must be 'peak' or 'allocation'", field="semantics")
        if not 0.0 <= self.kill_fraction <= 1.0:
            raise ConfigError("must be within [0, 1]", field="kill_fraction")
        if self.only is not None and self.only not in RESOURCES:
            raise ConfigError(f"must be one of {', '.join(RESOURCES)} or None", field="only")


@dataclass
class Replay:
    """Every attempt of a replay, as columns (one row per attempt), plus the makespan."""

    attempts: pl.DataFrame
    makespan: float
    machine: Machine


def _report(task: Task, allocation: Resources, semantics: Semantics) -> ResourceReport:
    exceeded = task.peak.exceeded(allocation)
    if not exceeded or semantics == "peak":
        return ResourceReport(allocation, task.peak, task.wall_time, exceeded)
    usage = Resources(*(
        allocation.get(name) if name in exceeded else task.peak.get(name)
        for name in ("cores", "memory", "disk")))
    return ResourceReport(allocation, usage, task.wall_time, exceeded)


def _cap(allocation: Resources, machine: Resources) -> Resources:
    if allocation.fits_in(machine) and min(allocation.as_tuple()) >= 0:
        return allocation
    return Resources(*(min(max(a, 0.0), m) for a, m in
                       zip(allocation.as_tuple(), machine.as_tuple(), strict=True)))


def _alone(allocation: Resources, peak: Resources, only: int) -> Resources:
    """The allocation of type ``only``; every other type exactly the task's peak."""
    values = list(peak.as_tuple())
    values[only] = allocation.as_tuple()[only]
    return Resources(*values)


class _Pool:
    """Free capacity and running count of each worker."""

    def __init__(self, workers: int, machine: Machine, slots: int | None) -> None:
        self.free = np.tile(np.asarray(machine.resources.as_tuple(), dtype=float), (workers, 1))
        self.running = np.zeros(workers, dtype=np.int64)
        self.slots = slots

    def place(self, allocation: Resources) -> int:
        need = np.asarray(allocation.as_tuple())
        fits = np.all(self.free >= need - 1e-9, axis=1)
        if self.slots is not None:
            fits &= self.running < self.slots
        where = np.flatnonzero(fits)
        if where.size == 0:
            return -1
        worker = int(where[0])
        self.free[worker] -= need
        self.running[worker] += 1
        return worker

    def release(self, worker: int, allocation: Resources) -> None:
        self.free[worker] += np.asarray(allocation.as_tuple())
        self.running[worker] -= 1


def replay(tasks: list[Task], allocator: Allocator, config: ReplayConfig | None = None) -> Replay:
    """Replay ``tasks`` (in order) through ``allocator``; returns every attempt and the makespan."""
    config = config or ReplayConfig()
    machine = config.machine or Machine.trace_max(tasks)
    only = None if config.only is None else RESOURCES.index(config.only)
    capacity = machine.resources
    for index, task in enumerate(tasks):
        if not task.peak.fits_in(capacity):
            raise SchedlabError(f"task {task.task_id} needs more than one worker ({capacity})",
                                field=f"tasks[{index}]")
    pool = _Pool(config.workers, machine, config.slots)
    queue: deque[tuple[int, ResourceReport | None, int]] = deque(
        (i, None, 0) for i in range(len(tasks)))
    events: list[tuple[float, int, int, int, Resources, int]] = []  # end, seq, task, worker, ...
    rows: list[tuple] = []
    now, seq = 0.0, 0
    head: tuple[int, Resources, int] | None = None  # decided allocation of the queue's head
    while queue or events:
        while queue:
            index, failed, attempt = queue[0]
            task = tasks[index]
            if head is None or head[0] != index:
                wanted = allocator.allocate(task.category, failed, task.declared)
                if only is not None:
                    wanted = _alone(wanted, task.peak, only)
                head = (index, _cap(wanted, capacity), attempt)
            allocation = head[1]
            worker = pool.place(allocation)
            if worker < 0:
                if not events:
                    raise SchedlabError("an allocation fits no idle worker", field="allocation")
                break
            queue.popleft()
            head = None
            report = _report(task, allocation, config.semantics)
            duration = task.wall_time * (1.0 if report.success else config.kill_fraction)
            rows.append((index, attempt, *allocation.as_tuple(), duration, report.success,
                         now, worker))
            heapq.heappush(events, (now + duration, seq, index, worker, allocation, attempt))
            seq += 1
        if not events:
            break
        now, _, index, worker, allocation, attempt = heapq.heappop(events)
        pool.release(worker, allocation)
        task = tasks[index]
        report = _report(task, allocation, config.semantics)
        allocator.observe(task.category, report)
        head = None  # decide the head's allocation again, with what was just learned
        if not report.success:
            if attempt + 1 >= config.max_attempts:
                raise SchedlabError(f"task {task.task_id} still failing after {attempt + 1} "
                                    f"attempts with {allocator.name}", field="max_attempts")
            queue.appendleft((index, report, attempt + 1))
    return Replay(_attempt_frame(rows, tasks), now, machine)


_ATTEMPT_SCHEMA = {
    "task": pl.Int64, "attempt": pl.Int64, "alloc_cores": pl.Float64,
    "alloc_memory": pl.Float64, "alloc_disk": pl.Float64, "duration": pl.Float64,
    "success": pl.Boolean, "start": pl.Float64, "worker": pl.Int64,
}


def _attempt_frame(rows: list[tuple], tasks: list[Task]) -> pl.DataFrame:
    frame = pl.DataFrame(rows, schema=_ATTEMPT_SCHEMA, orient="row")
    peaks = np.asarray([t.peak.as_tuple() for t in tasks]).reshape(-1, 3)
    times = np.asarray([t.wall_time for t in tasks])
    index = frame["task"].to_numpy()
    return frame.with_columns(
        pl.Series("peak_cores", peaks[index, 0] if len(index) else []),
        pl.Series("peak_memory", peaks[index, 1] if len(index) else []),
        pl.Series("peak_disk", peaks[index, 2] if len(index) else []),
        pl.Series("wall_time", times[index] if len(index) else []),
    )
