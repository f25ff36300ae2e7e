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
    arrival: np.ndarray  # seconds
    work: np.ndarray  # million instructions
    done: np.ndarray  # MI executed so far
    cpu: np.ndarray  # mean MIPS demand
    amp: np.ndarray  # relative amplitude of the demand trace
    period: np.ndarray  # seconds, period of the demand trace
    phase: np.ndarray
    ram: np.ndarray  # MB
    disk: np.ndarray  # MB image moved on migration
    deadline: np.ndarray  # SLA: allowed response time, seconds
    host: np.ndarray
    mig_s: np.ndarray
    late: np.ndarray  # bool: already past its deadline
    trace: np.ndarray  # row of the cluster's demand-trace table (-1: the sine model above)
    cap: np.ndarray  # MIPS a task may use from a host's spare capacity (0: its demand)

    def __len__(self) -> int:
        return int(self.tid.shape[0])

    def take(self, index: np.ndarray) -> Tasks:
        return Tasks(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def copy(self) -> Tasks:
        return Tasks(**{f.name: getattr(self, f.name).copy() for f in fields(self)})

    def concat(self, other: Tasks) -> Tasks:
        return Tasks(
            **{
                f.name: np.concatenate([getattr(self, f.name), getattr(other, f.name)])
                for f in fields(self)
            }
        )

    @classmethod
    def empty(cls) -> Tasks:
        floats = {f.name: np.zeros(0) for f in fields(cls)}
        floats.update(
            tid=np.zeros(0, dtype=np.int64),
            host=np.zeros(0, dtype=np.int64),
            late=np.zeros(0, dtype=bool),
            trace=np.zeros(0, dtype=np.int64),
        )
        return cls(**floats)


def new_tasks(
    tid: np.ndarray,
    arrival: np.ndarray,
    work: np.ndarray,
    cpu: np.ndarray,
    amp: np.ndarray,
    period: np.ndarray,
    phase: np.ndarray,
    ram: np.ndarray,
    disk: np.ndarray,
    deadline: np.ndarray,
    trace: np.ndarray | None = None,
    cap: np.ndarray | None = None,
) -> Tasks:
    """Fresh (waiting, nothing done) tasks from their parameters; ``trace`` rows of the
    cluster's demand table replace the sine model (Bitbrains VM traces, COSCO's workload);
    ``cap`` lets a task use spare host capacity up to that many MIPS (COSCO's apparent IPS:
    demand + the host's spare MIPS split equally among its containers, at most the VM's
    provisioned maximum)."""
    n = len(tid)
    rows = np.full(n, -1, dtype=np.int64) if trace is None else np.asarray(trace, dtype=np.int64)
    return Tasks(
        np.asarray(tid, dtype=np.int64),
        arrival,
        work,
        np.zeros(n),
        cpu,
        amp,
        period,
        phase,
        ram,
        disk,
        deadline,
        np.full(n, -1, dtype=np.int64),
        np.zeros(n),
        np.zeros(n, dtype=bool),
        rows,
        np.zeros(n) if cap is None else cap,
    )


@dataclass(frozen=True)
class IntervalStats:
    """What one interval produced; sums rather than means so horizons add up exactly."""

    interval: int
    energy_j: float
    completed: int
    response_sum_s: float
    violations: int  # completed tasks whose response time exceeded the SLA
    newly_late: int  # tasks (running or waiting) that crossed their deadline this interval
    tis_s: float  # task-seconds spent in the system (Little: sum of response times)
    migrations: int
    rejected: int  # placements the engine refused (RAM would overflow)
    waiting: int
    running: int
    util_mean: float
    util_max: float
    asleep: int = 0  # hosts in the sleep state during this interval


@dataclass(frozen=True)
class Weights:
    """The scalar objective schedulers minimise (GOBI's O = a*energy + b*response, plus SLA)."""

    energy: float = 1.0
    response: float = 1.0
    sla: float = 1.0


def objective(
    stats: IntervalStats, hosts: Hosts, interval_s: float, weights: Weights = Weights()
) -> float:
    """Energy as a fraction of peak, task-seconds per host-interval, late tasks per host."""
    peak = float(hosts.power_table[:, -1].sum()) * interval_s
    return (
        weights.energy * stats.energy_j / peak
        + weights.response * stats.tis_s / (interval_s * hosts.n)
        + weights.sla * stats.newly_late / hosts.n
    )


#: seconds between two samples of a demand trace (Bitbrains samples every 300 s)
TRACE_STEP_S = 300.0
#: a sleeping host draws this fraction of its idle power (ACPI S3-like; SPECpower tables have
#: no sleep state, so this is our assumption, as is the wake latency below)
SLEEP_FRACTION = 0.1
#: seconds a host needs to wake; tasks placed on a waking host make no progress meanwhile
WAKE_S = 60.0


@dataclass
class Decision:
    """A placement vector plus host power states: ``sleep[h]`` puts host h to sleep if it is
    empty after the placement (a sleeping host wakes when a task is placed on it)."""

    placement: np.ndarray
    sleep: np.ndarray | None = None
    wake: np.ndarray | None = None  # wake these sleeping hosts now (pre-emptively)


class Cluster:
    """The state of the cluster between intervals, and the rules that advance it."""

    def __init__(
        self,
        hosts: Hosts,
        interval_s: float = 300.0,
        record: bool = True,
        traces: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        if not np.isfinite(interval_s) or interval_s <= 0:
            raise BadInputError("must be a finite positive number", field="interval_s")
        self.hosts = hosts
        self.interval_s = float(interval_s)
        self.interval = 0
        self.tasks = Tasks.empty()
        self.record = record
        self.finished: list[np.ndarray] = []  # rows: tid, arrival, response, deadline
        # demand traces: (table rows x samples in MIPS, length of each row); shared, read-only
        self.traces = traces
        self.freeze: float | None = None  # co-simulator copies hold trace demand from here on
        self.asleep = np.zeros(hosts.n, dtype=bool)
        self.waking = np.zeros(hosts.n)

    @property
    def now(self) -> float:
        return self.interval * self.interval_s

    def copy(self, freeze: bool = False) -> Cluster:
        """An independent what-if copy (the co-simulator's starting point); no history. With
        ``freeze`` the copy does not know the future of the demand traces: every trace task
        keeps the demand it has in the current interval (what a scheduler can observe)."""
        twin = Cluster(self.hosts, self.interval_s, record=False, traces=self.traces)
        twin.interval, twin.tasks = self.interval, self.tasks.copy()
        twin.asleep, twin.waking = self.asleep.copy(), self.waking.copy()
        twin.freeze = self.freeze
        if freeze and twin.freeze is None:
            twin.freeze = self.now + self.interval_s / 2
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
        out = tk.cpu * (1.0 + tk.amp * np.sin(TWO_PI * age / tk.period + tk.phase))
        if self.traces is not None and (on := tk.trace >= 0).any():
            table, lengths = self.traces
            seen = t if self.freeze is None else min(t, self.freeze)
            rows = tk.trace[on]
            step = (np.maximum(seen - tk.arrival[on], 0.0) // TRACE_STEP_S).astype(np.int64)
            out[on] = table[rows, step % lengths[rows]]
        return out

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
            if self.asleep[target]:  # placing on a sleeping host wakes it
                self.asleep[target] = False
                self.waking[target] = WAKE_S
            ram[target] += tk.ram[i]
            if source >= 0:
                ram[source] -= tk.ram[i]
                bw = min(self.hosts.net[source], self.hosts.net[target])
                tk.mig_s[i] += (tk.ram[i] + tk.disk[i]) * 8.0 / bw
                migrations += 1
            tk.host[i] = target
        return migrations, rejected

    def set_sleep(self, sleep: np.ndarray | None) -> int:
        """Put the requested hosts to sleep where no task is placed on them; returns how many
        hosts sleep now. ``None`` leaves power states as they are."""
        if sleep is not None:
            sleep = np.asarray(sleep, dtype=bool)
            if sleep.shape != (self.hosts.n,):
                raise BadInputError(
                    f"sleep mask has shape {sleep.shape}, expected ({self.hosts.n},)", field="sleep"
                )
            occupied = (
                np.bincount(self.tasks.host[self.tasks.host >= 0], minlength=self.hosts.n) > 0
            )
            self.asleep |= sleep & ~occupied
            self.waking[self.asleep] = 0.0
        return int(self.asleep.sum())

    def apply_decision(self, decision: Decision | np.ndarray) -> tuple[int, int]:
        """Apply a :class:`Decision` (or a bare placement vector): placement, then sleep."""
        if isinstance(decision, Decision):
            moved = self.apply(decision.placement)
            self.set_sleep(decision.sleep)
            if decision.wake is not None:
                wake = np.asarray(decision.wake, dtype=bool) & self.asleep
                self.asleep[wake] = False
                self.waking[wake] = WAKE_S
            return moved
        return self.apply(decision)

    def _check(self, placement: np.ndarray) -> np.ndarray:
        placement = np.asarray(placement)
        if placement.shape != (len(self.tasks),):
            raise BadInputError(
                f"placement has shape {placement.shape}, expected ({len(self.tasks)},)",
                field="placement",
            )
        if placement.size and (placement.min() < -1 or placement.max() >= self.hosts.n):
            raise BadInputError(f"host index outside -1..{self.hosts.n - 1}", field="placement")
        return placement.astype(np.int64, copy=False)

    def rates(self) -> np.ndarray:
        """MIPS each task gets this interval: its demand, scaled down on an oversubscribed
        host, plus (for capped tasks) an equal share of the host's spare MIPS."""
        tk = self.tasks
        placed = tk.host >= 0
        demand = self.demand()
        load = np.bincount(tk.host[placed], demand[placed], self.hosts.n)
        share = np.minimum(1.0, self.hosts.cpu / np.maximum(load, 1e-9))
        rate = np.where(placed, demand * share[np.maximum(tk.host, 0)], 0.0)
        if (tk.cap > 0).any():  # spare MIPS split equally, up to each task's cap (COSCO)
            on = np.bincount(tk.host[placed], minlength=self.hosts.n)
            spare = np.maximum(self.hosts.cpu - load, 0.0) / np.maximum(on, 1)
            extra = np.minimum(np.maximum(tk.cap - demand, 0.0), spare[np.maximum(tk.host, 0)])
            rate = rate + np.where(placed, extra, 0.0)
        return rate

    def projected_late(self) -> int:
        """Tasks not yet late that would miss their deadline at the rate they get now (waiting
        ones at their demand from the next interval): a co-simulation horizon's terminal cost,
        since deadlines lie well beyond a few intervals."""
        tk = self.tasks
        rate = self.rates()
        rate = np.where(tk.host >= 0, rate, tk.cpu)
        start = self.now + np.where(tk.host >= 0, 0.0, self.interval_s)
        finish = start + (tk.work - tk.done) / np.maximum(rate, 1e-9)
        return int((~tk.late & (finish - tk.arrival > tk.deadline)).sum())

    def step(self, migrations: int = 0, rejected: int = 0) -> IntervalStats:
        """Run one interval: execute, complete, account energy; then advance the clock."""
        tk, dt, t0 = self.tasks, self.interval_s, self.now
        placed = tk.host >= 0
        rate = self.rates()
        delay = tk.mig_s + np.where(placed, self.waking[np.maximum(tk.host, 0)], 0.0)
        avail = np.where(placed, np.maximum(dt - delay, 0.0), 0.0)
        need = np.where(rate > 0, (tk.work - tk.done) / np.maximum(rate, 1e-9), np.inf)
        finish = placed & (need <= avail)
        busy = np.minimum(need, avail)
        busy_mips = np.bincount(tk.host[placed], (rate * busy)[placed], self.hosts.n)
        util = busy_mips / (self.hosts.cpu * dt)
        watts = np.where(
            self.asleep, SLEEP_FRACTION * self.hosts.power_table[:, 0], self.hosts.power(util)
        )
        energy = float((watts * dt).sum())
        end = np.where(finish, t0 + np.minimum(delay, dt) + need, t0 + dt)
        response = end - tk.arrival
        crossed = ~tk.late & (response > tk.deadline)
        tis = float((end - np.maximum(tk.arrival, t0)).sum())
        tk.done += rate * busy
        tk.mig_s = np.maximum(tk.mig_s - dt, 0.0)
        self.waking = np.maximum(self.waking - dt, 0.0)
        tk.late |= crossed
        violations = int((finish & (response > tk.deadline)).sum())
        if self.record and finish.any():
            self.finished.append(
                np.column_stack(
                    [tk.tid[finish], tk.arrival[finish], response[finish], tk.deadline[finish]]
                )
            )
        stats = IntervalStats(
            interval=self.interval,
            energy_j=energy,
            completed=int(finish.sum()),
            response_sum_s=float(response[finish].sum()),
            violations=violations,
            newly_late=int(crossed.sum()),
            tis_s=tis,
            migrations=migrations,
            rejected=rejected,
            waiting=int((~placed).sum()),
            running=int(placed.sum()),
            util_mean=float(util.mean()),
            util_max=float(util.max()),
            asleep=int(self.asleep.sum()),
        )
        self.tasks = tk.take(~finish)
        self.interval += 1
        return stats

    def completed_table(self) -> np.ndarray:
        """All finished tasks so far: columns tid, arrival, response, deadline."""
        return np.concatenate(self.finished) if self.finished else np.zeros((0, 4))


def with_arrival_offset(batch: Tasks, arrival: float) -> Tasks:
    """Re-stamp a batch (e.g. tasks sampled for the co-simulator) as arriving at ``arrival``."""
    return replace(batch, arrival=np.full(len(batch), float(arrival)))
