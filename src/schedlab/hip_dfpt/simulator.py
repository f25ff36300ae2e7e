"""Discrete-event simulation of many GPU-like devices running DFPT micro-tasks (HIP-DFPT §6).

Hardware we do not have is modelled explicitly (:class:`DeviceModel`, defaults documented in
docs/systems/hip_dfpt.md): a task of n_g points and n_b basis functions does
4 n_g n_b^2 n_dm flops on one of two kernel branches (a GEMM path when n_b >= the branch
threshold, a slower direct loop below it), fills min(1, n_g n_b / lanes) of the device, and pays
a launch overhead. With S streams a device overlaps kernels; its time is the larger of its
slowest stream and its capacity bound (all its flops at full occupancy). Stolen tasks pay a
steal round trip and the transfer of their batch data.

The engine pulls tasks through the same :class:`~schedlab.hip_dfpt.policies.Dispatcher` the real
runtime uses, so every balancer (static or stealing) runs here unchanged.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from schedlab.hip_dfpt.policies import Dispatcher, Plan
from schedlab.hip_dfpt.tasks import DENSE, SPARSE, CompositionConfig, TaskFeatures


@dataclass(frozen=True)
class DeviceModel:
    """An HIP/CUDA-class accelerator: 64 compute units x 4 SIMDs x 64-wide wavefronts (a kernel
    needs ~16k independent work items to fill it once), ~6 TFLOP/s fp64 GEMM, a direct-loop
    branch at a fifth of that, 10 us per kernel launch."""

    lanes: float = 64 * 4 * 64
    gemm_flops: float = 6.0e12
    loop_flops: float = 1.2e12
    branch_threshold: int = 96
    launch_overhead: float = 1.0e-5
    noise_sigma: float = 0.1
    steal_latency: float = 5.0e-5
    link_bandwidth: float = 10.0e9
    ndm: int = 3
    merge_growth: float = 0.05  # union of k merged batches' basis: max x (1 + growth (k-1))
    #: effective bytes/s for the kernel's n_g x n_b x n_dm element traffic (staging, gathers,
    #: element-wise passes); infinite in the GPU-like default, fitted by calibrate.py on CPU
    memory_bandwidth: float = float("inf")

    def composition(
        self,
        features: TaskFeatures,
        devices: int,
        streams: int,
    ) -> CompositionConfig:
        """Micro-tasks of at least half a device's lanes, and small enough that every stream
        of every device gets about eight of them (granularity for balancing), capped at four
        devices' worth of lanes."""
        share = float(features.parallelism.sum()) / (devices * streams * 8)
        high = max(self.lanes, min(4.0 * self.lanes, share))
        return CompositionConfig(0.5 * self.lanes, high)


def with_branches(features: TaskFeatures, device: DeviceModel) -> TaskFeatures:
    branch = np.where(features.n_basis >= device.branch_threshold, DENSE, SPARSE)
    return TaskFeatures(features.n_points, features.n_basis, features.n_atoms, branch, features.key)


def useful_flops(features: TaskFeatures, device: DeviceModel) -> np.ndarray:
    g, b = features.n_points.astype(float), features.n_basis.astype(float)
    return 4.0 * g * b * b * device.ndm


@dataclass(frozen=True)
class TaskCosts:
    """Per-task seconds: ``kernel`` alone on a stream, ``full`` at full occupancy, ``migrate``
    to move its data to another device."""

    kernel: np.ndarray
    full: np.ndarray
    migrate: np.ndarray
    occupancy: np.ndarray


def task_costs(features: TaskFeatures, device: DeviceModel, seed: int) -> TaskCosts:
    rng = np.random.default_rng(seed)
    rate = np.where(features.branch == DENSE, device.gemm_flops, device.loop_flops)
    noise = rng.lognormal(0.0, device.noise_sigma, len(features))
    traffic = 8.0 * features.n_points * features.n_basis * device.ndm / device.memory_bandwidth
    full = (useful_flops(features, device) / rate + traffic) * noise
    occupancy = np.minimum(1.0, features.parallelism / device.lanes)
    kernel = device.launch_overhead + full / occupancy
    data = 8.0 * features.n_points * (4 + features.n_basis)  # coords, weight, basis values
    return TaskCosts(kernel, full, data / device.link_bandwidth, occupancy)


def compose_features(
    features: TaskFeatures, device: DeviceModel, devices: int, streams: int
) -> TaskFeatures:
    """Micro-task composition on synthetic features (merge same-atom batches, split heavy).

    A merged task's significant basis is the largest member's, grown by ``merge_growth`` per
    extra member (neighbouring batches of one atom share most functions); a split keeps it.
    """
    from schedlab.hip_dfpt.tasks import plan_composition

    starts, parts = plan_composition(features, device.composition(features, devices, streams))
    members = np.diff(np.append(starts, len(features)))
    points = np.add.reduceat(features.n_points, starts)
    basis = np.maximum.reduceat(features.n_basis, starts) * (
        1 + device.merge_growth * (members - 1)
    )
    atoms = np.maximum.reduceat(features.n_atoms, starts)
    parts = np.minimum(parts, points)
    group = np.repeat(np.arange(len(starts)), parts)
    rank = np.arange(len(group)) - np.repeat(np.cumsum(parts) - parts, parts)
    size = points[group] // parts[group] + (rank < points[group] % parts[group])
    composed = TaskFeatures(
        size.astype(np.int64),
        np.round(basis[group]).astype(np.int64),
        atoms[group],
        np.zeros(len(group), np.int64),
        features.key[starts][group],
    )
    return with_branches(composed, device)


