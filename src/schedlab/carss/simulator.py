"""The interval-based cluster simulator: ground truth and co-simulator share this one engine.

CARSS (paper 07) follows COSCO (Tuli et al.): time advances in fixed scheduling intervals; at
each interval the scheduler places waiting tasks and may migrate running ones; tasks then run
with their CPU demand trace, sharing each host's MIPS proportionally when it is oversubscribed.
The engine knows nothing of the scheduler: it only applies a placement vector and steps.

Why one engine for both: the paper's co-simulator predicts QoS by running "the same" system
forward from the current state; any gap between prediction and reality should come from what is
unknown (future arrivals and task sizes), which is exactly what the paper's forecaster targets.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from schedlab.carss.hosts import Hosts
from schedlab.core.errors import BadInputError

TWO_PI = 2.0 * np.pi


@dataclass
class Tasks:
    """Tasks as parallel arrays. ``host`` is -1 while waiting; ``mig_s`` is pending downtime."""

    tid: np.ndarray
    arrival: np.ndarray   # seconds
    work: np.ndarray      # million instructions
    done: np.ndarray      # MI executed so far
    cpu: np.ndarray       # mean MIPS demand
    amp: np.ndarray       # relative amplitude of the demand trace
    period: np.ndarray    # seconds, period of the demand trace
    phase: np.ndarray
    ram: np.ndarray       # MB
    disk: np.ndarray      # MB image moved on migration
    deadline: np.ndarray  # SLA: allowed response time, seconds
    host: np.ndarray
    mig_s: np.ndarray
    late: np.ndarray      # bool: already past its deadline

    def __len__(self) -> int:
        return int(self.tid.shape[0])

    def take(self, index: np.ndarray) -> Tasks:
        return Tasks(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def copy(self) -> Tasks:
        return Tasks(**{f.name: getattr(self, f.name).copy() for f in fields(self)})

    def concat(self, other: Tasks) -> Tasks:
        return Tasks(**{f.name: np.concatenate([getattr(self, f.name), getattr(other, f.name)])
                        for f in fields(self)})

    @classmethod
    def empty(cls) -> Tasks:
        floats = {f.name: np.zeros(0) for f in fields(cls)}
        floats.update(tid=np.zeros(0, dtype=np.int64), host=np.zeros(0, dtype=np.int64),
                      late=np.zeros(0, dtype=bool))
        return cls(**floats)


def new_tasks(tid: np.ndarray, arrival: np.ndarray, work: np.ndarray, cpu: np.ndarray,
              amp: np.ndarray, period: np.ndarray, phase: np.ndarray, ram: np.ndarray,
              disk: np.ndarray, deadline: np.ndarray) -> Tasks:
    """Fresh (waiting, nothing done) tasks from their parameters."""
    n = len(tid)
    return Tasks(np.asarray(tid, dtype=np.int64), arrival, work, np.zeros(n), cpu, amp, period,
                 phase, ram, disk, deadline, np.full(n, -1, dtype=np.int64), np.zeros(n),
                 np.zeros(n, dtype=bool))


@dataclass(frozen=True)
class IntervalStats:
    """What one interval produced; sums rather than means so horizons add up exactly."""

    interval: int
    energy_j: float
    completed: int
    response_sum_s: float
    violations: int       # completed tasks whose response time exceeded the SLA
    newly_late: int       # tasks (running or waiting) that crossed their deadline this interval
    tis_s: float          # task-seconds spent in the system (Little: sum of response times)
    migrations: int
    rejected: int         # placements the engine refused (RAM would overflow)
    waiting: int
    running: int
    util_mean: float
    util_max: float


@dataclass(frozen=True)
class Weights:
    """The scalar objective schedulers minimise (GOBI's O = a*energy + b*response, plus SLA)."""

    energy: float = 1.0
    response: float = 1.0
    sla: float = 1.0


def objective(stats: IntervalStats, hosts: Hosts, interval_s: float,
              weights: Weights = Weights()) -> float:
    """Energy as a fraction of peak, task-seconds per host-interval, late tasks per host."""
    peak = float(hosts.power_table[:, -1].sum()) * interval_s
    return (weights.energy * stats.energy_j / peak
            + weights.response * stats.tis_s / (interval_s * hosts.n)
            + weights.sla * stats.newly_late / hosts.n)


class Cluster:
    """The state of the cluster between intervals, and the rules that advance it."""

    def __init__(self, hosts: Hosts, interval_s: float = 300.0, record: bool = True) -> None:
        if interval_s <= 0:
            raise BadInputError("must be positive", field="interval_s")
        self.hosts = hosts
        self.interval_s = float(interval_s)
        self.interval = 0
        self.tasks = Tasks.empty()
        self.record = record
        self.finished: list[np.ndarray] = []  # rows: tid, arrival, response, deadline

    @property
    def now(self) -> float:
        return self.interval * self.interval_s

    def copy(self) -> Cluster:
        """An independent what-if copy (the co-simulator's starting point); no history."""
        twin = Cluster(self.hosts, self.interval_s, record=False)
        twin.interval, twin.tasks = self.interval, self.tasks.copy()
        return twin

    def admit(self, batch: Tasks) -> None:
        """New arrivals join the waiting queue."""
        self.tasks = self.tasks.concat(batch)

    def ram_used(self) -> np.ndarray:
        placed = self.tasks.host >= 0
        # float even when nothing is placed: bincount of an empty input is int64, and adding a
        # task's RAM to an int array truncates it, which over-admits (found by Hypothesis)
        used = np.bincount(self.tasks.host[placed], self.tasks.ram[placed], self.hosts.n)
        return used.astype(np.float64, copy=False)

    def demand(self, at: float | None = None) -> np.ndarray:
        """Each task's MIPS demand at time ``at`` (default: the middle of this interval)."""
        t = self.now + self.interval_s / 2 if at is None else at
        tk = self.tasks
        age = np.maximum(t - tk.arrival, 0.0)
        return tk.cpu * (1.0 + tk.amp * np.sin(TWO_PI * age / tk.period + tk.phase))

    def host_load(self) -> np.ndarray:
        """Requested CPU per host as a fraction of capacity (can exceed 1)."""
        placed = self.tasks.host >= 0
        load = np.bincount(self.tasks.host[placed], self.demand()[placed], self.hosts.n)
        return load / self.hosts.cpu

    def apply(self, placement: np.ndarray) -> tuple[int, int]:
        """Apply a placement vector (one host per task, -1 = leave as is); returns
        (migrations, rejected). Moves that would overflow a host's RAM are refused."""
        placement = self._check(placement)
        tk, ram = self.tasks, self.ram_used()
        migrations = rejected = 0
        # running tasks first: a migration frees RAM that a waiting task may then use
        order = np.argsort(tk.host < 0, kind="stable")
        for i in order[placement[order] >= 0]:
            target, source = int(placement[i]), int(tk.host[i])
            if target == source:
                continue
            if ram[target] + tk.ram[i] > self.hosts.ram[target]:
                rejected += 1
                continue
            ram[target] += tk.ram[i]
            if source >= 0:
                ram[source] -= tk.ram[i]
                bw = min(self.hosts.net[source], self.hosts.net[target])
                tk.mig_s[i] += (tk.ram[i] + tk.disk[i]) * 8.0 / bw
                migrations += 1
            tk.host[i] = target
        return migrations, rejected

    def _check(self, placement: np.ndarray) -> np.ndarray:
        placement = np.asarray(placement)
        if placement.shape != (len(self.tasks),):
            raise BadInputError(f"placement has shape {placement.shape}, expected "
                                f"({len(self.tasks)},)", field="placement")
        if placement.size and (placement.min() < -1 or placement.max() >= self.hosts.n):
            raise BadInputError(f"host index outside -1..{self.hosts.n - 1}", field="placement")
        return placement.astype(np.int64, copy=False)

    def step(self, migrations: int = 0, rejected: int = 0) -> IntervalStats:
        """Run one interval: execute, complete, account energy; then advance the clock."""
        tk, dt, t0 = self.tasks, self.interval_s, self.now
        placed = tk.host >= 0
        demand = self.demand()
        load = np.bincount(tk.host[placed], demand[placed], self.hosts.n)
        share = np.minimum(1.0, self.hosts.cpu / np.maximum(load, 1e-9))
        rate = np.where(placed, demand * share[np.maximum(tk.host, 0)], 0.0)
        avail = np.where(placed, np.maximum(dt - tk.mig_s, 0.0), 0.0)
        need = np.where(rate > 0, (tk.work - tk.done) / np.maximum(rate, 1e-9), np.inf)
        finish = placed & (need <= avail)
        busy = np.minimum(need, avail)
        busy_mips = np.bincount(tk.host[placed], (rate * busy)[placed], self.hosts.n)
        util = busy_mips / (self.hosts.cpu * dt)
        energy = float((self.hosts.power(util) * dt).sum())
        end = np.where(finish, t0 + np.minimum(tk.mig_s, dt) + need, t0 + dt)
        response = end - tk.arrival
        crossed = ~tk.late & (response > tk.deadline)
        tis = float((end - np.maximum(tk.arrival, t0)).sum())
        tk.done += rate * busy
        tk.mig_s = np.maximum(tk.mig_s - dt, 0.0)
        tk.late |= crossed
        violations = int((finish & (response > tk.deadline)).sum())
        if self.record and finish.any():
            self.finished.append(np.column_stack([tk.tid[finish], tk.arrival[finish],
                                                  response[finish], tk.deadline[finish]]))
        stats = IntervalStats(
            interval=self.interval, energy_j=energy, completed=int(finish.sum()),
            response_sum_s=float(response[finish].sum()), violations=violations,
            newly_late=int(crossed.sum()), tis_s=tis, migrations=migrations, rejected=rejected,
            waiting=int((~placed).sum()), running=int(placed.sum()),
            util_mean=float(util.mean()), util_max=float(util.max()))
        self.tasks = tk.take(~finish)
        self.interval += 1
        return stats

    def completed_table(self) -> np.ndarray:
        """All finished tasks so far: columns tid, arrival, response, deadline."""
        return np.concatenate(self.finished) if self.finished else np.zeros((0, 4))


def with_arrival_offset(batch: Tasks, arrival: float) -> Tasks:
    """Re-stamp a batch (e.g. tasks sampled for the co-simulator) as arriving at ``arrival``."""
    return replace(batch, arrival=np.full(len(batch), float(arrival)))
