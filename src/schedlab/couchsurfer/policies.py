"""CouchSurfer's scheduler and every baseline it is compared with, behind one Protocol.

CouchSurfer (paper 06): deterministic jobs are scheduled as usual (FIFO here) on exclusive
GPUs; exploratory jobs bypass that queue and are placed at once as low-priority *surfers* by
the threshold-guided EJPP algorithm (:mod:`.ejpp`), co-located under the Job Fusion Mechanism
(:mod:`.fusion`). Baselines: FIFO exclusive, SJF (on the user's estimate), Tiresias-style
discretised LAS with preemption (Gu et al., NSDI'19), Gandiva-style packing without priorities
(Xiao et al., OSDI'18) and EASY backfilling (Lifka, 1995).

Every scheduler looks at no more than ``depth`` waiting jobs per pass, as production schedulers
do (Slurm's ``bf_max_job_test`` defaults to 500), so a pass costs O(depth + GPUs).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from schedlab.core.errors import UnknownNameError
from schedlab.core.registry import lookup
from schedlab.couchsurfer.ejpp import EjppInstance, Thresholds, best_gang
from schedlab.couchsurfer.engine import Decision, Placement, Scheduler, Simulator
from schedlab.couchsurfer.jobs import DET, EXP, Job

DEPTH = 500


class Planner:
    """A scratch copy of GPU occupancy so one pass can plan several placements consistently."""

    def __init__(self, sim: Simulator) -> None:
        c = sim.cluster
        self.sim = sim
        self.gpn = c.gpus_per_node
        self.primary_busy = c.primary >= 0
        self.secondary_busy = c.secondary >= 0
        self.free_per_node = c.free_per_node.copy()
        self.decision = Decision()

    def exclusive(self, job: Job, nodes: np.ndarray | None = None) -> tuple[int, ...] | None:
        """Best-fit n free GPUs on one node (optionally among ``nodes``); None if none fit."""
        if self.free_per_node.max() < job.n_gpus:
            return None
        fits = self.free_per_node >= job.n_gpus
        if nodes is not None:
            fits &= nodes
        candidates = np.flatnonzero(fits)
        if candidates.size == 0:
            return None
        node = int(candidates[np.argmin(self.free_per_node[candidates])])
        ids = np.arange(node * self.gpn, (node + 1) * self.gpn)
        free = ids[~self.primary_busy[ids]]
        free = free[np.argsort(self.secondary_busy[free], kind="stable")][: job.n_gpus]
        return tuple(int(g) for g in free)

    def take(self, job: Job, gpus: tuple[int, ...], role: str = "primary",
             mode: str = "exclusive") -> None:
        idx = list(gpus)
        if role == "primary":
            self.primary_busy[idx] = True
            self.free_per_node[idx[0] // self.gpn] -= len(idx)
        else:
            self.secondary_busy[idx] = True
        self.decision.place.append(Placement(job.jid, gpus, role, mode))


def _window(jobs: Iterable[Job], depth: int = DEPTH) -> list[Job]:
    return list(itertools.islice(jobs, depth))


@dataclass
class Fifo:
    """First come, first served on exclusive GPUs; the head blocks everyone behind it."""

    name: str = "fifo"
    depth: int = DEPTH

    def schedule(self, now: float, sim: Simulator) -> Decision:
        return self.plan(now, sim, _window(sim.waiting.values(), self.depth), Planner(sim))

    def plan(self, now: float, sim: Simulator, window: list[Job], plan: Planner) -> Decision:
        for job in window:
            gpus = plan.exclusive(job)
            if gpus is None:
                break
            plan.take(job, gpus)
        return plan.decision


@dataclass
class Sjf:
    """Shortest (user-estimated) job first, non-blocking: skips jobs that do not fit."""

    name: str = "sjf"
    depth: int = DEPTH

    def schedule(self, now: float, sim: Simulator) -> Decision:
        return self.plan(now, sim, _window(sim.waiting.values(), self.depth), Planner(sim))

    def plan(self, now: float, sim: Simulator, window: list[Job], plan: Planner) -> Decision:
        if plan.free_per_node.max() == 0:
            return plan.decision
        for job in sorted(window, key=lambda j: j.estimate):
            gpus = plan.exclusive(job)
            if gpus is not None:
                plan.take(job, gpus)
        return plan.decision


@dataclass
class Tiresias:
    """Discretised two-queue LAS on attained GPU-seconds, preemptive (Tiresias, NSDI'19).

    Jobs that have received less than ``threshold`` GPU-seconds outrank the rest; within a
    queue, FIFO. A waiting job may preempt lower-queue jobs on one node to get its GPUs. The
    scheduler re-plans every ``quantum`` seconds while jobs wait, as Tiresias does.
    """

    name: str = "tiresias"
    threshold: float = 3600.0
    quantum: float = 600.0
    depth: int = DEPTH

    def _level(self, job: Job, now: float) -> int:
        attained = job.attained + (now - job.last) * job.n_gpus if job.running else job.attained
        return int(attained >= self.threshold)

    def schedule(self, now: float, sim: Simulator) -> Decision:
        return self.plan(now, sim, _window(sim.waiting.values(), self.depth), Planner(sim))

    def plan(self, now: float, sim: Simulator, window: list[Job], plan: Planner) -> Decision:
        waiting = sorted(window, key=lambda j: (self._level(j, now), j.arrival))
        for job in waiting:
            gpus = plan.exclusive(job)
            if gpus is None and self._level(job, now) == 0:
                gpus = self._make_room(job, sim, plan, now)
            if gpus is not None:
                plan.take(job, gpus)
        if len(window) > len(plan.decision.place):
            plan.decision.wake_at = now + self.quantum
        return plan.decision

    def _make_room(self, job: Job, sim: Simulator, plan: Planner,
                   now: float) -> tuple[int, ...] | None:
        """Preempt level-1 primaries on the node where fewest victims free n GPUs."""
        c = sim.cluster
        best: tuple[int, list[Job]] | None = None
        for node in range(c.nodes):
            ids = list(c.node_gpus(node))
            free = int(plan.free_per_node[node])
            victims = {int(c.primary[g]) for g in ids if c.primary[g] >= 0
                       and plan.primary_busy[g]}
            jobs = [sim.jobs[v] for v in victims if v not in plan.decision.preempt]
            jobs = sorted((j for j in jobs if self._level(j, now) == 1),
                          key=lambda j: -j.arrival)
            chosen, gained = [], 0
            for victim in jobs:
                if free + gained >= job.n_gpus:
                    break
                chosen.append(victim)
                gained += victim.n_gpus
            if free + gained >= job.n_gpus and (best is None or len(chosen) < best[0]):
                best = (len(chosen), chosen)
        if best is None or not best[1]:
            return None
        for victim in best[1]:
            plan.decision.preempt.append(victim.jid)
            plan.primary_busy[list(victim.gpus)] = False
            plan.free_per_node[victim.gpus[0] // plan.gpn] += victim.n_gpus
        return plan.exclusive(job)


@dataclass
class Gandiva:
    """FIFO, and when a job does not fit, pack it onto busy GPUs without priorities (OSDI'18).

    Gandiva packs jobs whose combined utilisation stays below ``max_pack_util`` and whose
    memory fits; both jobs then slow down (fusion mode ``equal``): nothing bounds the host.
    """

    name: str = "gandiva"
    max_pack_util: float = 1.0
    depth: int = DEPTH

    def schedule(self, now: float, sim: Simulator) -> Decision:
        plan = Planner(sim)
        c, cap = sim.cluster, sim.fusion.gpu_memory_gib
        for job in _window(sim.waiting.values(), self.depth):
            gpus = plan.exclusive(job)
            if gpus is not None:
                plan.take(job, gpus)
                continue
            ok = (plan.primary_busy & ~plan.secondary_busy
                  & (c.primary_util + job.util <= self.max_pack_util)
                  & (c.primary_mem + job.mem <= cap) & (c.primary >= 0))
            gpus = _lowest_util_gang(ok, c.primary_util, c.node_of, job.n_gpus)
            if gpus is None:
                continue
            plan.take(job, gpus, "secondary", "equal")
        return plan.decision


def _lowest_util_gang(ok: np.ndarray, util: np.ndarray, node_of: np.ndarray,
                      n: int) -> tuple[int, ...] | None:
    ids = np.flatnonzero(ok)
    if ids.size < n:
        return None
    if n == 1:
        return (int(ids[np.argmin(util[ids])]),)
    for node in np.unique(node_of[ids]):
        on = ids[node_of[ids] == node]
        if on.size >= n:
            return tuple(int(g) for g in on[np.argsort(util[on], kind="stable")][:n])
    return None


@dataclass
class Backfill:
    """EASY backfilling: FIFO head gets a reservation; later jobs may jump ahead if they do
    not delay it (they end, by their estimate, before it starts, or use another node)."""

    name: str = "backfill"
    depth: int = DEPTH

    def schedule(self, now: float, sim: Simulator) -> Decision:
        return self.plan(now, sim, _window(sim.waiting.values(), self.depth), Planner(sim))

    def plan(self, now: float, sim: Simulator, window: list[Job], plan: Planner) -> Decision:
        k = 0
        while k < len(window):
            gpus = plan.exclusive(window[k])
            if gpus is None:
                break
            plan.take(window[k], gpus)
            k += 1
        if k >= len(window) or plan.free_per_node.max() == 0:
            return plan.decision
        node, shadow = self._reservation(window[k], sim, plan)
        others = np.ones(sim.cluster.nodes, dtype=bool)
        others[node] = False
        for job in window[k + 1:]:
            ends_in_time = now + job.estimate <= shadow
            gpus = plan.exclusive(job, None if ends_in_time else others)
            if gpus is not None:
                plan.take(job, gpus)
        return plan.decision

    @staticmethod
    def _reservation(head: Job, sim: Simulator, plan: Planner) -> tuple[int, float]:
        """The node and time at which the head can start, from running jobs' estimates.

        Per node, the head fits once its n-th earliest-ending GPU is free: free GPUs count
        as "now", GPUs planned in this pass as never (their estimates are not yet known).
        """
        c = sim.cluster
        ends = np.where(plan.primary_busy, c.primary_est_end, sim.now)
        ends = np.sort(ends.reshape(c.nodes, c.gpus_per_node), axis=1)[:, head.n_gpus - 1]
        node = int(np.argmin(ends))
        return node, float(ends[node])


class ExclusivePolicy(Protocol):
    """A baseline that can plan exclusive placements for a given window of jobs."""

    def plan(self, now: float, sim: Simulator, window: list[Job], plan: Planner) -> Decision: ...


@dataclass
class CouchSurfer:
    """Deterministic jobs by an ordinary exclusive scheduler; exploratory jobs surf via EJPP.

    Exploratory jobs never take a GPU exclusively: they become low-priority secondaries
    (fusion mode ``jfm``) on hosted or idle GPUs, so they bypass the queue and never block a
    deterministic job (a host that arrives evicts a surfer only if memory does not fit).
    ``det_scheduler`` names the baseline that schedules deterministic jobs (default EASY
    backfilling, the strongest exclusive baseline on our workloads' deterministic queue).
    """

    name: str = "couchsurfer"
    thresholds: Thresholds = Thresholds()
    det_scheduler: str = "backfill"
    depth: int = DEPTH

    def __post_init__(self) -> None:
        if self.det_scheduler not in EXCLUSIVE:
            raise UnknownNameError("deterministic scheduler", self.det_scheduler,
                                   list(EXCLUSIVE))
        self._inner: ExclusivePolicy = EXCLUSIVE[self.det_scheduler](depth=self.depth)

    def schedule(self, now: float, sim: Simulator) -> Decision:
        plan = Planner(sim)
        self._inner.plan(now, sim, _window(sim.waiting_kind[DET].values(), self.depth), plan)
        exp = _window(sim.waiting_kind[EXP].values(), self.depth)
        if exp:
            self._place_surfers(exp, sim, plan)
        return plan.decision

    def _place_surfers(self, exp: list[Job], sim: Simulator, plan: Planner) -> None:
        c = sim.cluster
        # hosts planned in this very pass are not yet in the arrays: keep their GPUs off-limits
        planned = plan.primary_busy & (c.primary < 0)
        inst = EjppInstance(
            gpu_node=c.node_of, host_util=c.primary_util, host_mem=c.primary_mem,
            has_host=c.primary >= 0, slot_free=~plan.secondary_busy & ~planned,
            job_gpus=np.array([j.n_gpus for j in exp]), job_util=np.array([j.util for j in exp]),
            job_mem=np.array([j.mem for j in exp]), fusion=sim.fusion, thresholds=self.thresholds)
        taken = ~inst.slot_free
        # a job at least as large (GPUs, memory, utilisation) as one that found no gang in this
        # pass cannot find one either: skipping it keeps a pass O(distinct failures x GPUs)
        failed: list[Job] = []
        for e, job in enumerate(exp):
            if any(job.n_gpus >= f.n_gpus and job.mem >= f.mem and job.util >= f.util
                   for f in failed):
                continue
            gpus, _ = best_gang(inst, e, taken)
            if not gpus:
                failed.append(job)
                continue
            taken[list(gpus)] = True
            plan.take(job, gpus, "secondary", "jfm")


EXCLUSIVE: dict[str, Callable[..., ExclusivePolicy]] = {
    "fifo": Fifo, "sjf": Sjf, "tiresias": Tiresias, "backfill": Backfill,
}
SCHEDULERS: dict[str, Callable[..., Scheduler]] = {
    "couchsurfer": CouchSurfer,
    "fifo": Fifo,
    "sjf": Sjf,
    "tiresias": Tiresias,
    "gandiva": Gandiva,
    "backfill": Backfill,
}
BASELINES = tuple(name for name in SCHEDULERS if name != "couchsurfer")


def make_scheduler(name: str, **options: object) -> Scheduler:
    """Build a scheduler by its CLI name; raises UnknownNameError listing the valid ones."""
    return lookup(SCHEDULERS, "scheduler", name)(**options)
