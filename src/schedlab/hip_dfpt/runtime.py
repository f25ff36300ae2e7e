"""The HIP-DFPT runtime: devices x streams executing micro-tasks from a balancer's plan.

A *device* is a worker with its own streams, buffer pools and partial result: a thread group in
this process (``backend="local"``) or a Ray actor process (``backend="ray"``). A *stream* is a
thread that pulls tasks through the plan's dispatcher, stages each task's batch data into pooled
buffers and integrates it; several streams per device overlap one task's staging with another's
compute (the multi-stream pipeline; CuPy streams on a GPU, threads on CPU, where NumPy releases
the GIL inside copies and BLAS).

Before the first iteration the runtime times a 5% branch-stratified sample of the tasks, fits
the performance model, predicts every task and asks the balancer for a plan (the online model
of the paper). Every iteration records per-task and per-device times, so balance, utilisation
and the model's error are measured, not assumed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError, MissingDependencyError, UnknownNameError
from schedlab.hip_dfpt.dft import TaskStore
from schedlab.hip_dfpt.kernels import StoredTask, response_task
from schedlab.hip_dfpt.memory import Allocator, BufferPool, NoPool, PoolStats, merge_stats
from schedlab.hip_dfpt.perfmodel import make_model, sample_tasks
from schedlab.hip_dfpt.policies import Balancer, Dispatcher, Plan


def array_module(gpu: bool) -> Any:
    """NumPy, or CuPy when a GPU run is asked for (and CuPy is installed)."""
    if not gpu:
        return np
    try:
        import cupy
    except ImportError as exc:
        raise MissingDependencyError("GPU runs need CuPy", hint="pip install cupy-cuda12x") from exc
    return cupy


@dataclass
class DeviceResult:
    """What one device's streams produced in one iteration."""

    out: Any
    task_seconds: dict[int, float]
    start: float
    end: float
    steals: int
    pool: PoolStats


def _stream_loop(device: int, stream: int, dispatcher: Dispatcher, lock: threading.Lock,
                 tasks: list[StoredTask], dms: Any, out: Any, alloc: Allocator, xp: Any,
                 times: dict[int, float]) -> tuple[float, float]:
    begin = time.perf_counter()
    gpu_stream = None if xp is np else xp.cuda.Stream(non_blocking=True)
    while True:
        with lock:
            item = dispatcher.next(device, stream)
        if item is None:
            return begin, time.perf_counter()
        start = time.perf_counter()
        if gpu_stream is None:
            response_task(tasks[item.task], dms, out, alloc, xp)
        else:
            with gpu_stream:
                response_task(tasks[item.task], dms, out, alloc, xp)
            gpu_stream.synchronize()  # per-task timing needs the kernel finished
        times[item.task] = time.perf_counter() - start


def run_devices(tasks: list[StoredTask], plan: Plan, dms: Any, streams: int,
                allocs: list[list[Allocator]], xp: Any = np, seed: int = 0,
                ) -> list[DeviceResult]:
    """Run every device of ``plan`` with ``streams`` threads each; one result per device."""
    dispatcher, lock = Dispatcher(plan, streams, seed), threading.Lock()
    ndm, nao = dms.shape[0], dms.shape[1]
    devices = plan.devices
    outs = [[xp.zeros((ndm, nao, nao)) for _ in range(streams)] for _ in range(devices)]
    times: list[list[dict[int, float]]] = [[{} for _ in range(streams)] for _ in range(devices)]
    with ThreadPoolExecutor(max_workers=devices * streams) as pool:
        futures = {(d, s): pool.submit(_stream_loop, d, s, dispatcher, lock, tasks, dms,
                                       outs[d][s], allocs[d][s], xp, times[d][s])
                   for d in range(devices) for s in range(streams)}
        spans = {key: f.result() for key, f in futures.items()}
    results = []
    for d in range(devices):
        merged: dict[int, float] = {}
        for s in range(streams):
            merged.update(times[d][s])
        results.append(DeviceResult(
            out=sum(outs[d][1:], outs[d][0]), task_seconds=merged,
            start=min(spans[d, s][0] for s in range(streams)),
            end=max(spans[d, s][1] for s in range(streams)),
            steals=dispatcher.steals if d == 0 else 0,
            pool=merge_stats(list({id(a): a.stats for a in allocs[d]}.values()))))
    return results


@dataclass
class IterationStats:
    """Measured times of one response evaluation."""

    wall: float
    device_wall: np.ndarray
    device_busy: np.ndarray
    task_seconds: np.ndarray
    steals: int

    @property
    def balance(self) -> float:
        """Load-balance efficiency as the paper reports it: max / mean device busy time."""
        return float(self.device_busy.max() / self.device_busy.mean())

    @property
    def wall_balance(self) -> float:
        return float(self.device_wall.max() / self.device_wall.mean())


def device_allocators(devices: int, streams: int, pooled: bool, xp: Any) -> list[list[Allocator]]:
    """allocs[d][s]: one pool per device shared by its streams, or a fresh-allocation baseline."""
    if not pooled:
        return [[NoPool(xp) for _ in range(streams)] for _ in range(devices)]
    pools = [BufferPool(xp) for _ in range(devices)]
    return [[pools[d]] * streams for d in range(devices)]


