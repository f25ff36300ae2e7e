"""Discrete-event GPU-cluster simulator: the engine every CouchSurfer scheduler runs in.

The engine knows nothing of the policy (docs/ARCHITECTURE.md): at every event time it hands
itself to ``scheduler.schedule(now, sim)`` and applies the returned :class:`Decision`
(placements, preemptions, an optional wake-up), checking each against the cluster's invariants.
Co-located jobs progress at the rates the Job Fusion Mechanism model gives
(:func:`.fusion.pair_rates`); a gang job progresses at the rate of its slowest GPU.

A heap of (time, seq, kind, job, version) events with lazy invalidation (a job's ``version``
bumps whenever its rate changes) keeps each event O(log n), so 100,000 jobs on 1,000 GPUs run
in seconds.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from schedlab.core.errors import ConfigError, SchedlabError
from schedlab.couchsurfer.fusion import MODES, FusionParams, fits_memory, pair_rates
from schedlab.couchsurfer.jobs import DET, EXP, ClusterState, Job

_FINISH, _WAKE = 0, 1
_EPS = 1e-9


class PlacementError(SchedlabError):
    """A scheduler returned a decision that breaks a cluster invariant (a policy bug)."""


@dataclass(frozen=True)
class Placement:
    """Start waiting job ``jid`` on ``gpus`` as the GPUs' primary or secondary occupant."""

    jid: int
    gpus: tuple[int, ...]
    role: str = "primary"
    mode: str = "exclusive"


@dataclass
class Decision:
    """What a scheduler wants now: preemptions first, then placements; maybe a wake-up."""

    place: list[Placement] = field(default_factory=list)
    preempt: list[int] = field(default_factory=list)
    wake_at: float | None = None


class Scheduler(Protocol):
    """The one interface FIFO, SJF, Tiresias, Gandiva, backfilling and CouchSurfer share."""

    name: str

    def schedule(self, now: float, sim: Simulator) -> Decision: ...


