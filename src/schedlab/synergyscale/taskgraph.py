"""Multi-stream task graph: one iteration as tasks on in-order streams (SynergyScale, paper 11).

The paper overlaps computation and data movement by partitioning work into fine-grained tasks on
several concurrent streams. A :class:`TaskGraph` is that partition as plain data: each task has a
kind (compute, h2d, d2h, nvme_read, nvme_write, cpu_adam), a stream, dependencies on earlier
tasks, a callable (for real execution) and a predicted duration (for the cost model).

Three ways to run the same graph, chosen by the caller, never by the policy:

* :func:`run_threads` - one host thread per stream, in-order like a CUDA stream, dependencies
  through events. On CPU this is the real runtime (PyTorch kernels, copies and file I/O release
  the GIL, so streams do overlap).
* :func:`run_cuda` - GPU kinds are enqueued on ``torch.cuda.Stream``s and ordered with
  ``torch.cuda.Event``s; CPU kinds (Adam, NVMe) run on host threads that synchronise on the
  events they depend on. Only runs when ``torch.cuda.is_available()``.
* :func:`simulate` - the same in-order-stream semantics over predicted durations (the analytic
  cost model at A100 scale).

Deadlock freedom: a task only depends on tasks added before it and streams run in the order tasks
were added, so the earliest unfinished task is always runnable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from schedlab.core.errors import SchedlabError
from schedlab.core.metrics import union_length

KINDS = ("compute", "h2d", "d2h", "nvme_read", "nvme_write", "cpu_adam")
GPU_KINDS = frozenset({"compute", "h2d", "d2h"})


@dataclass
class Task:
    id: int
    name: str
    kind: str
    stream: str
    deps: tuple[int, ...]
    fn: Callable[[], None] | None = None
    duration: float = 0.0
    nbytes: int = 0


@dataclass
class TaskGraph:
    """Tasks in submission order (a topological order); ``streams`` maps a kind to its stream."""

    streams: dict[str, str]
    tasks: list[Task] = field(default_factory=list)

    def add(self, name: str, kind: str, deps: list[int | None] | tuple = (),
            fn: Callable[[], None] | None = None, duration: float = 0.0, nbytes: int = 0) -> int:
        if kind not in KINDS:
            raise SchedlabError(f"unknown task kind {kind!r}")
        clean = tuple(sorted({d for d in deps if d is not None}))
        if clean and clean[-1] >= len(self.tasks):
            raise SchedlabError(f"task {name} depends on a later task")
        task = Task(len(self.tasks), name, kind, self.streams[kind], clean, fn, duration, nbytes)
        self.tasks.append(task)
        return task.id

    def stream_names(self) -> list[str]:
        return sorted({t.stream for t in self.tasks})


@dataclass(frozen=True)
class Span:
    task: int
    stream: str
    kind: str
    start: float
    end: float


@dataclass
class Trace:
    spans: list[Span]

    @property
    def makespan(self) -> float:
        return max((s.end for s in self.spans), default=0.0) - min(
            (s.start for s in self.spans), default=0.0)

    def busy(self, kind: str) -> float:
        """Union of the busy intervals of one task kind (streams may share kinds)."""
        return union_length((s.start, s.end) for s in self.spans if s.kind == kind)

    def device_idle_fraction(self) -> float:
        span = self.makespan
        return 0.0 if span <= 0 else max(0.0, 1.0 - self.busy("compute") / span)


def simulate(graph: TaskGraph) -> Trace:
    """In-order streams over predicted durations: start = max(stream free, deps finished)."""
    finish: list[float] = []
    free: dict[str, float] = {}
    spans = []
    for task in graph.tasks:
        start = max([free.get(task.stream, 0.0), *(finish[d] for d in task.deps)])
        end = start + task.duration
        finish.append(end)
        free[task.stream] = end
        spans.append(Span(task.id, task.stream, task.kind, start, end))
    return Trace(spans)


def _stream_queues(graph: TaskGraph) -> dict[str, list[Task]]:
    queues: dict[str, list[Task]] = {}
    for task in graph.tasks:
        queues.setdefault(task.stream, []).append(task)
    return queues


def _run_workers(graph: TaskGraph, work: Callable[[Task, list[threading.Event]], Span]) -> Trace:
    """One thread per stream; the first exception stops every stream and is re-raised."""
    done = [threading.Event() for _ in graph.tasks]
    spans: list[Span] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(queue: list[Task]) -> None:
        for task in queue:
            if errors:
                return
            try:
                span = work(task, done)
            except BaseException as exc:  # surfaced in the caller's thread below
                with lock:
                    errors.append(exc)
                for event in done:
                    event.set()
                return
            with lock:
                spans.append(span)
            done[task.id].set()

    threads = [threading.Thread(target=worker, args=(q,), name=f"stream-{s}", daemon=True)
               for s, q in _stream_queues(graph).items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return Trace(sorted(spans, key=lambda s: s.start))


def run_threads(graph: TaskGraph) -> Trace:
    """Execute every task's callable on a host thread per stream (the CPU runtime)."""
    base = time.perf_counter()

    def work(task: Task, done: list[threading.Event]) -> Span:
        for dep in task.deps:
            done[dep].wait()
        start = time.perf_counter() - base
        if task.fn is not None:
            task.fn()
        return Span(task.id, task.stream, task.kind, start, time.perf_counter() - base)

    return _run_workers(graph, work)


def run_cuda(graph: TaskGraph) -> Trace:  # pragma: no cover - needs a GPU
    """Execute on CUDA streams: GPU kinds are enqueued and ordered with CUDA events."""
    import torch

    if not torch.cuda.is_available():
        raise SchedlabError("run_cuda needs a CUDA device")
    cuda_streams = {s: torch.cuda.Stream() for s in graph.stream_names()}
    events = [torch.cuda.Event(enable_timing=True) for _ in graph.tasks]
    starts = [torch.cuda.Event(enable_timing=True) for _ in graph.tasks]
    host_times: dict[int, tuple[float, float]] = {}
    origin = torch.cuda.Event(enable_timing=True)
    origin.record()
    base = time.perf_counter()

    def work(task: Task, done: list[threading.Event]) -> Span:
        stream = cuda_streams[task.stream]
        for dep in task.deps:
            done[dep].wait()  # the dependency has been enqueued (GPU) or finished (CPU)
            if graph.tasks[dep].kind in GPU_KINDS:
                if task.kind in GPU_KINDS:
                    stream.wait_event(events[dep])
                else:
                    events[dep].synchronize()
        if task.kind in GPU_KINDS:
            with torch.cuda.stream(stream):
                starts[task.id].record(stream)
                if task.fn is not None:
                    task.fn()
                events[task.id].record(stream)
        else:
            start = time.perf_counter() - base
            if task.fn is not None:
                task.fn()
            host_times[task.id] = (start, time.perf_counter() - base)
        return Span(task.id, task.stream, task.kind, 0.0, 0.0)

    _run_workers(graph, work)
    torch.cuda.synchronize()
    spans = []
    for task in graph.tasks:
        if task.kind in GPU_KINDS:
            start = origin.elapsed_time(starts[task.id]) / 1e3
            end = origin.elapsed_time(events[task.id]) / 1e3
        else:
            start, end = host_times[task.id]
        spans.append(Span(task.id, task.stream, task.kind, start, end))
    return Trace(sorted(spans, key=lambda s: s.start))
