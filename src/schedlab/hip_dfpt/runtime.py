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

import os
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
        throttle: dict | None = None,
    ):
        _no_throttle(throttle)
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
        throttle: dict | None = None,
    ):
        _no_throttle(throttle)
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
            address = os.environ.get("RAY_ADDRESS")
            options: dict[str, Any] = dict(
                include_dashboard=False, log_to_driver=False, configure_logging=False
            )
            if address:  # a running cluster (ray start --head / --address): join it
                ray.init(address=address, **options)
            else:
                ray.init(num_cpus=max(2, devices), **options)
        try:
            self.actors = start_actors(
                ray, store, devices, streams, pooled, deterministic, spread=True
            )
            # wait until every actor holds the task data (start-up is not an iteration's cost)
            self.nodes = list(ray.get([a.node.remote() for a in self.actors]))
        except BaseException:
            if self._started:
                ray.shutdown()
            raise

    def time_sample(self, ids: np.ndarray, dms: np.ndarray, repeats: int = 2) -> np.ndarray:
        """(devices, len(ids)) thread CPU seconds of the same sample tasks on every actor."""
        refs = [a.time_sample.remote(np.asarray(ids), np.asarray(dms), repeats)
                for a in self.actors]
        return np.array(self._ray.get(refs))

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
    store: TaskStore,
    devices: int,
    streams: int,
    pooled: bool,
    xp: Any,
    deterministic: bool = True,
    throttle: dict | None = None,
) -> Any:
    from schedlab.hip_dfpt.procdevice import ProcessBackend

    return ProcessBackend(store, devices, streams, pooled, xp, deterministic, throttle)


def _no_throttle(throttle: dict | None) -> None:
    if throttle:
        raise ConfigError("test throttles need the process backend", field="throttle")


REPLAN = ("model", "measured", "adaptive")

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


def device_speeds(times: np.ndarray) -> np.ndarray:
    """Per-device speed from every device's times of the same tasks (devices x tasks).

    Per task, each device's time is compared with the median device's; a device's log speed
    is the median of its log ratios (robust to a stalled task), shrunk toward equal speeds by
    how uncertain it is (positive-part James-Stein: factor 1 - se^2 / log^2, se from the
    spread of the ratios), so sampling noise on equal devices does not skew the first plan
    while a 2x slower device (log ratio 0.69 against se ~0.05) is kept."""
    times = np.asarray(times, float)
    if times.ndim != 2 or not (np.isfinite(times).all() and (times > 0).all()):
        raise ConfigError("sample times must be a finite, positive devices x tasks array",
                          field="calibration")
    ratios = np.log(np.median(times, axis=0))[None, :] - np.log(times)
    log_speed = np.median(ratios, axis=1)
    if times.shape[1] > 1:
        se2 = (1.2533 * ratios.std(axis=1, ddof=1)) ** 2 / times.shape[1]
        with np.errstate(divide="ignore", invalid="ignore"):
            keep = np.where(log_speed != 0, 1.0 - se2 / log_speed**2, 0.0)
        log_speed = log_speed * np.clip(keep, 0.0, 1.0)
    return np.exp(log_speed)


#: weight of the latest iteration in a device's refitted speed (log scale)
SPEED_WEIGHT = 0.5
#: a device whose later half ran this much slower or faster (relative to how the other
#: devices' halves compare) changed speed during the iteration
SPEED_CHANGE = float(np.log(1.25))
#: a refitted speed within this factor of the other devices' median is taken as equal: on a
#: shared machine one iteration's per-process CPU rate moves by 10-35% with no lasting cause,
#: and planning on that noise unbalanced equal devices (1.07-1.13 per iteration, stealing
#: included); stealing corrects small real differences within the iteration
SPEED_SNAP = float(np.log(1.2))


def snap_speeds(speeds: np.ndarray, tolerance: float = SPEED_SNAP) -> np.ndarray:
    """Devices whose speed is within ``tolerance`` (log) of the median of the *other*
    devices' speeds are taken as equal: each gets the geometric mean of that group. A device
    2x slower stays apart from equal ones, and two devices 1.4x apart stay apart."""
    speeds = np.asarray(speeds, float)
    if len(speeds) < 2:
        return speeds.copy()
    log_speed = np.log(speeds)
    others = np.array([np.median(np.delete(log_speed, d)) for d in range(len(speeds))])
    near = np.abs(log_speed - others) < tolerance
    if not near.any():
        return speeds.copy()
    return np.where(near, np.exp(log_speed[near].mean()), speeds)