class Simulator:
    """Replays ``jobs`` on ``nodes`` x ``gpus_per_node`` GPUs under ``scheduler``."""

    def __init__(self, jobs: Sequence[Job], scheduler: Scheduler, *, nodes: int,
                 gpus_per_node: int = 8, fusion: FusionParams | None = None) -> None:
        self.fusion = fusion or FusionParams()
        self.cluster = ClusterState(nodes, gpus_per_node, self.fusion.gpu_memory_gib)
        for job in jobs:
            if job.n_gpus > gpus_per_node:
                raise ConfigError(f"job {job.jid} needs {job.n_gpus} GPUs but a node has "
                                  f"{gpus_per_node}", field="n_gpus")
            if job.mem > self.fusion.gpu_memory_gib:
                raise ConfigError(f"job {job.jid} needs {job.mem} GiB per GPU, more than a GPU "
                                  f"has", field="mem")
        self.scheduler = scheduler
        self.arrivals = sorted(jobs, key=lambda j: (j.arrival, j.jid))
        self.jobs: dict[int, Job] = {j.jid: j for j in self.arrivals}
        if len(self.jobs) != len(self.arrivals):
            raise ConfigError("job ids must be unique", field="jid")
        self.waiting: dict[int, Job] = {}
        self.waiting_kind: dict[str, dict[int, Job]] = {DET: {}, EXP: {}}
        self.running: dict[int, Job] = {}
        self.now = 0.0
        self.decisions = 0
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._next_wake = -math.inf

    # ----------------------------------------------------------------- the loop
    def run(self, until: float = math.inf) -> Simulator:
        """Process events until none are left (or ``until``); returns self for chaining."""
        arrivals, i, n = self.arrivals, 0, len(self.arrivals)
        while i < n or self._heap:
            t_arr = arrivals[i].arrival if i < n else math.inf
            t_evt = self._heap[0][0] if self._heap else math.inf
            t = min(t_arr, t_evt)
            if t > until:
                break
            self.now = t
            while i < n and arrivals[i].arrival <= t:
                self._enqueue(arrivals[i])
                i += 1
            while self._heap and self._heap[0][0] <= t:
                _, _, kind, jid, version = heapq.heappop(self._heap)
                job = self.jobs.get(jid)
                if kind == _FINISH and job is not None and job.version == version \
                        and job.running:
                    self._complete(job)
            if self.waiting:
                self.apply(self.scheduler.schedule(t, self))
        return self

    def _enqueue(self, job: Job) -> None:
        self.waiting[job.jid] = job
        self.waiting_kind[job.kind][job.jid] = job

    def _dequeue(self, jid: int) -> Job:
        job = self.waiting.pop(jid, None)
        if job is None:
            raise PlacementError(f"job {jid} is not waiting", field="jid")
        del self.waiting_kind[job.kind][jid]
        return job

    # ----------------------------------------------------------------- decisions
    def apply(self, decision: Decision) -> None:
        """Check and apply a scheduler's decision at ``self.now``."""
        self.decisions += 1
        for jid in decision.preempt:
            job = self.running.get(jid)
            if job is None:
                raise PlacementError(f"cannot preempt job {jid}: not running", field="preempt")
            self._preempt(job)
        for placement in decision.place:
            self._place(placement)
        wake = decision.wake_at
        # one pending wake-up is enough: a periodic scheduler must not multiply its own timers
        if wake is not None and wake > self.now and not self._next_wake > self.now:
            self._next_wake = wake
            self._push(wake, _WAKE, -1, 0)

    def _place(self, p: Placement) -> None:
        job = self._dequeue(p.jid)
        gpus = tuple(int(g) for g in p.gpus)
        c = self.cluster
        if len(gpus) != job.n_gpus or len(set(gpus)) != len(gpus) \
                or any(not 0 <= g < c.n_gpus for g in gpus):
            raise PlacementError(f"job {job.jid} needs {job.n_gpus} distinct GPUs, got {gpus}",
                                 field="gpus")
        if p.role == "primary":
            self._check_primary(job, gpus)
        elif p.role == "secondary":
            if p.mode not in MODES:
                raise PlacementError(f"unknown co-location mode '{p.mode}'", field="mode")
            self._check_secondary(job, gpus)
        else:
            raise PlacementError(f"unknown role '{p.role}'", field="role")
        touched = self._occupants(gpus)
        for other in touched:
            self._settle(other)
        for g in gpus:
            if p.role == "primary":
                c.primary[g], c.primary_util[g], c.primary_mem[g] = job.jid, job.util, job.mem
                c.free_per_node[c.node_of[g]] -= 1
            else:
                c.secondary[g] = job.jid
        job.gpus, job.role, job.mode, job.last = gpus, p.role, p.mode, self.now
        if math.isnan(job.start):
            job.start = self.now
        self.running[job.jid] = job
        for other in (*touched, job):
            self._reschedule(other)

    def _check_primary(self, job: Job, gpus: tuple[int, ...]) -> None:
        c = self.cluster
        for g in gpus:
            if c.primary[g] >= 0:
                raise PlacementError(f"GPU {g} already has primary job {c.primary[g]}",
                                     field="gpus")
        # a host that does not fit beside a resident surfer evicts it (surfers never block)
        for g in gpus:
            s = int(c.secondary[g])
            if s >= 0 and not fits_memory(job.mem, self.jobs[s].mem, self.fusion):
                self._preempt(self.jobs[s])

    def _check_secondary(self, job: Job, gpus: tuple[int, ...]) -> None:
        c = self.cluster
        for g in gpus:
            if c.secondary[g] >= 0:
                raise PlacementError(f"GPU {g} already has secondary job {c.secondary[g]}",
                                     field="gpus")
            if c.primary[g] >= 0 and not fits_memory(c.primary_mem[g], job.mem, self.fusion):
                raise PlacementError(f"job {job.jid} does not fit in GPU {g}'s free memory",
                                     field="mem")

    def _preempt(self, job: Job) -> None:
        self._release(job)
        job.preemptions += 1
        self._enqueue(job)

    def _complete(self, job: Job) -> None:
        self._release(job)
        job.remaining, job.finish = 0.0, self.now

    def _release(self, job: Job) -> None:
        self._settle(job)
        c = self.cluster
        gpus = job.gpus
        for g in gpus:
            if job.role == "primary":
                c.primary[g], c.primary_util[g], c.primary_mem[g] = -1, 0.0, 0.0
                c.primary_est_end[g] = np.inf
                c.free_per_node[c.node_of[g]] += 1
            else:
                c.secondary[g] = -1
        touched = [o for o in self._occupants(gpus) if o is not job]
        for other in touched:
            self._settle(other)
        job.gpus, job.role, job.rate = (), "", 0.0
        job.version += 1
        del self.running[job.jid]
        for other in touched:
            self._reschedule(other)

    # ----------------------------------------------------------------- rates
    def _occupants(self, gpus: Iterable[int]) -> list[Job]:
        c, seen, out = self.cluster, set(), []
        for g in gpus:
            for jid in (int(c.primary[g]), int(c.secondary[g])):
                if jid >= 0 and jid not in seen:
                    seen.add(jid)
                    out.append(self.jobs[jid])
        return out

    def _settle(self, job: Job) -> None:
        dt = self.now - job.last
        if dt > 0 and job.running:
            job.remaining = max(0.0, job.remaining - job.rate * dt)
            job.run_time += dt
            job.attained += dt * job.n_gpus
        job.last = self.now

    def gpu_rate(self, g: int, job: Job) -> float:
        """Rate of ``job`` on GPU ``g`` given whoever shares it (1.0 when alone)."""
        c = self.cluster
        p, s = int(c.primary[g]), int(c.secondary[g])
        if p < 0 or s < 0:
            return 1.0
        host, surfer = self.jobs[p], self.jobs[s]
        rates = pair_rates(host.util, surfer.util, surfer.mode, self.fusion)
        return rates[0] if job.jid == p else rates[1]

    def _reschedule(self, job: Job) -> None:
        job.rate = min(self.gpu_rate(g, job) for g in job.gpus)
        job.last = self.now
        job.version += 1
        if job.role == "primary":
            self.cluster.primary_est_end[list(job.gpus)] = self.predicted_end(job)
        if job.rate > 0:
            finish = self.now + job.remaining / job.rate
            self._push(max(finish, self.now), _FINISH, job.jid, job.version)

    def _push(self, t: float, kind: int, jid: int, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, jid, version))

    # ----------------------------------------------------------------- helpers for policies
    def predicted_end(self, job: Job) -> float:
        """When a running job's *estimate* says it ends (what a scheduler may know)."""
        done = job.estimate - (job.work - job.remaining)
        return self.now + max(0.0, done) / max(job.rate, _EPS)

    def unfinished(self) -> list[Job]:
        return [j for j in self.jobs.values() if math.isnan(j.finish)]

    def gpu_busy_seconds(self) -> float:
        """Isolated-equivalent GPU-busy seconds delivered: sum of work done x util x GPUs."""
        return float(sum((j.work - j.remaining) * j.util * j.n_gpus for j in self.jobs.values()))

    def makespan(self) -> float:
        ends = np.array([j.finish for j in self.jobs.values()])
        ends = ends[~np.isnan(ends)]
        first = self.arrivals[0].arrival if self.arrivals else 0.0
        return float(ends.max() - first) if ends.size else 0.0
