"""Discrete-event GPU-cluster simulator: the engine every CouchSurfer scheduler runs in.

The engine knows nothing of the policy (docs/ARCHITECTURE.md): at every event time it hands
itself to ``scheduler.schedule(now, sim)`` and applies the returned :class:`Decision`
(placements, preemptions, an optional wake-up), checking each against the cluster's invariants.
Co-located jobs progress at the rates the Job Fusion Mechanism model gives
(:func:`.fusion.pair_rates`) from the pair's *true* plain co-location speeds
(:class:`.interference.PairTruth`: Lucid's measurements where the pair was measured); a gang
job progresses at the rate of its slowest GPU. Clusters may be heterogeneous (per-node GPU
count and memory). A fractional job (``share < 1``) may join a fractional primary as a
``share`` co-tenant; when the primary leaves, the co-tenant becomes the GPU's primary.

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
from schedlab.couchsurfer.interference import PairTruth
from schedlab.couchsurfer.jobs import DET, EXP, ClusterState, Job

_FINISH, _WAKE, _CONTROL = 0, 1, 2
_EPS = 1e-9
_MIN_DUTY = 1e-3


@dataclass(slots=True)
class _Control:
    """JFM's controller state on one GPU: the pair, its duty cycle and the observations of
    the host's slowdown per unit of duty (count, sum, sum of squares)."""

    host: int
    surfer: int
    d: float
    since: float = 0.0
    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    debt: float = 0.0  # host-seconds observed above the target, not yet paid back


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
                 gpus_per_node: int = 8, fusion: FusionParams | None = None,
                 node_gpus: Sequence[int] | None = None,
                 node_memory: Sequence[float] | None = None,
                 truth: PairTruth | None = None) -> None:
        self.fusion = fusion or FusionParams()
        self.truth = truth or PairTruth(coef=self.fusion.coef)
        self.cluster = ClusterState(nodes, gpus_per_node, self.fusion.gpu_memory_gib,
                                    None if node_gpus is None else np.asarray(node_gpus),
                                    None if node_memory is None else np.asarray(node_memory))
        c = self.cluster
        for job in jobs:
            fits = (c.node_gpus_count >= job.n_gpus) & (c.node_memory_gib >= job.mem - 1e-9)
            if not fits.any():
                widest = int(c.node_gpus_count.max())
                if job.n_gpus > widest:
                    raise ConfigError(f"job {job.jid} needs {job.n_gpus} GPUs but the widest "
                                      f"node has {widest}", field="n_gpus")
                raise ConfigError(f"job {job.jid} needs {job.mem:.4g} GiB per GPU; no node "
                                  f"with {job.n_gpus} GPUs has that much", field="mem")
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
        self._next_arrival = 0
        # JFM's guard controller, per GPU
        self.duty: dict[int, _Control] = {}
        self._rng = np.random.default_rng(0)

    # ----------------------------------------------------------------- the loop
    def run(self, until: float = math.inf) -> Simulator:
        """Process events until none are left (or ``until``); returns self for chaining."""
        # resumable: run(until=t) then run() continues where it stopped
        arrivals, i, n = self.arrivals, self._next_arrival, len(self.arrivals)
        while i < n or self._heap:
            t_arr = arrivals[i].arrival if i < n else math.inf
            t_evt = self._heap[0][0] if self._heap else math.inf
            t = min(t_arr, t_evt)
            if t > until:
                break
            self.now = t
            arrived = i < n and arrivals[i].arrival <= t
            while i < n and arrivals[i].arrival <= t:
                self._enqueue(arrivals[i])
                i += 1
            freed = other = False
            while self._heap and self._heap[0][0] <= t:
                _, _, kind, jid, version = heapq.heappop(self._heap)
                job = self.jobs.get(jid)
                if kind == _CONTROL:
                    self._control(version, jid)
                    continue
                if kind == _FINISH and job is not None and job.version == version \
                        and job.running:
                    self._complete(job)
                    freed = other = True
                elif kind == _WAKE:
                    other = True
            self._next_arrival = i
            # a pass when jobs wait, or when GPUs were freed and co-located jobs could move;
            # a controller step or a stale finish event (a rate changed) alone changes no
            # occupancy, so it asks for no pass
            if not (arrived or other):
                continue
            if self.waiting or (freed and self._has_secondaries()):
                self.apply(self.scheduler.schedule(t, self))
        self._next_arrival = i
        return self

    def _has_secondaries(self) -> bool:
        return bool((self.cluster.secondary >= 0).any())

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
            self._check_secondary(job, gpus, p.mode)
        else:
            raise PlacementError(f"unknown role '{p.role}'", field="role")
        touched = self._occupants(gpus)
        for other in touched:
            self._settle(other)
        for g in gpus:
            if p.role == "primary":
                c.primary[g], c.primary_util[g], c.primary_mem[g] = job.jid, job.util, job.mem
                c.primary_share[g] = job.share
                c.free_per_node[c.node_of[g]] -= 1
            else:
                c.secondary[g] = job.jid
                c.sec_share[g] = p.mode == "share"
        job.gpus, job.role, job.mode, job.last = gpus, p.role, p.mode, self.now
        if math.isnan(job.start):
            job.start = self.now
        self.running[job.jid] = job
        for other in (*touched, job):
            self._reschedule(other)

    def _check_exists(self, job: Job, gpus: tuple[int, ...]) -> None:
        c = self.cluster
        nodes = {int(c.node_of[g]) for g in gpus}
        if len(nodes) != 1:
            raise PlacementError(f"job {job.jid}'s GPUs {gpus} span nodes {sorted(nodes)}",
                                 field="gpus")
        for g in gpus:
            if not c.exists[g]:
                raise PlacementError(f"GPU {g} does not exist (node {c.node_of[g]} has "
                                     f"{c.node_gpus_count[c.node_of[g]]})", field="gpus")
            if job.mem > c.gpu_mem[g] + 1e-9:
                raise PlacementError(f"job {job.jid} needs {job.mem:.4g} GiB, GPU {g} has "
                                     f"{c.gpu_mem[g]:.4g}", field="mem")

    def _check_primary(self, job: Job, gpus: tuple[int, ...]) -> None:
        c = self.cluster
        self._check_exists(job, gpus)
        for g in gpus:
            if c.primary[g] >= 0:
                raise PlacementError(f"GPU {g} already has primary job {c.primary[g]}",
                                     field="gpus")
        # a host that does not fit beside a resident surfer evicts it (surfers never block)
        for g in gpus:
            s = int(c.secondary[g])
            if s >= 0 and not fits_memory(job.mem, self.jobs[s].mem, c.gpu_mem[g]):
                self._preempt(self.jobs[s])

    def _check_secondary(self, job: Job, gpus: tuple[int, ...], mode: str) -> None:
        c = self.cluster
        self._check_exists(job, gpus)
        for g in gpus:
            if mode == "share":
                # a GPU-share co-tenant: both requests fractional, shares within one GPU;
                # it outranks a surfer, which it evicts
                if c.primary[g] < 0 or job.share >= 1 \
                        or c.primary_share[g] + job.share > 1 + 1e-9:
                    raise PlacementError(f"job {job.jid} (share {job.share}) cannot share "
                                         f"GPU {g} (primary share {c.primary_share[g]})",
                                         field="share")
                s = int(c.secondary[g])
                if s >= 0 and c.sec_share[g]:
                    raise PlacementError(f"GPU {g} already has co-tenant {s}", field="gpus")
                if s >= 0:
                    self._preempt(self.jobs[s])
            elif c.secondary[g] >= 0:
                raise PlacementError(f"GPU {g} already has secondary job {c.secondary[g]}",
                                     field="gpus")
            if mode != "timeslice" and c.primary[g] >= 0 \
                    and not fits_memory(c.primary_mem[g], job.mem, c.gpu_mem[g]):
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
                c.primary_share[g] = 0.0
                c.primary_est_end[g] = np.inf
                c.free_per_node[c.node_of[g]] += 1
            else:
                c.secondary[g] = -1
                c.sec_share[g] = False
        touched = [o for o in self._occupants(gpus) if o is not job]
        for g in gpus:  # a GPU-share co-tenant takes over the GPU its primary left
            s = int(c.secondary[g])
            if job.role == "primary" and s >= 0 and c.sec_share[g]:
                tenant = self.jobs[s]
                self._settle(tenant)
                c.secondary[g], c.sec_share[g] = -1, False
                c.primary[g], c.primary_util[g] = s, tenant.util
                c.primary_mem[g], c.primary_share[g] = tenant.mem, tenant.share
                c.free_per_node[c.node_of[g]] -= 1
                tenant.role, tenant.mode = "primary", "exclusive"
        for other in touched:
            self._settle(other)
        job.gpus, job.role, job.rate, job.hosting = (), "", 0.0, False
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
            if job.hosting:
                job.hosted_time += dt
                job.hosted_work += job.rate * dt
        job.last = self.now

    def gpu_rate(self, g: int, job: Job) -> float:
        """Rate of ``job`` on GPU ``g`` given whoever shares it (1.0 when alone)."""
        c = self.cluster
        p, s = int(c.primary[g]), int(c.secondary[g])
        if p < 0 or s < 0:
            return 1.0
        host, surfer = self.jobs[p], self.jobs[s]
        truth = self.truth.speeds(host.jid, host.util, host.profile, surfer.jid, surfer.util,
                                  surfer.profile)
        duty = self._jfm_duty(g, host, surfer) if surfer.mode == "jfm" else None
        rates = pair_rates(host.util, surfer.util, surfer.mode, self.fusion, truth, duty)
        return rates[0] if job.jid == p else rates[1]

    def _jfm_duty(self, g: int, host: Job, surfer: Job) -> float:
        """The duty cycle JFM runs the surfer on GPU g at: first from the (pessimistic, for the
        ``ucb`` controller) *prediction*, then from the host's observed slowdowns."""
        entry = self.duty.get(g)
        if entry is not None and entry.host == host.jid and entry.surfer == surfer.jid:
            return entry.d
        from schedlab.couchsurfer.fusion import prior_duty

        d = max(_MIN_DUTY, prior_duty(host.util, surfer.util, self.fusion))
        self.duty[g] = _Control(host.jid, surfer.jid, d, self.now)
        if math.isfinite(self.fusion.guard) and self.fusion.control_period_s > 0:
            self._push(self.now + self.fusion.control_period_s, _CONTROL, surfer.jid, g)
        return d

    def _control(self, g: int, surfer_jid: int) -> None:
        """JFM's feedback step: observe the host's slowdown (noisy), rescale the duty cycle.

        ``once``: one correction to ``target / observed`` of the duty. ``ucb``: every step adds
        an observation of the gain (slowdown per unit duty); the duty follows an upper
        confidence bound on it, and the next step comes after a doubled interval."""
        c = self.cluster
        entry = self.duty.get(g)
        if entry is None or entry.surfer != surfer_jid or c.secondary[g] != surfer_jid \
                or c.primary[g] != entry.host:
            return
        p = self.fusion
        if p.controller == "once" and entry.n > 0:
            return
        host, surfer = self.jobs[entry.host], self.jobs[surfer_jid]
        truth = self.truth.speeds(host.jid, host.util, host.profile, surfer.jid, surfer.util,
                                  surfer.profile)
        observed = p.priority_residual * entry.d * max(0.0, 1.0 / truth[0] - 1.0)
        observed *= max(0.0, 1.0 + self._rng.normal(0.0, p.measure_noise))
        target = p.guard * (1.0 - p.guard_margin)
        gain = observed / entry.d
        entry.n += 1
        entry.total += gain
        entry.total_sq += gain * gain
        if p.controller == "once":
            bound = gain
        else:
            mean = entry.total / entry.n
            spread = 0.0
            if entry.n >= 2 and mean > 0:
                var = max(0.0, entry.total_sq / entry.n - mean * mean) * entry.n / (entry.n - 1)
                spread = math.sqrt(var) / mean
            sd = max(p.noise_prior, spread)
            bound = mean * (1.0 + p.obs_z * sd / math.sqrt(entry.n))
        step = min(2 ** entry.n, p.max_backoff) * p.control_period_s
        if p.controller == "ucb":
            # the guard bounds the host's slowdown over its whole hosted time: an excess
            # observed in the last interval is paid back over the next one
            entry.debt = max(0.0, entry.debt + (observed - target) * (self.now - entry.since))
            target = max(0.0, target - entry.debt / step)
        d = 1.0 if bound <= 0 else max(_MIN_DUTY, min(1.0, target / bound))
        for job in (host, surfer):
            self._settle(job)
        entry.d, entry.since = d, self.now
        for job in (host, surfer):
            self._reschedule(job)
        if p.controller == "ucb":
            self._push(self.now + step, _CONTROL, surfer_jid, g)

    def _reschedule(self, job: Job) -> None:
        job.rate = min(self.gpu_rate(g, job) for g in job.gpus)
        c = self.cluster
        job.hosting = job.role == "primary" and any(
            c.secondary[g] >= 0 and not c.sec_share[g] for g in job.gpus)
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