def refit_speeds(
    costs: np.ndarray, task_cpu: np.ndarray, ran: list[np.ndarray], previous: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Speeds and cost estimates refitted on one iteration's live times.

    ``ran[d]``: the tasks device d ran, in the order it ran them. A device's speed in this
    iteration is measured within cost classes (:func:`_speeds_within_cost_classes`, free of
    its task mix); its tasks' estimated cost over their CPU time rescales those tasks' times
    into cost units (the new cost samples). The next plan's speed is its geometric mean with
    the previous estimate (weight ``SPEED_WEIGHT``: one iteration's times on a shared machine
    are noisy), unless the device changed speed during the iteration: its later half against
    its earlier half differs from the other devices' (the median, which carries the model's
    common bias between large early and small late tasks) by more than ``SPEED_CHANGE``; then
    the estimate moves to the later speed at once. A device that ran nothing keeps its
    previous speed. Finally speeds within ``SPEED_SNAP`` of the other devices' median are set
    equal (:func:`snap_speeds`): the plan follows real differences, not one iteration's noise."""
    speeds = np.array(previous, dtype=float)
    normalized = np.array(costs, dtype=float)
    now = np.full(len(ran), np.nan)
    drift = np.full(len(ran), np.nan)
    mix_free = _speeds_within_cost_classes(costs, task_cpu, ran)
    for d, ids in enumerate(ran):
        if len(ids) == 0:
            continue
        cpu = task_cpu[ids]
        now[d] = costs[ids].sum() / cpu.sum()
        normalized[ids] = cpu * now[d]
        later = np.cumsum(cpu) > 0.5 * cpu.sum()
        if later.all() or not later.any():
            continue
        early_speed = costs[ids[~later]].sum() / cpu[~later].sum()
        late_speed = costs[ids[later]].sum() / cpu[later].sum()
        drift[d] = np.log(late_speed / early_speed)
    common = np.nanmedian(drift) if np.isfinite(drift).any() else 0.0
    for d in range(len(ran)):
        if not np.isfinite(now[d]):
            continue
        change = drift[d] - common if np.isfinite(drift[d]) else 0.0
        if abs(change) > SPEED_CHANGE:
            speeds[d] = mix_free[d] * np.exp(change / 2)  # ~ the later half's speed
        else:
            speeds[d] = np.exp(
                SPEED_WEIGHT * np.log(mix_free[d]) + (1 - SPEED_WEIGHT) * np.log(speeds[d])
            )
    return snap_speeds(speeds), normalized


#: cost classes (quantiles of the predicted cost) a device's speed is compared within
SPEED_CLASSES = 8


