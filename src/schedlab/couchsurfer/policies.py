"""CouchSurfer's scheduler and every baseline it is compared with, behind one Protocol.

CouchSurfer (paper 06): every job is first offered to an ordinary exclusive scheduler (EASY
backfilling by default); an exploratory job that would *queue* there is placed at once as a
low-priority *surfer* by the threshold-guided EJPP algorithm (:mod:`.ejpp`), co-located under
the Job Fusion Mechanism (:mod:`.fusion`), and moved to a GPU of its own when one falls idle.
Baselines: FIFO, SJF (on the estimate), Tiresias (discretised 2-queue LAS with preemption, Gu
et al., NSDI'19), EASY backfilling (Lifka, 1995), Gandiva (packing by utilisation,
time-slicing when a job does not fit, migration to idle GPUs; Xiao et al., OSDI'18),
AntMan-style opportunistic sharing (exploratory jobs as low-priority jobs on idle and busy
GPUs, no interference guard; Xiao et al., OSDI'20) and Lucid-style affinity packing (shortest
estimate first, pack only pairs predicted to interfere little; Hu et al., ASPLOS'23).
Every scheduler honours fractional GPU requests (``share < 1``) by packing them two to a GPU.

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
#: how a secondary placed by CouchSurfer/AntMan/Hydro shares its GPU (see .fusion)
SURFER_MODES = ("jfm", "priority", "bubble")


class Planner:
    """A scratch copy of GPU occupancy so one pass can plan several placements consistently."""

    def __init__(self, sim: Simulator) -> None:
        c = sim.cluster
        self.sim = sim
        self.gpn = c.gpus_per_node
        self.primary_busy = (c.primary >= 0) | ~c.exists
        self.secondary_busy = (c.secondary >= 0) | ~c.exists
        self.free_per_node = c.free_per_node.copy()
        # GPU-share room: a fractional primary without a co-tenant (a surfer there is evicted)
        self.room = np.where((c.primary >= 0) & (c.primary_share < 1) & ~c.sec_share,
                             1.0 - c.primary_share, 0.0)
        self.pmem = c.primary_mem.copy()
        self.decision = Decision()

    def exclusive(self, job: Job, nodes: np.ndarray | None = None) -> tuple[int, ...] | None:
        """Best-fit n free GPUs on one node (optionally among ``nodes``); None if none fit."""
        if self.free_per_node.max() < job.n_gpus:
            return None
        c = self.sim.cluster
        fits = (self.free_per_node >= job.n_gpus) & (c.node_memory_gib >= job.mem - 1e-9)
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

    def pack_share(self, job: Job) -> tuple[int, ...] | None:
        """A fractional job beside a fractional primary (best fit on the remaining share)."""
        if job.share >= 1:
            return None
        c = self.sim.cluster
        ok = (self.room >= job.share - 1e-9) & (c.gpu_mem - self.pmem >= job.mem - 1e-9)
        ids = np.flatnonzero(ok)
        if ids.size == 0:
            return None
        return (int(ids[np.argmin(self.room[ids])]),)

    def allocate(self, job: Job, nodes: np.ndarray | None = None):
        """(gpus, role, mode) of the job's own allocation now (GPU share or free GPUs)."""
        gpus = self.pack_share(job)
        if gpus is not None:
            return gpus, "secondary", "share"
        gpus = self.exclusive(job, nodes)
        return None if gpus is None else (gpus, "primary", "exclusive")

    def grant(self, job: Job, nodes: np.ndarray | None = None) -> bool:
        """Allocate and take in one step; False if the job would have to queue."""
        got = self.allocate(job, nodes)
        if got is None:
            return False
        self.take(job, *got)
        return True

    def take(self, job: Job, gpus: tuple[int, ...], role: str = "primary",
             mode: str = "exclusive") -> None:
        idx = list(gpus)
        if role == "primary":
            self.primary_busy[idx] = True
            self.free_per_node[idx[0] // self.gpn] -= len(idx)
            self.pmem[idx] = job.mem
            self.room[idx] = 1.0 - job.share if job.share < 1 else 0.0
        else:
            self.secondary_busy[idx] = True
            self.room[idx] = 0.0
        self.decision.place.append(Placement(job.jid, gpus, role, mode))

    def migrate(self, jobs: Iterable[Job], limit: int = 64) -> None:
        """Move running secondaries (surfers, packed or time-sliced jobs) to idle GPUs of
        their own: preempted and placed in the same decision, progress kept."""
        moved = 0
        moving = set(self.decision.preempt)
        for job in jobs:
            if moved >= limit or self.free_per_node.max() == 0:
                return
            if job.jid in moving:
                continue
            gpus = self.exclusive(job)
            if gpus is None:
                continue
            self.decision.preempt.append(job.jid)
            self.secondary_busy[list(job.gpus)] = False
            self.take(job, gpus)
            moved += 1


def _resurf(plan: Planner, sim: Simulator, mode: str, limit: int = 64) -> None:
    """Move slowed surfers to idle GPUs (no host, no surfer) as surfers there: they run at
    full speed and still never block a deterministic job."""
    c = sim.cluster
    moving = set(plan.decision.preempt)
    slow = sorted((j for j in sim.running.values() if j.role == "secondary" and j.mode == mode
                   and j.rate < 0.999 and j.jid not in moving), key=lambda j: j.rate)
    moved = 0
    for job in slow:
        if moved >= limit:
            return
        idle = c.exists & ~plan.primary_busy & ~plan.secondary_busy \
            & (c.gpu_mem >= job.mem - 1e-9)
        if not idle.any():
            return
        gpus = _lowest_util_gang(idle, np.zeros(idle.size), c.node_of, job.n_gpus)
        if gpus is None:
            continue
        plan.decision.preempt.append(job.jid)
        plan.secondary_busy[list(job.gpus)] = False
        plan.take(job, gpus, "secondary", mode)
        moved += 1


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
            if not plan.grant(job):
                break
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
            plan.grant(job)
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
        no_room = 10**9  # GPU count for which preemption found no node in this pass
        for job in waiting:
            if plan.grant(job):
                continue
            gpus = None
            if self._level(job, now) == 0 and job.n_gpus < no_room:
                gpus = self._make_room(job, sim, plan, now)
                if gpus is None:
                    no_room = job.n_gpus  # a job as wide cannot find room either
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
        # only nodes holding a level-1 primary (or already enough free GPUs) can help
        level1 = [j for j in sim.running.values() if j.role == "primary"
                  and self._level(j, now) == 1]
        if not level1:
            return None
        candidates = sorted({int(c.node_of[j.gpus[0]]) for j in level1})
        for node in candidates:
            ids = list(c.node_gpus(node))
            free = int(plan.free_per_node[node])
            victims = {int(c.primary[g]) for g in ids if c.primary[g] >= 0
                       and plan.primary_busy[g]}
            if int(c.node_gpus_count[node]) < job.n_gpus \
                    or c.node_memory_gib[node] < job.mem - 1e-9:
                continue
            # a victim beside a job planned in this pass (a GPU-share co-tenant) stays
            jobs = [sim.jobs[v] for v in victims if v not in plan.decision.preempt
                    and not any(plan.secondary_busy[g] and c.secondary[g] < 0
                                for g in sim.jobs[v].gpus)]
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
            plan.room[list(victim.gpus)] = 0.0  # a co-tenant takes over, not a new job
            plan.free_per_node[victim.gpus[0] // plan.gpn] += victim.n_gpus
            for g in victim.gpus:  # its GPU-share co-tenant becomes primary, keeping the GPU
                if c.sec_share[g]:
                    plan.primary_busy[g] = True
                    plan.free_per_node[victim.gpus[0] // plan.gpn] -= 1
        return plan.exclusive(job)


def _secondaries(sim: Simulator, modes: tuple[str, ...]) -> list[Job]:
    """Running secondaries in one of ``modes``, oldest first (migration candidates)."""
    return sorted((j for j in sim.running.values() if j.role == "secondary" and j.mode in modes),
                  key=lambda j: j.arrival)


@dataclass
class Gandiva:
    """Gandiva (Xiao et al., OSDI'18): FIFO on free GPUs; a job that does not fit is *packed*
    beside a running job when their utilisations sum to at most ``max_pack_util`` and memory
    fits (plain sharing, fusion mode ``equal``), else *time-sliced* with one (suspend/resume
    at mini-batch boundaries, so memory need not fit; mode ``timeslice``); packed and
    time-sliced jobs *migrate* to GPUs of their own as soon as some fall idle.
    Nothing bounds the slowdown of the job already there.
    """

    name: str = "gandiva"
    max_pack_util: float = 1.0
    timeslice: bool = True
    depth: int = DEPTH

    def schedule(self, now: float, sim: Simulator) -> Decision:
        plan = Planner(sim)
        c = sim.cluster
        blocked = False
        failed: list[Job] = []
        for job in _window(sim.waiting.values(), self.depth):
            if not blocked and plan.grant(job):
                continue
            blocked = True  # FIFO on free GPUs: later jobs may only pack or time-slice
            if any(job.n_gpus >= f.n_gpus and job.mem >= f.mem for f in failed):
                continue
            base = plan.primary_busy & ~plan.secondary_busy & (c.primary >= 0) & c.exists
            pack = base & (c.primary_util + job.util <= self.max_pack_util) \
                & (c.primary_mem + job.mem <= c.gpu_mem + 1e-9)
            gpus = _lowest_util_gang(pack, c.primary_util, c.node_of, job.n_gpus)
            mode = "equal"
            if gpus is None and self.timeslice:
                gpus = _lowest_util_gang(base & (c.gpu_mem >= job.mem - 1e-9),
                                         c.primary_util, c.node_of, job.n_gpus)
                mode = "timeslice"
            if gpus is not None:
                plan.take(job, gpus, "secondary", mode)
            elif len(failed) < 8:
                failed.append(job)
        if not sim.waiting_kind[DET] or not blocked:
            plan.migrate(_secondaries(sim, ("equal", "timeslice")))
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
class Lucid:
    """Lucid-style affinity packing (Hu et al., ASPLOS'23), non-intrusive: shortest estimate
    first on free GPUs; a job that does not fit is packed (plain sharing) beside the running
    job whose pair is *predicted* (fitted interference model) to keep both at or above
    ``min_speed``, choosing the pair with the highest predicted speed. No preemption."""

    name: str = "lucid"
    min_speed: float = 0.85
    depth: int = DEPTH

    def schedule(self, now: float, sim: Simulator) -> Decision:
        from schedlab.couchsurfer.interference import predict_speed

        plan = Planner(sim)
        c = sim.cluster
        coef = sim.fusion.coef
        failed: list[Job] = []
        for job in sorted(_window(sim.waiting.values(), self.depth), key=lambda j: j.estimate):
            if plan.grant(job):
                continue
            if any(job.n_gpus >= f.n_gpus and job.mem >= f.mem and job.util >= f.util
                   for f in failed):
                continue
            base = plan.primary_busy & ~plan.secondary_busy & (c.primary >= 0) & c.exists \
                & (c.primary_mem + job.mem <= c.gpu_mem + 1e-9)
            if not base.any():
                continue
            hu = np.maximum(c.primary_util, 1e-9)
            pair = np.minimum(predict_speed(hu, job.util, coef), predict_speed(job.util, hu, coef))
            ok = base & (pair >= self.min_speed)
            gpus = _lowest_util_gang(ok, -pair, c.node_of, job.n_gpus)
            if gpus is not None:
                plan.take(job, gpus, "secondary", "equal")
            elif len(failed) < 8:
                failed.append(job)
        return plan.decision


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
        while k < len(window) and plan.grant(window[k]):
            k += 1
        if k >= len(window) or plan.free_per_node.max() == 0:
            return plan.decision
        node, shadow = self._reservation(window[k], sim, plan)
        others = np.ones(sim.cluster.nodes, dtype=bool)
        others[node] = False
        for job in window[k + 1:]:
            ends_in_time = now + job.estimate <= shadow
            plan.grant(job, None if ends_in_time else others)
        return plan.decision

    @staticmethod
    def _reservation(head: Job, sim: Simulator, plan: Planner) -> tuple[int, float]:
        """The node and time at which the head can start, from running jobs' estimates.

        Per node, the head fits once its n-th earliest-ending GPU is free: free GPUs count
        as "now", GPUs planned in this pass as never (their estimates are not yet known).
        """
        c = sim.cluster
        ends = np.where(plan.primary_busy, c.primary_est_end, sim.now)
        ends = np.where(c.exists, ends, np.inf)
        ends = np.sort(ends.reshape(c.nodes, c.gpus_per_node), axis=1)[:, head.n_gpus - 1]
        ends = np.where(c.node_memory_gib >= head.mem - 1e-9, ends, np.inf)
        node = int(np.argmin(ends))
        return node, float(ends[node])


class ExclusivePolicy(Protocol):
    """A baseline that can plan exclusive placements for a given window of jobs."""

    def plan(self, now: float, sim: Simulator, window: list[Job], plan: Planner) -> Decision: ...


@dataclass
class CouchSurfer:
    """Every job to an ordinary exclusive scheduler first; exploratory jobs that would queue
    surf via EJPP.

    The inner scheduler (``det_scheduler``, default EASY backfilling) sees all waiting jobs in
    arrival order, so an exploratory job takes free GPUs (or a GPU share) of its own whenever
    the inner policy would start it now. One that would queue is placed at once as a
    low-priority secondary (fusion mode ``mode``, default ``jfm``: the guarded Job Fusion
    Mechanism) on hosted or idle GPUs by the threshold-guided EJPP algorithm, so it never
    blocks a deterministic job (a host that arrives evicts a surfer only if memory does not
    fit). When no deterministic job waits, surfers move to idle GPUs of their own; with
    ``promote`` a surfer its host slows also stays a candidate of the inner scheduler, which
    may give it free GPUs of its own before a waiting job it outranks (earlier arrival for
    backfilling, shorter estimate for SJF). ``surf_only=True`` restores the first version's
    behaviour (exploratory jobs never exclusive).
    """

    name: str = "couchsurfer"
    thresholds: Thresholds = Thresholds()
    det_scheduler: str = "backfill"
    mode: str = "jfm"
    surf_only: bool = False
    migrate: bool = True
    promote: bool = True
    depth: int = DEPTH

    def __post_init__(self) -> None:
        if self.det_scheduler not in EXCLUSIVE:
            raise UnknownNameError("deterministic scheduler", self.det_scheduler,
                                   list(EXCLUSIVE))
        if self.mode not in SURFER_MODES:
            raise UnknownNameError("surfer mode", self.mode, list(SURFER_MODES))
        self._inner: ExclusivePolicy = EXCLUSIVE[self.det_scheduler](depth=self.depth)

    def schedule(self, now: float, sim: Simulator) -> Decision:
        plan = Planner(sim)
        source = sim.waiting_kind[DET] if self.surf_only else sim.waiting
        window = _window(source.values(), self.depth)
        promoted: set[int] = set()
        if self.promote and not self.surf_only and plan.free_per_node.max() > 0:
            # a surfer slowed by its host still counts as waiting for GPUs of its own: the
            # inner scheduler weighs it (by arrival and estimate) against the waiting jobs
            slow = [j for j in sim.running.values() if j.role == "secondary"
                    and j.mode == self.mode and j.rate < 0.999]
            if slow:
                promoted = {j.jid for j in slow}
                window = sorted(window + slow, key=lambda j: (j.arrival, j.jid))[: self.depth]
        self._inner.plan(now, sim, window, plan)
        if promoted:
            # slots a secondary (a GPU-share co-tenant) takes in this pass stay taken
            kept = {g for p in plan.decision.place if p.role == "secondary" for g in p.gpus}
            for p in plan.decision.place:
                if p.jid in promoted:
                    job = sim.jobs[p.jid]
                    plan.decision.preempt.append(p.jid)
                    # its old slots free up, unless a co-tenant lands there in this pass
                    plan.secondary_busy[[g for g in job.gpus if g not in kept]] = False
            window = [j for j in window if j.jid not in promoted]
        placed = {p.jid for p in plan.decision.place}
        if not self.surf_only and any(j.kind == EXP and j.jid not in placed for j in window):
            # exploratory jobs that would queue surf instead: plan the deterministic rest
            # again without them (they no longer hold a FIFO head or a reservation)
            rest = [j for j in window if j.kind == DET and j.jid not in placed]
            if rest:
                self._inner.plan(now, sim, rest, plan)
                placed = {p.jid for p in plan.decision.place}
        exp = [j for j in _window(sim.waiting_kind[EXP].values(), self.depth + len(placed))
               if j.jid not in placed][: self.depth]
        if exp:
            self._place_surfers(exp, sim, plan)
        if self.migrate:
            if not sim.waiting_kind[DET]:
                plan.migrate(_secondaries(sim, (self.mode,)))
            _resurf(plan, sim, self.mode)
        return plan.decision

    def _place_surfers(self, exp: list[Job], sim: Simulator, plan: Planner) -> None:
        c = sim.cluster
        # hosts planned in this very pass are not yet in the arrays: keep their GPUs off-limits
        planned = plan.primary_busy & (c.primary < 0) & c.exists
        inst = EjppInstance(
            gpu_node=c.node_of, host_util=c.primary_util, host_mem=c.primary_mem,
            has_host=c.primary >= 0, slot_free=~plan.secondary_busy & ~planned,
            job_gpus=np.array([j.n_gpus for j in exp]), job_util=np.array([j.util for j in exp]),
            job_mem=np.array([j.mem for j in exp]), fusion=sim.fusion, thresholds=self.thresholds,
            gpu_mem=c.gpu_mem, mode=self.mode)
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
            plan.take(job, gpus, "secondary", self.mode)


@dataclass
class AntMan(CouchSurfer):
    """AntMan-style opportunistic sharing (Xiao et al., OSDI'20): resource-guaranteed
    (deterministic) jobs FIFO on GPUs of their own; opportunistic (exploratory) jobs run at
    low GPU priority on idle or busy GPUs at once, with no interference guard (mode
    ``priority``), and are moved to idle GPUs when no guaranteed job waits."""

    name: str = "antman"
    det_scheduler: str = "fifo"
    mode: str = "priority"
    surf_only: bool = True
    thresholds: Thresholds = Thresholds(max_host_util=1.0, min_surfer_rate=0.0)


@dataclass
class Hydro(CouchSurfer):
    """Hydro's cluster-level scheduling (Hu et al., OSDI'23, the Hydro Coordinator), the part
    that decides where tuning trials (exploratory jobs) run:

    * *elastic trials on idle resources*: a trial never queues behind production jobs for
      GPUs of its own; it takes idle GPUs at low priority (a later deterministic job lands on
      them and the trial drops to interleaving), and moves to idle GPUs of its own when no
      deterministic job waits;
    * *bubble squeezing*: otherwise the trial is interleaved into the idle time ("bubbles")
      of a running deterministic job: fusion mode ``bubble``, the trial progresses only in the
      host's idle GPU time (``1 - util``, its measured solo utilisation) and the host pays the
      switching cost ``bubble_host_slowdown``; the trial must fit in the host's free memory.
      Hosts are chosen by the most idle time (EJPP's best gang on the bubble rate);
      ``max_host_util`` keeps trials off hosts with little idle time.

    Deterministic (production) jobs: EASY backfilling, as CouchSurfer's. Not modelled: the
    job-level half of Hydro (surrogate model scaling, trial fusion), which changes the trials'
    work itself, and heterogeneity-aware placement of the final (full-size) trial. The trace
    has no pipeline-parallel jobs, so any host's idle GPU time stands in for its bubbles.
    """

    name: str = "hydro"
    det_scheduler: str = "backfill"
    mode: str = "bubble"
    surf_only: bool = True
    thresholds: Thresholds = Thresholds(max_host_util=1.0, min_surfer_rate=0.02)


EXCLUSIVE: dict[str, Callable[..., ExclusivePolicy]] = {
    "fifo": Fifo, "sjf": Sjf, "tiresias": Tiresias, "backfill": Backfill,
}
SCHEDULERS: dict[str, Callable[..., Scheduler]] = {
    "couchsurfer": CouchSurfer,
    "fifo": Fifo,
    "sjf": Sjf,
    "tiresias": Tiresias,
    "backfill": Backfill,
    "gandiva": Gandiva,
    "antman": AntMan,
    "lucid": Lucid,
    "hydro": Hydro,
}
BASELINES = tuple(name for name in SCHEDULERS if name != "couchsurfer")


def make_scheduler(name: str, **options: object) -> Scheduler:
    """Build a scheduler by its CLI name; raises UnknownNameError listing the valid ones."""
    return lookup(SCHEDULERS, "scheduler", name)(**options)
