"""Trace-driven replay of a shared accelerator cluster under any placement policy.

gPooling (../shared/papers/14-gpooling.md) is evaluated on benchmarks derived from real cluster
traces: jobs arrive asking for a fraction of an accelerator (the Alibaba trace's ``gpu_milli``)
and some memory, wait in a queue until a policy finds room, run for their duration and leave.
The engine is a heap of events and knows no policy by name; it checks every placement against
the cluster's books (no device is ever over-committed) and integrates, over time:

- utilisation: compute the jobs asked for and hold, over the cluster's capacity (what a job
  is given beyond its request, e.g. a whole device for a 0.3 job, is *allocated* but not used);
- fragmentation: the share of free compute no typical request can use (the FGD measure, against
  the trace's own request mix);
- waiting time (arrival to start) and jobs completed within the arrival window.

:func:`simulate` places per GPU on a device list; :func:`replay` is the node-level replay of an
Alibaba pod list on its node list (CPU, memory, GPU model and per-GPU share all checked by
``fgd.Cluster``) with the trace's own creation and deletion times, at a chosen time compression.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.gpooling.cluster_policies import make_cluster_policy
from schedlab.gpooling.devices import PhysicalDevice
from schedlab.gpooling.fgd import Cluster, ClusterPolicy, Placement
from schedlab.gpooling.policies import FragAware, PlacementPolicy
from schedlab.gpooling.state import FULL, ClusterState, Grant, Request
from schedlab.traces.alibaba_gpu2023 import Node, Pod


@dataclass(frozen=True)
class Job:
    """One job of a trace: when it arrives, how long it runs once started, what it asks for."""

    id: int
    arrival: float
    duration: float
    request: Request


@dataclass
class SimResult:
    """Per-policy outcome of one replay."""

    policy: str
    metrics: dict[str, float]
    waits: np.ndarray
    timeline: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class _Books:
    """Time integrals and counters the replay accumulates."""

    last: float = 0.0
    used: float = 0.0  # integral of requested milli held
    allocated: float = 0.0  # integral of granted milli held
    frag: float = 0.0  # integral of fragmented free milli
    free: float = 0.0  # integral of free milli
    used_now: int = 0
    allocated_now: int = 0
    times: list[float] = field(default_factory=list)
    utilisation: list[float] = field(default_factory=list)


def _advance(books: _Books, now: float, horizon: float, state: ClusterState,
             meter: FragAware, probe: Request) -> None:
    """Integrate the cluster's levels from the last event to ``now`` (clipped to the horizon)."""
    end = min(now, horizon)
    span = end - books.last
    if span > 0:
        frag = float(meter.fragmentation(state.free_memory, state.free_milli, probe).sum())
        books.used += span * books.used_now
        books.allocated += span * books.allocated_now
        books.frag += span * frag
        books.free += span * float(state.free_milli.sum())
    books.last = max(books.last, end)


def _start_waiting(queue: list[Job], state: ClusterState, policy: PlacementPolicy, now: float,
                   backfill: int) -> list[tuple[Job, list[Grant]]]:
    """Start queued jobs in arrival order; later jobs may start ahead of a blocked one
    (backfilling) within the first ``backfill`` places of the queue.

    During one scan the pool only fills up, so once a request is refused any request at least as
    large (same gang size and model) is refused too without asking the policy again. That relies
    on policies refusing only what does not fit, which the common policy tests check.
    """
    started = []
    refused: list[Request] = []
    index = 0
    while index < min(len(queue), backfill):
        job = queue[index]
        request = job.request
        if any(r.count == request.count and r.model == request.model and r.memory <= request.memory
               and r.milli <= request.milli for r in refused):
            index += 1
            continue
        grants = policy.place(request, state)
        if grants is None:
            refused.append(request)
            index += 1
            continue
        state.take(request, grants)
        started.append((job, grants))
        queue.pop(index)
    return started


def simulate(jobs: Sequence[Job], devices: Sequence[PhysicalDevice], policy: PlacementPolicy,
             *, backfill: int = 64, timeline_points: int = 200) -> SimResult:
    """Replay ``jobs`` on ``devices`` under ``policy`` until every admissible job has finished."""
    state = ClusterState(devices)
    jobs = sorted(jobs, key=lambda j: (j.arrival, j.id))
    position = {job.id: k for k, job in enumerate(jobs)}
    if len(position) != len(jobs):
        raise BadInputError("job ids must be unique", field="id")
    horizon = max((j.arrival for j in jobs), default=0.0) or 1.0
    meter = FragAware(window=max(1, len(jobs)))  # the trace's own mix: same yardstick for all
    for job in jobs:
        meter.observe(job.request)
    probe = jobs[0].request if jobs else Request(0, FULL)
    events = [(j.arrival, 1, k) for k, j in enumerate(jobs)]  # kind 0 (finish) sorts first
    heapq.heapify(events)
    running: dict[int, list[Grant]] = {}
    queue: list[Job] = []
    waits = np.full(len(jobs), np.nan)
    books, rejected, completed = _Books(), 0, 0
    sample_every, next_sample = horizon / timeline_points, 0.0
    while events:
        now, kind, k = heapq.heappop(events)
        while next_sample <= min(now, horizon):  # levels just before this event
            books.times.append(next_sample)
            books.utilisation.append(books.used_now / (FULL * len(state)))
            next_sample += sample_every
        _advance(books, now, horizon, state, meter, probe)
        job = jobs[k]
        if kind == 0:
            grants = running.pop(job.id)
            state.give_back(grants)
            books.used_now -= job.request.milli * job.request.count
            books.allocated_now -= sum(g.milli for g in grants)
            completed += now <= horizon
        else:
            policy.observe(job.request)
            if not state.ever_fits(job.request):
                rejected += 1
                continue
            queue.append(job)
        for started, grants in _start_waiting(queue, state, policy, now, backfill):
            running[started.id] = grants
            waits[position[started.id]] = now - started.arrival
            books.used_now += started.request.milli * started.request.count
            books.allocated_now += sum(g.milli for g in grants)
            heapq.heappush(events, (now + started.duration, 0, position[started.id]))
    return SimResult(policy.name, _metrics(books, state, horizon, waits, completed, rejected,
                                           len(jobs)), waits,
                     dict(time=np.array(books.times), utilisation=np.array(books.utilisation)))