class LocalBackend:
    """Devices as thread groups in this process, sharing the task store."""

    def __init__(self, store: TaskStore, devices: int, streams: int, pooled: bool, xp: Any):
        self.store, self.streams, self.xp = store, streams, xp
        self.allocs = device_allocators(devices, streams, pooled, xp)

    def execute(self, plan: Plan, dms: Any, seed: int) -> list[DeviceResult]:
        return run_devices(self.store.tasks, plan, dms, self.streams, self.allocs, self.xp, seed)

    def close(self) -> None:
        return None


class RayBackend:
    """Devices as Ray actors (processes): each runs its part of the plan with its own streams.

    Tasks never move between actors, so a stealing plan runs as its initial split here.
    """

    def __init__(self, store: TaskStore, devices: int, streams: int, pooled: bool, xp: Any):
        try:
            import ray
        except ImportError as exc:
            raise MissingDependencyError("--executor ray needs Ray",
                                         hint="pip install 'schedlab[ray]'") from exc
        from schedlab.hip_dfpt.raydevice import start_actors

        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            ray.init(num_cpus=max(2, devices), include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        self.actors = start_actors(ray, store.tasks, devices, streams, pooled)

    def execute(self, plan: Plan, dms: Any, seed: int) -> list[DeviceResult]:
        refs = [actor.run.remote(plan.restrict(d), np.asarray(dms), seed)
                for d, actor in enumerate(self.actors)]
        return list(self._ray.get(refs))

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        if self._started:
            self._ray.shutdown()


BACKENDS = {"local": LocalBackend, "ray": RayBackend}


@dataclass
class Calibration:
    """The online model: which tasks were sampled, their times, and every task's prediction."""

    sample: np.ndarray
    sample_seconds: np.ndarray
    predicted: np.ndarray
    model_name: str
    seconds: float


def time_tasks(tasks: list[StoredTask], ids: np.ndarray, nao: int, repeats: int = 2,
               seed: int = 0, xp: Any = np) -> np.ndarray:
    """Run-alone time of each task (min of ``repeats``) on a random symmetric 3-matrix input."""
    rng = np.random.default_rng(seed)
    dms = rng.standard_normal((3, nao, nao))
    dms = xp.asarray(dms + dms.transpose(0, 2, 1))
    out, pool = xp.zeros_like(dms), BufferPool(xp)
    seconds = np.empty(len(ids))
    for k, i in enumerate(ids):
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            response_task(tasks[int(i)], dms, out, pool, xp)
            if xp is not np:
                xp.cuda.Stream.null.synchronize()
            best = min(best, time.perf_counter() - start)
        seconds[k] = best
    return seconds


@dataclass
class Runtime:
    """Calibrate once (5% sample -> model -> plan), then ``apply`` per DFPT iteration."""

    store: TaskStore
    balancer: Balancer
    devices: int = 2
    streams: int = 2
    model: str = "branch-hybrid"
    sample_fraction: float = 0.05
    pooled: bool = True
    backend: str = "local"
    gpu: bool = False
    seed: int = 0
    history: list[IterationStats] = field(default_factory=list)
    pool_stats: PoolStats = field(default_factory=PoolStats)

    def __post_init__(self) -> None:
        if self.devices < 1 or self.streams < 1:
            raise ConfigError("devices and streams must be at least 1", field="devices")
        if self.backend not in BACKENDS:
            raise UnknownNameError("backend", self.backend, list(BACKENDS))
        self.xp = array_module(self.gpu)
        self.calibration = self._calibrate()
        self.plan = self.balancer.plan(self.store.features, self.calibration.predicted,
                                       self.devices, self.streams)
        self._backend = BACKENDS[self.backend](self.store, self.devices, self.streams,
                                               self.pooled, self.xp)

    def _calibrate(self) -> Calibration:
        start = time.perf_counter()
        features = self.store.features
        sample = sample_tasks(features, self.sample_fraction, self.seed)
        seconds = time_tasks(self.store.tasks, sample, self.store.nao, seed=self.seed, xp=self.xp)
        model = make_model(self.model).fit(features.take(sample), seconds)
        return Calibration(sample, seconds, model.predict(features), self.model,
                           time.perf_counter() - start)

    def apply(self, dms: np.ndarray) -> np.ndarray:
        """The XC response potential for response density matrices ``dms`` (n, nao, nao)."""
        dms = np.asarray(dms, dtype=np.float64)
        if dms.ndim != 3 or dms.shape[1:] != (self.store.nao, self.store.nao):
            raise ConfigError(f"expected (n, {self.store.nao}, {self.store.nao}) matrices, got "
                              f"{dms.shape}", field="dms")
        start = time.perf_counter()
        results = self._backend.execute(self.plan, self.xp.asarray(dms),
                                        self.seed + len(self.history))
        wall = time.perf_counter() - start
        task_seconds = np.full(len(self.store.tasks), np.nan)
        for r in results:
            for task, sec in r.task_seconds.items():
                task_seconds[task] = sec
        self.history.append(IterationStats(
            wall, np.array([r.end - r.start for r in results]),
            np.array([sum(r.task_seconds.values()) for r in results]), task_seconds,
            sum(r.steals for r in results)))
        self.pool_stats = merge_stats([r.pool for r in results])  # cumulative per device
        total = sum((r.out for r in results[1:]), results[0].out)
        return total if self.xp is np else self.xp.asnumpy(total)

    def close(self) -> None:
        self._backend.close()
