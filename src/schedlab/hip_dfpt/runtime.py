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

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError, MissingDependencyError, UnknownNameError
from schedlab.hip_dfpt.devicerun import (
    DeviceResult,
    array_module,
    device_allocators,
    merge_partials,
    run_devices,
    single_threaded_blas,
)
from schedlab.hip_dfpt.dft import TaskStore
from schedlab.hip_dfpt.kernels import AoSource, StoredTask, response_task
from schedlab.hip_dfpt.memory import BufferPool, PoolStats, merge_stats
from schedlab.hip_dfpt.perfmodel import make_model, sample_tasks
from schedlab.hip_dfpt.policies import Balancer, Plan
from schedlab.hip_dfpt.reduction import FixedPoint


@dataclass
class IterationStats:
    """Measured times of one response evaluation."""

    wall: float
    device_wall: np.ndarray
    device_busy: np.ndarray
    task_seconds: np.ndarray
    steals: int
    task_cpu: np.ndarray | None = None  # per task thread CPU seconds, measured in place
    device_cpu: np.ndarray | None = None  # per device sum of its tasks' CPU seconds
    overhead_cpu: np.ndarray | None = None  # per device CPU outside tasks (backend overhead)

    @property
    def balance(self) -> float:
        """Load-balance efficiency as the paper reports it: max / mean device busy time."""
        return float(self.device_busy.max() / self.device_busy.mean())

    @property
    def cpu_balance(self) -> float:
        """max / mean of each device's summed task CPU time, measured live in this iteration
        (on a machine with fewer free cores than devices, wall time measures the OS scheduler;
        CPU time measures the work each device was given)."""
        if self.device_cpu is None or not np.isfinite(self.device_cpu).all():
            return float("nan")
        return float(self.device_cpu.max() / self.device_cpu.mean())

    @property
    def overhead_fraction(self) -> float:
        """Backend CPU outside the tasks over the tasks' CPU (per-task overhead share)."""
        if self.overhead_cpu is None or self.device_cpu is None:
            return float("nan")
        return float(np.sum(self.overhead_cpu) / np.sum(self.device_cpu))

    @property
    def wall_balance(self) -> float:
        return float(self.device_wall.max() / self.device_wall.mean())


class LocalBackend:
    """Devices as thread groups in this process, sharing the task store."""

    def __init__(
        self,
        store: TaskStore,
        devices: int,
        streams: int,
        pooled: bool,
        xp: Any,
        deterministic: bool = True,
    ):
        self.store, self.streams, self.xp = store, streams, xp
        self.deterministic = deterministic
        self.allocs = device_allocators(devices, streams, pooled, xp)
        self.tasks = store.tasks if xp is np else pin_store(store.tasks, xp)

    def execute(self, plan: Plan, dms: Any, seed: int) -> list[DeviceResult]:
        return run_devices(
            self.tasks,
            plan,
            dms,
            self.streams,
            self.allocs,
            self.xp,
            seed,
            self.deterministic,
            self.store.ao_source,
        )

    def close(self) -> None:
        return None