def _speeds_within_cost_classes(
    costs: np.ndarray, task_cpu: np.ndarray, ran: list[np.ndarray]
) -> np.ndarray:
    """Each device's speed in this iteration, free of its task mix: per task the log of
    predicted cost over CPU time, minus the median device's (median over devices of their
    median) in the task's cost class; a device's speed is the overall median times
    exp(median of its residuals). The plain ratio of sums is not: where the model
    over-predicts large tasks and under-predicts small ones, the device given more large tasks
    looks faster, is planned more large tasks next time and looks faster still (equal devices
    were planned 1.4x apart)."""
    speeds = np.full(len(ran), np.nan)
    ids = np.concatenate([np.asarray(i, np.int64) for i in ran]) if ran else np.zeros(0, int)
    if len(ids) == 0:
        return speeds
    log_ratio = np.log(costs[ids] / task_cpu[ids])
    classes = min(SPEED_CLASSES, max(1, len(ids) // 16))
    edges = np.quantile(np.log(costs[ids]), np.linspace(0, 1, classes + 1)[1:-1])
    cls = np.searchsorted(edges, np.log(costs[ids]), side="right")
    owner = np.repeat(np.arange(len(ran)), [len(r) for r in ran])
    base = np.zeros(classes)
    for c in range(classes):  # the median device's log ratio in this class
        per_device = [
            np.median(log_ratio[(cls == c) & (owner == d)])
            for d in range(len(ran))
            if ((cls == c) & (owner == d)).any()
        ]
        if per_device:
            base[c] = np.median(per_device)
    residual = log_ratio - base[cls]
    scale = float(np.median(log_ratio))
    start = 0
    for d, run in enumerate(ran):
        n = len(run)
        if n:
            speeds[d] = np.exp(scale + np.median(residual[start : start + n]))
        start += n
    return speeds


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
    ``backend="process"`` runs each device as an OS process over shared memory.

    ``replan="adaptive"`` is for unequal devices: every device times the same 5% sample, which
    gives a speed per device (ratio of summed sample times) and the model's costs in units of
    the median device; the plan is LPT on uniform machines (each task to the device where it
    finishes first). After every iteration each device's speed is refitted from the live task
    CPU times (see :func:`refit_speeds`) and the model is refitted on every task's live time
    (running mean, scaled by the speed of the device that ran it). On the process backend
    idle devices also steal in device time during the iteration (``procdevice.SharedQueues``).
    ``throttle`` (process backend, for testing) makes chosen devices slower: see
    :class:`devicerun.Throttle`."""

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
    throttle: dict[int, Any] | None = None
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
        self.speeds = np.ones(self.devices)
        self.speed_history: list[np.ndarray] = []
        adaptive = self.replan == "adaptive"
        if not adaptive:
            self.calibration = self._calibrate()
        self._backend = BACKENDS[self.backend](
            self.store,
            self.devices,
            self.streams,
            self.pooled,
            self.xp,
            self.deterministic,
            self.throttle,
        )
        try:
            if adaptive:
                self.calibration = self._calibrate_on_devices()
            self.costs = self.calibration.predicted
            self._live_costs: list[np.ndarray] = []
            self.plan = self._plan()
        except BaseException:
            self._backend.close()
            raise

    def _plan(self) -> Plan:
        if getattr(self.balancer, "speed_aware", False) and self.replan == "adaptive":
            return self.balancer.plan(  # type: ignore[call-arg]
                self.store.features, self.costs, self.devices, self.streams, speeds=self.speeds
            )
        return self.balancer.plan(self.store.features, self.costs, self.devices, self.streams)

    def _calibrate_on_devices(self) -> Calibration:
        """The 5% sample timed by every device (thread CPU, one run each): per-device speeds and
        the model in units of the median device. Backends that cannot time on their devices
        (threads in this process) time in this process and keep equal speeds."""
        if not hasattr(self._backend, "time_sample"):
            return self._calibrate()
        start = time.perf_counter()
        features = self.store.features
        sample = sample_tasks(features, self.sample_fraction, self.seed)
        nao = self.store.nao
        dms = np.random.default_rng(self.seed).standard_normal((3, nao, nao))
        dms = dms + dms.transpose(0, 2, 1)
        with single_threaded_blas():  # one cold run each, as tasks run in an iteration
            times = np.asarray(self._backend.time_sample(sample, dms, repeats=1))
        self.speeds = device_speeds(times)
        self.speed_history.append(self.speeds.copy())
        seconds = np.median(times * self.speeds[:, None], axis=0)  # median-device units
        model = make_model(self.model).fit(features.take(sample), seconds)
        return Calibration(
            sample, seconds, model.predict(features), self.model, time.perf_counter() - start
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
        seed = self.seed + len(self.history)
        with single_threaded_blas():
            if self.replan == "adaptive" and self.backend == "process":
                results = self._backend.execute(
                    self.plan, dms, seed, predicted=self.costs, rates=1.0 / self.speeds,
                    steal=True,
                )
            else:
                results = self._backend.execute(self.plan, self.xp.asarray(dms), seed)
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
            self.costs = np.mean(measured, axis=0)
            self.plan = self._plan()
        elif self.replan == "adaptive" and has_cpu and np.isfinite(task_cpu).all():
            ran = [np.fromiter(r.task_cpu, np.int64, len(r.task_cpu)) for r in results]  # run order
            speeds, normalized = refit_speeds(self.costs, task_cpu, ran, self.speeds)
            self._live_costs.append(normalized)
            # the model refitted on every task's live time (running mean, in median-device
            # units): per-task times are noisy, and planning on them puts the tasks that
            # happened to run fast last, where they then run slower than planned
            features = self.store.features
            model = make_model(self.model).fit(features, np.mean(self._live_costs, axis=0))
            self.costs = model.predict(features)
            self.speeds = speeds
            self.speed_history.append(speeds.copy())
            self.plan = self._plan()
        total = merge_partials([r.out for r in results])
        if isinstance(total, FixedPoint):
            total = total.value()
        return total if self.xp is np else self.xp.asnumpy(total)

    def close(self) -> None:
        self._backend.close()