def _metrics(books: _Books, state: ClusterState, horizon: float, waits: np.ndarray,
             completed: int, rejected: int, total: int) -> dict[str, float]:
    capacity = FULL * len(state) * horizon
    admitted = waits[~np.isnan(waits)]
    return dict(
        utilisation=books.used / capacity,
        allocated=books.allocated / capacity,
        fragmentation=books.frag / books.free if books.free else 0.0,
        mean_wait=float(admitted.mean()) if admitted.size else 0.0,
        p95_wait=float(np.percentile(admitted, 95)) if admitted.size else 0.0,
        completed=float(completed),
        rejected=float(rejected),
        jobs=float(total),
    )


def replay(pods: Sequence[Pod], nodes: Sequence[Node], policy: str | ClusterPolicy, *,
           compression: float = 1.0, backfill: int = 64, seed: int = 0) -> dict[str, float]:
    """Replay an Alibaba pod list on its node list with its own creation and deletion times.

    Pod *i* arrives at ``creation_time / compression`` (times relative to the first pod) and,
    once placed, holds its CPU, memory and GPU share for its recorded lifetime (``deletion -
    scheduled``, or ``deletion - creation`` where it was never scheduled; at least 1 s), so a
    compression of *c* offers *c* times the trace's load with the same pod lifetimes. Queue:
    FIFO with backfilling over the first ``backfill`` waiting pods; a pod no empty node could
    hold is rejected. Metrics: ``utilisation`` (GPU milli requested by running pods, time-
    averaged over the arrival window, / capacity), ``allocated`` (milli granted), mean and p95
    wait of GPU pods (arrival to start), pods started within the window, rejections.
    """
    if not math.isfinite(compression) or compression <= 0:
        raise BadInputError(f"must be a finite number > 0, got {compression}",
                            field="compression")
    if not pods:
        raise BadInputError("no pods to replay", field="trace")
    cluster = Cluster(nodes)
    policy = make_cluster_policy(policy) if isinstance(policy, str) else policy
    policy.reset(cluster, pods, np.random.default_rng([seed, 2]))
    start = min(p.creation_time for p in pods)
    order = sorted(range(len(pods)), key=lambda i: (pods[i].creation_time, i))
    arrival = np.array([(pods[i].creation_time - start) / compression for i in order])
    life = np.array([max(pods[i].deletion_time - (pods[i].scheduled_time
                                                  if pods[i].scheduled_time is not None
                                                  else pods[i].creation_time), 1.0)
                     for i in order])
    ordered = [pods[i] for i in order]
    horizon = float(arrival[-1]) or 1.0
    events = [(float(arrival[k]), 1, k) for k in range(len(ordered))]
    heapq.heapify(events)
    running: dict[int, Placement] = {}
    queue: list[int] = []
    waits = np.full(len(ordered), np.nan)
    last = used = allocated = 0.0
    used_now = allocated_now = rejected = started_in_window = 0
    while events:
        now, kind, k = heapq.heappop(events)
        end = min(now, horizon)
        if end > last:
            used += (end - last) * used_now
            allocated += (end - last) * allocated_now
            last = end
        pod = ordered[k]
        if kind == 0:
            placement = running.pop(k)
            cluster.release(pod, placement)
            used_now -= pod.gpu_demand
            allocated_now -= placement.milli * pod.num_gpu
        else:
            policy.observe(pod)
            if not cluster.ever_fits(pod):
                rejected += 1
                continue
            queue.append(k)
        refused: set[tuple] = set()  # the cluster only fills during one scan
        index = 0
        while index < min(len(queue), backfill):
            j = queue[index]
            waiting = ordered[j]
            if waiting.kind in refused:
                index += 1
                continue
            placement = policy.place(waiting, cluster)
            if placement is None:
                refused.add(waiting.kind)
                index += 1
                continue
            cluster.book(waiting, placement)
            queue.pop(index)
            running[j] = placement
            waits[j] = now - arrival[j]
            started_in_window += now <= horizon
            used_now += waiting.gpu_demand
            allocated_now += placement.milli * waiting.num_gpu
            heapq.heappush(events, (now + float(life[j]), 0, j))
    gpu = np.array([p.num_gpu > 0 for p in ordered])
    admitted = waits[gpu & ~np.isnan(waits)]
    capacity = cluster.capacity * horizon
    return dict(policy=policy.name, compression=compression, utilisation=used / capacity,
                allocated=allocated / capacity,
                mean_wait=float(admitted.mean()) if admitted.size else 0.0,
                p95_wait=float(np.percentile(admitted, 95)) if admitted.size else 0.0,
                started=float(started_in_window), rejected=float(rejected),
                pods=float(len(ordered)), gpus=float(cluster.capacity // 1000))