class RayBackend:
    """Devices as Ray actors (processes): each runs its part of the plan with its own streams.

    Tasks never move between actors, so a stealing plan runs as its initial split here.
    """

    def __init__(
        self,
        store: TaskStore,
        devices: int,
        streams: int,
        pooled: bool,
        xp: Any,
        deterministic: bool = True,
    ):
        if not store.cached:
            raise ConfigError(
                "the Ray backend needs cached basis values (cache_ao=True)", field="executor"
            )
        try:
            import ray
        except ImportError as exc:
            raise MissingDependencyError(
                "--executor ray needs Ray", hint="pip install 'schedlab[ray]'"
            ) from exc
        from schedlab.hip_dfpt.raydevice import start_actors

        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            ray.init(
                num_cpus=max(2, devices),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
        self.actors = start_actors(ray, store.tasks, devices, streams, pooled, deterministic)

    def execute(self, plan: Plan, dms: Any, seed: int) -> list[DeviceResult]:
        refs = [
            actor.run.remote(plan.restrict(d), np.asarray(dms), seed)
            for d, actor in enumerate(self.actors)
        ]
        return list(self._ray.get(refs))

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
        if self._started:
            self._ray.shutdown()


def _process_backend(
    store: TaskStore, devices: int, streams: int, pooled: bool, xp: Any, deterministic: bool = True
) -> Any:
    from schedlab.hip_dfpt.procdevice import ProcessBackend

    return ProcessBackend(store, devices, streams, pooled, xp, deterministic)


REPLAN = ("model", "measured")

BACKENDS = {"local": LocalBackend, "ray": RayBackend, "process": _process_backend}


def pin_store(tasks: list[StoredTask], xp: Any) -> list[StoredTask]:
    """Copy every task's host arrays into page-locked (pinned) memory once, so each stream's
    host-to-device staging is a truly asynchronous copy (CuPy ``set`` on a stream)."""
    pinned = []
    for task in tasks:
        if task.ao is None:
            raise ConfigError("GPU runs need cached basis values (cache_ao=True)", field="gpu")
        pinned.append(
            StoredTask(
                _pinned(task.ao, xp),
                _pinned(task.idx, xp),
                _pinned(task.fxc_w, xp),
                task.branch,
                task.points,
            )
        )
    return pinned


def _pinned(array: np.ndarray, xp: Any) -> np.ndarray:
    memory = xp.cuda.alloc_pinned_memory(max(array.nbytes, 8))
    out = np.frombuffer(memory, dtype=array.dtype, count=array.size).reshape(array.shape)
    out[...] = array
    return out


@dataclass
class Calibration:
    """The online model: which tasks were sampled, their times, and every task's prediction."""

    sample: np.ndarray
    sample_seconds: np.ndarray
    predicted: np.ndarray
    model_name: str
    seconds: float


def time_tasks(
    tasks: list[StoredTask],
    ids: np.ndarray,
    nao: int,
    repeats: int = 2,
    seed: int = 0,
    xp: Any = np,
    ao_source: AoSource | None = None,
) -> np.ndarray:
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
            response_task(tasks[int(i)], dms, out, pool, xp, ao_source)
            if xp is not np:
                xp.cuda.Stream.null.synchronize()
            best = min(best, time.perf_counter() - start)
        seconds[k] = best
    return seconds


@dataclass
class Runtime:
    """Calibrate once (5% sample -> model -> plan), then ``apply`` per DFPT iteration.

    ``replan="measured"`` re-plans after every iteration on the task CPU times measured in place
    in that iteration (the model's plan serves the first); ``deterministic`` (default) reduces
    in exact fixed point, so results are bit-identical over devices, streams and backends;
    ``backend="process"`` runs each device as an OS process over shared memory."""

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
    deterministic: bool = True
    replan: str = "model"
    history: list[IterationStats] = field(default_factory=list)
    pool_stats: PoolStats = field(default_factory=PoolStats)

    def __post_init__(self) -> None:
        if self.devices < 1 or self.streams < 1:
            raise ConfigError("devices and streams must be at least 1", field="devices")
        if self.backend not in BACKENDS:
            raise UnknownNameError("backend", self.backend, list(BACKENDS))
        if self.replan not in REPLAN:
            raise UnknownNameError("replan", self.replan, list(REPLAN))
        self.xp = array_module(self.gpu)
        self.calibration = self._calibrate()
        self.plan = self.balancer.plan(
            self.store.features, self.calibration.predicted, self.devices, self.streams
        )
        self._backend = BACKENDS[self.backend](
            self.store, self.devices, self.streams, self.pooled, self.xp, self.deterministic
        )

    def _calibrate(self) -> Calibration:
        start = time.perf_counter()
        features = self.store.features
        sample = sample_tasks(features, self.sample_fraction, self.seed)
        seconds = time_tasks(
            self.store.tasks,
            sample,
            self.store.nao,
            seed=self.seed,
            xp=self.xp,
            ao_source=self.store.ao_source,
        )
        model = make_model(self.model).fit(features.take(sample), seconds)
        return Calibration(
            sample, seconds, model.predict(features), self.model, time.perf_counter() - start
        )

    def apply(self, dms: np.ndarray) -> np.ndarray:
        """The XC response potential for response density matrices ``dms`` (n, nao, nao)."""
        dms = np.asarray(dms, dtype=np.float64)
        if dms.ndim != 3 or dms.shape[1:] != (self.store.nao, self.store.nao):
            raise ConfigError(
                f"expected (n, {self.store.nao}, {self.store.nao}) matrices, got {dms.shape}",
                field="dms",
            )
        start = time.perf_counter()
        with single_threaded_blas():
            results = self._backend.execute(
                self.plan, self.xp.asarray(dms), self.seed + len(self.history)
            )
        wall = time.perf_counter() - start
        n = len(self.store.tasks)
        task_seconds, task_cpu = np.full(n, np.nan), np.full(n, np.nan)
        for r in results:
            for task, sec in r.task_seconds.items():
                task_seconds[task] = sec
            for task, sec in r.task_cpu.items():
                task_cpu[task] = sec
        has_cpu = all(r.task_cpu for r in results)
        self.history.append(
            IterationStats(
                wall,
                np.array([r.end - r.start for r in results]),
                np.array([sum(r.task_seconds.values()) for r in results]),
                task_seconds,
                sum(r.steals for r in results),
                task_cpu if has_cpu else None,
                np.array([sum(r.task_cpu.values()) for r in results]) if has_cpu else None,
                np.array([r.overhead_cpu for r in results]),
            )
        )
        self.pool_stats = merge_stats([r.pool for r in results])  # cumulative per device
        if self.replan == "measured" and has_cpu and np.isfinite(task_cpu).all():
            # the next plan uses the task CPU times measured live so far (their running mean:
            # one iteration's times carry the machine's noise)
            measured = [h.task_cpu for h in self.history if h.task_cpu is not None]
            self.plan = self.balancer.plan(
                self.store.features, np.mean(measured, axis=0), self.devices, self.streams
            )
        total = merge_partials([r.out for r in results])
        if isinstance(total, FixedPoint):
            total = total.value()
        return total if self.xp is np else self.xp.asnumpy(total)

    def close(self) -> None:
        self._backend.close()
