"""One device's work: its streams run their share of a plan and accumulate the response.

Why a module of its own: every backend runs devices the same way — threads in this process
(``runtime.LocalBackend``), Ray actors (``raydevice``) and device processes (``procdevice``) —
and ``runtime`` chooses the backend; the shared loop sits below all three.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError, MissingDependencyError
from schedlab.hip_dfpt.kernels import AoSource, StoredTask, response_task
from schedlab.hip_dfpt.memory import Allocator, BufferPool, NoPool, PoolStats, merge_stats
from schedlab.hip_dfpt.policies import Dispatcher, Plan
from schedlab.hip_dfpt.reduction import FixedPoint


def array_module(gpu: bool) -> Any:
    """NumPy, or CuPy when a GPU run is asked for (and CuPy is installed)."""
    if not gpu:
        return np
    try:
        import cupy
    except ImportError as exc:
        raise MissingDependencyError("GPU runs need CuPy", hint="pip install cupy-cuda12x") from exc
    return cupy


def single_threaded_blas() -> Any:
    """BLAS pinned to one thread per caller: the runtime brings its own parallelism, and a
    task's arithmetic then never depends on how many threads BLAS would have picked."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # not installed: BLAS keeps its own setting
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


@dataclass(frozen=True)
class Throttle:
    """A test device made ``factor`` times slower from ``from_iteration`` (0: calibration, 1:
    the first response evaluation), after it has run ``after_tasks`` tasks of that iteration.

    How: after each task's kernel the same thread busy-loops until its thread CPU time for the
    task reaches ``factor`` times the kernel's, so the slowed device really spends ``factor``x
    the CPU per task (like a GPU at a lower clock). A duty-cycle (sleep) throttle would show in
    wall time only, and wall time on this shared 2-core machine measures the OS scheduler; CPU
    time per process is the yardstick of every live balance here."""

    factor: float
    from_iteration: int = 0
    after_tasks: int = 0

    def __post_init__(self) -> None:
        if not (self.factor >= 1.0 and self.from_iteration >= 0 and self.after_tasks >= 0):
            raise ConfigError(
                "a throttle needs factor >= 1, from_iteration >= 0, after_tasks >= 0",
                field="throttle",
            )

    def active(self, iteration: int, done: int) -> bool:
        return iteration > self.from_iteration or (
            iteration == self.from_iteration and done >= self.after_tasks
        )


def stretch_cpu(start_cpu: float, factor: float) -> None:
    """Busy-loop until this thread has spent ``factor`` x the CPU since ``start_cpu``."""
    target = start_cpu + factor * (time.thread_time() - start_cpu)
    x = 0.0
    while time.thread_time() < target:
        for _ in range(200):
            x += 1.0


@dataclass
class DeviceResult:
    """What one device's streams produced in one iteration.

    ``task_seconds``: wall time of each task measured in place; ``task_cpu``: its thread CPU
    time (the yardstick on a loaded machine, where wall time includes waiting for a core);
    ``overhead_cpu``: the device's CPU time outside its tasks (dispatch, locks, IPC, merging
    the stream partials) in this iteration, when the backend measures it."""

    out: Any
    task_seconds: dict[int, float]
    start: float
    end: float
    steals: int
    pool: PoolStats
    task_cpu: dict[int, float] = field(default_factory=dict)
    overhead_cpu: float = float("nan")


def new_accumulator(ndm: int, nao: int, xp: Any, deterministic: bool) -> Any:
    """A stream's partial result: exact fixed point (bit-reproducible) or a float array."""
    if deterministic:
        return FixedPoint((ndm, nao, nao), xp)
    return xp.zeros((ndm, nao, nao))


def merge_partials(parts: list[Any]) -> Any:
    """Sum stream/device partials: exactly for fixed point, in list order for floats."""
    if isinstance(parts[0], FixedPoint):
        total = FixedPoint(parts[0].hi.shape, parts[0].xp)
        for part in parts:
            total.merge(part)
        return total
    return sum(parts[1:], parts[0])