def device_cost(
    kernel: np.ndarray, features: TaskFeatures, device: DeviceModel, streams: int
) -> np.ndarray:
    """What a task costs a device with ``streams`` overlapping streams, from its (predicted)
    run-alone kernel time: its capacity share (kernel - launch) x occupancy, or its stream
    time / streams when it cannot be overlapped enough to fill the device."""
    occupancy = np.minimum(1.0, features.parallelism / device.lanes)
    busy = np.maximum(kernel - device.launch_overhead, 0.0) * occupancy
    return np.maximum(busy, kernel / streams)


@dataclass(frozen=True)
class SimOutcome:
    """Per-device times of one simulated iteration and the derived efficiency figures."""

    device_time: np.ndarray
    device_full: np.ndarray
    steals: int

    @property
    def makespan(self) -> float:
        return float(self.device_time.max())

    @property
    def balance(self) -> float:
        """max / mean device time (the paper's load-balancing efficiency; 1 is perfect)."""
        return float(self.device_time.max() / self.device_time.mean())

    @property
    def utilisation(self) -> float:
        """Share of all devices' capacity doing flops over the whole iteration."""
        return float(self.device_full.sum() / (len(self.device_time) * self.makespan))

    @property
    def occupation(self) -> float:
        """Mean over devices of flops-busy share while the device works (imbalance excluded)."""
        return float(np.mean(self.device_full / np.maximum(self.device_time, 1e-300)))


_READY, _CHECK = 0, 1


class _Devices:
    """Processor-sharing state of every device: running kernels share its capacity.

    A kernel alone progresses at its occupancy (capacity/s); when the running kernels' occupancies
    sum above 1 they all slow down proportionally. ``remaining`` is in full-capacity seconds.
    """

    def __init__(self, devices: int) -> None:
        self.active: list[dict[int, list[float]]] = [{} for _ in range(devices)]
        self.last = [0.0] * devices  # plain lists: indexed once per event, millions of times
        self.version = [0] * devices
        self.end = [0.0] * devices

    def advance(self, d: int, now: float) -> None:
        active = self.active[d]
        if active:
            total = sum(v[1] for v in active.values())
            step = (now - self.last[d]) * (1.0 if total <= 1.0 else 1.0 / total)
            for v in active.values():
                v[0] -= v[1] * step
        self.last[d] = now

    def next_completion(self, d: int) -> tuple[float, int] | None:
        """(seconds until the first running kernel ends, its stream), or None when idle."""
        active = self.active[d]
        if not active:
            return None
        total = sum(v[1] for v in active.values())
        scale = 1.0 if total <= 1.0 else 1.0 / total
        stream, best = -1, float("inf")
        for s, (remaining, occupancy) in active.items():
            if remaining / occupancy < best:
                stream, best = s, remaining / occupancy
        return max(best / scale, 0.0), stream


def simulate(
    plan: Plan, costs: TaskCosts, streams: int, device: DeviceModel, seed: int = 0
) -> SimOutcome:
    """Event-driven run of one iteration: each idle stream asks the dispatcher for a task; a
    task waits its launch (plus steal/migration) latency, then shares its device's capacity."""
    dispatcher = Dispatcher(plan, streams, seed)
    state = _Devices(plan.devices)
    full = [0.0] * plan.devices
    full_cost, occupancy = costs.full.tolist(), costs.occupancy.tolist()
    migrate = costs.migrate.tolist()
    heap: list[tuple[float, int, int, int, int, int]] = []
    counter = itertools.count()

    def start(d: int, s: int, now: float) -> None:
        item = dispatcher.next(d, s)
        if item is None:
            return
        delay = device.launch_overhead
        delay += migrate[item.task] if item.migrated else 0.0
        delay += device.steal_latency if item.steal else 0.0
        full[d] += full_cost[item.task]
        heapq.heappush(heap, (now + delay, next(counter), _READY, d, s, item.task))

    def reschedule(d: int, now: float) -> None:
        state.version[d] += 1
        upcoming = state.next_completion(d)
        if upcoming is not None:
            heapq.heappush(
                heap, (now + upcoming[0], next(counter), _CHECK, d, upcoming[1], state.version[d])
            )

    for d in range(plan.devices):
        for s in range(streams):
            start(d, s, 0.0)
    while heap:
        now, _, kind, d, s, payload = heapq.heappop(heap)
        if kind == _CHECK and payload != state.version[d]:
            continue  # the device's running set changed since this completion was predicted
        state.advance(d, now)
        if kind == _READY:
            state.active[d][s] = [full_cost[payload], occupancy[payload]]
        else:
            del state.active[d][s]
            state.end[d] = now
            start(d, s, now)
        reschedule(d, now)
    full_array = np.array(full)
    return SimOutcome(np.maximum(np.array(state.end), full_array), full_array, dispatcher.steals)
