"""Load balancers: HIP-DFPT's model-guided multi-level strategy and the baselines (§5).

Every balancer implements one protocol, :class:`Balancer`: given the tasks' features, the
performance model's predicted run times, the device count and streams per device, it returns a
:class:`Plan`: for every device (inter-device level) the order in which its streams take tasks
(intra-device level), and whether idle devices may steal. A plan becomes a fresh
:class:`Dispatcher` each iteration; the real runtime (threads, Ray actors) and the scale
simulator both pull tasks through it, so neither engine knows which policy it runs.

* ``hip-dfpt``: inter-device LPT on predicted cost, then one device queue in descending
  predicted cost that the streams share (dynamic longest-first list scheduling inside a device).
* ``round-robin``: task i to device i mod D, streams round robin.
* ``count-balanced``: equal task counts in contiguous spatial chunks (the common default).
* ``lpt-points``: LPT without a model, grid points as the cost proxy.
* ``work-stealing``: count-balanced start; idle streams take from their device queue and then
  steal half of a random victim's remaining queue (the data of stolen tasks must move).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.core.registry import lookup
from schedlab.hip_dfpt.tasks import TaskFeatures


@dataclass(frozen=True)
class Plan:
    """queues[d][s]: task ids stream s of device d runs, in order. With ``shared_streams`` each
    device has one queue its streams pop from; with ``steal`` idle devices steal from others."""

    queues: list[list[np.ndarray]]
    shared_streams: bool = False
    steal: bool = False

    @property
    def devices(self) -> int:
        return len(self.queues)

    def device_tasks(self, device: int) -> np.ndarray:
        return np.concatenate([np.asarray(q, dtype=np.int64) for q in self.queues[device]])

    def restrict(self, device: int) -> Plan:
        """The part of the plan one device runs on its own (no stealing across processes)."""
        return Plan([self.queues[device]], self.shared_streams, steal=False)


class Balancer(Protocol):
    """Distributes tasks over devices and their streams."""

    name: str

    def plan(self, features: TaskFeatures, predicted: np.ndarray, devices: int,
             streams: int) -> Plan: ...


def _check(features: TaskFeatures, predicted: np.ndarray, devices: int, streams: int) -> None:
    if devices < 1 or streams < 1:
        raise ConfigError("devices and streams must be at least 1", field="devices")
    if len(predicted) != len(features):
        raise ConfigError(f"{len(predicted)} predictions for {len(features)} tasks",
                          field="predicted")


def lpt(costs: np.ndarray, bins: int, speeds: np.ndarray | None = None) -> list[np.ndarray]:
    """Longest processing time first: each task, largest first, to the least-loaded bin.

    With ``speeds`` (uniform machines: bin b runs a task of cost c in c / speeds[b]) each task
    goes to the bin where it would *finish* first, (load + c) / speed."""
    order = np.argsort(-np.asarray(costs, float), kind="stable")
    if speeds is not None and not np.allclose(speeds, speeds[0]):
        return _lpt_uniform(np.asarray(costs, float), order, np.asarray(speeds, float))
    heap = [(0.0, b) for b in range(bins)]
    owner = np.empty(len(order), dtype=np.int64)
    for task in order:
        load, b = heap[0]
        owner[task] = b
        heapq.heapreplace(heap, (load + float(costs[task]), b))
    return [order[owner[order] == b] for b in range(bins)]


def _lpt_uniform(costs: np.ndarray, order: np.ndarray, speeds: np.ndarray) -> list[np.ndarray]:
    if len(speeds) == 0 or not (np.isfinite(speeds).all() and (speeds > 0).all()):
        raise ConfigError("device speeds must be finite and > 0", field="speeds")
    loads = np.zeros(len(speeds))
    owner = np.empty(len(order), dtype=np.int64)
    inverse = 1.0 / speeds
    for task in order.tolist():  # a few devices in the real runtime: O(tasks x devices)
        c = costs[task]
        b = int(np.argmin((loads + c) * inverse))
        owner[task] = b
        loads[b] += c
    return [order[owner[order] == b] for b in range(len(speeds))]


def _round_robin_streams(tasks: np.ndarray, streams: int) -> list[np.ndarray]:
    return [tasks[s::streams] for s in range(streams)]


class HipDfptBalancer:
    """Model-guided multi-level balancing: LPT across devices, longest-first within a device."""

    name = "hip-dfpt"
    #: takes per-device speed estimates (unequal devices); the baselines are speed-blind
    speed_aware = True

    def plan(self, features: TaskFeatures, predicted: np.ndarray, devices: int,
             streams: int, speeds: np.ndarray | None = None) -> Plan:
        _check(features, predicted, devices, streams)
        if speeds is not None and len(speeds) != devices:
            raise ConfigError(f"{len(speeds)} speeds for {devices} devices", field="speeds")
        per_device = lpt(predicted, devices, speeds)  # already in descending predicted cost
        return Plan([[tasks] for tasks in per_device], shared_streams=True)


class RoundRobinBalancer:
    name = "round-robin"

    def plan(self, features: TaskFeatures, predicted: np.ndarray, devices: int,
             streams: int) -> Plan:
        _check(features, predicted, devices, streams)
        ids = np.arange(len(features))
        return Plan([_round_robin_streams(ids[d::devices], streams) for d in range(devices)])


class CountBalancer:
    name = "count-balanced"

    def plan(self, features: TaskFeatures, predicted: np.ndarray, devices: int,
             streams: int) -> Plan:
        _check(features, predicted, devices, streams)
        chunks = np.array_split(np.arange(len(features)), devices)
        return Plan([_round_robin_streams(c, streams) for c in chunks])


class LptPointsBalancer:
    name = "lpt-points"

    def plan(self, features: TaskFeatures, predicted: np.ndarray, devices: int,
             streams: int) -> Plan:
        _check(features, predicted, devices, streams)
        per_device = lpt(features.n_points.astype(float), devices)
        return Plan([_round_robin_streams(t, streams) for t in per_device])


class WorkStealingBalancer:
    name = "work-stealing"

    def plan(self, features: TaskFeatures, predicted: np.ndarray, devices: int,
             streams: int) -> Plan:
        _check(features, predicted, devices, streams)
        chunks = np.array_split(np.arange(len(features)), devices)
        return Plan([[c] for c in chunks], shared_streams=True, steal=True)


BALANCERS: dict[str, Callable[[], Balancer]] = {
    "hip-dfpt": HipDfptBalancer,
    "round-robin": RoundRobinBalancer,
    "count-balanced": CountBalancer,
    "lpt-points": LptPointsBalancer,
    "work-stealing": WorkStealingBalancer,
}


def make_balancer(name: str) -> Balancer:
    return lookup(BALANCERS, "balancer", name)()


class Dispatch(NamedTuple):
    """One task handed to a stream; ``migrated`` when its data came from another device and
    ``steal`` on the first task of a steal (which pays the steal round trip).

    A NamedTuple, not a dataclass: the simulator creates millions of them."""

    task: int
    migrated: bool = False
    steal: bool = False


class Dispatcher:
    """Hands out a plan's tasks to (device, stream) pairs; one instance per iteration.

    Not thread-safe by itself: the threaded runtime calls it under a lock.
    """

    def __init__(self, plan: Plan, streams: int, seed: int = 0) -> None:
        if plan.steal and not plan.shared_streams:
            raise ConfigError("stealing needs one shared queue per device", field="plan")
        self.plan, self.streams = plan, streams
        self.rng = np.random.default_rng(seed)
        if plan.shared_streams:
            self.queues = [[list(map(int, plan.device_tasks(d)))] for d in range(plan.devices)]
        else:
            if any(len(q) > streams for q in plan.queues):
                raise ConfigError("plan has more stream queues than streams", field="streams")
            self.queues = [[list(map(int, q)) for q in dq] for dq in plan.queues]
        for device in self.queues:
            for queue in device:
                queue.reverse()  # pop() from the end is O(1): the end is the queue's front
        self.remaining = np.array([sum(len(q) for q in dq) for dq in self.queues])
        self.stolen: set[int] = set()
        self.steals = 0

    def next(self, device: int, stream: int) -> Dispatch | None:
        queues = self.queues[device]
        queue = queues[0] if self.plan.shared_streams else (
            queues[stream] if stream < len(queues) else [])
        if queue:
            self.remaining[device] -= 1
            task = queue.pop()
            return Dispatch(task, bool(self.stolen) and task in self.stolen)
        if not self.plan.steal or not self.remaining.any():
            return None
        return self._steal(device)

    def _steal(self, thief: int) -> Dispatch | None:
        victim = -1
        for _ in range(4):  # random victims first, as in classic work stealing
            v = int(self.rng.integers(self.plan.devices))
            if v != thief and self.remaining[v] > 0:
                victim = v
                break
        if victim < 0:
            candidates = np.flatnonzero(self.remaining > 0)
            if len(candidates) == 0:
                return None
            victim = int(self.rng.choice(candidates))
        source = self.queues[victim][0]
        take = (len(source) + 1) // 2
        moved = source[:take]  # the back of the victim's queue (its front is the list's end)
        del source[:take]
        self.remaining[victim] -= take
        self.stolen.update(moved)
        self.steals += 1
        self.queues[thief][0].extend(moved)
        self.remaining[thief] += take - 1
        return Dispatch(self.queues[thief][0].pop(), migrated=True, steal=True)