def _stream_loop(
    device: int,
    stream: int,
    dispatcher: Dispatcher,
    lock: threading.Lock,
    tasks: list[StoredTask],
    dms: Any,
    out: Any,
    alloc: Allocator,
    xp: Any,
    times: dict[int, float],
    cpu: dict[int, float],
    ao_source: AoSource | None = None,
) -> tuple[float, float]:
    begin = time.perf_counter()
    if xp is not np:
        return _gpu_stream_loop(
            device, stream, dispatcher, lock, tasks, dms, out, alloc, xp, times, begin
        )
    while True:
        with lock:
            item = dispatcher.next(device, stream)
        if item is None:
            return begin, time.perf_counter()
        start, start_cpu = time.perf_counter(), time.thread_time()
        response_task(tasks[item.task], dms, out, alloc, xp, ao_source)
        cpu[item.task] = time.thread_time() - start_cpu
        times[item.task] = time.perf_counter() - start


def _gpu_stream_loop(
    device: int,
    stream: int,
    dispatcher: Dispatcher,
    lock: threading.Lock,
    tasks: list[StoredTask],
    dms: Any,
    out: Any,
    alloc: Allocator,
    xp: Any,
    times: dict[int, float],
    begin: float,
) -> tuple[float, float]:
    """A CuPy stream: tasks are enqueued without any per-task synchronisation; CUDA events
    bracket each task and are read once, after the stream's last task (one sync per stream per
    iteration). Host data comes from pinned memory (``pin_store``), so copies are async."""
    gpu_stream = xp.cuda.Stream(non_blocking=True)
    marks: list[tuple[int, Any, Any]] = []
    with gpu_stream:
        while True:
            with lock:
                item = dispatcher.next(device, stream)
            if item is None:
                break
            first, last = xp.cuda.Event(), xp.cuda.Event()
            first.record(gpu_stream)
            response_task(tasks[item.task], dms, out, alloc, xp)
            last.record(gpu_stream)
            marks.append((item.task, first, last))
    gpu_stream.synchronize()
    for task, first, last in marks:
        times[task] = xp.cuda.get_elapsed_time(first, last) / 1e3
    return begin, time.perf_counter()


def run_devices(
    tasks: list[StoredTask],
    plan: Plan,
    dms: Any,
    streams: int,
    allocs: list[list[Allocator]],
    xp: Any = np,
    seed: int = 0,
    deterministic: bool = True,
    ao_source: AoSource | None = None,
) -> list[DeviceResult]:
    """Run every device of ``plan`` with ``streams`` threads each; one result per device."""
    dispatcher, lock = Dispatcher(plan, streams, seed), threading.Lock()
    ndm, nao = dms.shape[0], dms.shape[1]
    devices = plan.devices
    outs = [
        [new_accumulator(ndm, nao, xp, deterministic) for _ in range(streams)]
        for _ in range(devices)
    ]
    times: list[list[dict[int, float]]] = [[{} for _ in range(streams)] for _ in range(devices)]
    cpus: list[list[dict[int, float]]] = [[{} for _ in range(streams)] for _ in range(devices)]
    with ThreadPoolExecutor(max_workers=devices * streams) as pool:
        futures = {
            (d, s): pool.submit(
                _stream_loop,
                d,
                s,
                dispatcher,
                lock,
                tasks,
                dms,
                outs[d][s],
                allocs[d][s],
                xp,
                times[d][s],
                cpus[d][s],
                ao_source,
            )
            for d in range(devices)
            for s in range(streams)
        }
        spans = {key: f.result() for key, f in futures.items()}
    results = []
    for d in range(devices):
        merged: dict[int, float] = {}
        merged_cpu: dict[int, float] = {}
        for s in range(streams):
            merged.update(times[d][s])
            merged_cpu.update(cpus[d][s])
        results.append(
            DeviceResult(
                out=merge_partials(outs[d]),
                task_seconds=merged,
                start=min(spans[d, s][0] for s in range(streams)),
                end=max(spans[d, s][1] for s in range(streams)),
                steals=dispatcher.steals if d == 0 else 0,
                pool=merge_stats(list({id(a): a.stats for a in allocs[d]}.values())),
                task_cpu=merged_cpu,
            )
        )
    return results


def device_allocators(devices: int, streams: int, pooled: bool, xp: Any) -> list[list[Allocator]]:
    """allocs[d][s]: one pool per device shared by its streams, or a fresh-allocation baseline.

    On a GPU each stream gets its own pool: a block released by one stream may still be read by
    its queued kernels, and only that stream's later work is ordered after them."""
    if not pooled:
        return [[NoPool(xp) for _ in range(streams)] for _ in range(devices)]
    if xp is not np:
        return [[BufferPool(xp) for _ in range(streams)] for _ in range(devices)]
    pools = [BufferPool(xp) for _ in range(devices)]
    return [[pools[d]] * streams for d in range(devices)]
