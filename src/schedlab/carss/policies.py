"""Schedulers behind one protocol: CARSS, its co-simulation ablations and every baseline.

CARSS (paper 07) compares against the best baseline scheduler; the issue names random, round
robin, least-loaded, best-fit, a GOBI-style surrogate without co-simulation (Tuli et al.) and
co-simulation with static arrivals. Learned schedulers (GOBI, CARSS) live in
:mod:`schedlab.carss.surrogate` and import PyTorch only when built. The engine
(:func:`schedlab.carss.engine.run`) calls the same four methods on every scheduler.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from schedlab.carss.cosim import CoSimulator, QoSPrediction, TaskPool
from schedlab.carss.forecast import Forecaster, make_forecaster
from schedlab.carss.placement import (
    WakeAware,
    best_fit,
    efficiency,
    greedy,
    least_loaded,
    make_consolidate,
    rebalance,
    spread,
)
from schedlab.carss.simulator import Cluster, Decision, IntervalStats, Tasks


class Scheduler(Protocol):
    """Decides a placement vector at each interval and learns from what happened."""

    name: str

    def prepare(self, history: np.ndarray) -> None:
        """Arrivals per interval before the run starts (forecasters train on them)."""

    def arrive(self, batch: Tasks) -> None:
        """The tasks that arrived this interval (already in the cluster's waiting queue)."""

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        """One host per task in ``cluster.tasks`` (-1 = leave as is)."""

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        """What the interval just run produced."""


class _Passive:
    """No learning: prepare/arrive/feedback do nothing."""

    name = "passive"

    def prepare(self, history: np.ndarray) -> None:
        return None

    def arrive(self, batch: Tasks) -> None:
        return None

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        return None


class RandomScheduler(_Passive):
    """Each waiting task goes to a random host with RAM for it."""

    name = "random"

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        return greedy(cluster, lambda load, ram, need: rng.random(load.size))


class RoundRobin(_Passive):
    """Waiting tasks go to hosts in turn (skipping hosts without RAM for them)."""

    name = "round-robin"

    def __init__(self) -> None:
        self.next = 0

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        hosts, tk = cluster.hosts, cluster.tasks
        placement = np.full(len(tk), -1, dtype=np.int64)
        ram = cluster.ram_used()
        for i in np.flatnonzero(tk.host < 0):
            for k in range(hosts.n):
                h = (self.next + k) % hosts.n
                if ram[h] + tk.ram[i] <= hosts.ram[h]:
                    placement[i], self.next = h, (h + 1) % hosts.n
                    ram[h] += tk.ram[i]
                    break
        return placement


class LeastLoaded(_Passive):
    """Spread: each waiting task goes to the host with the lowest CPU load."""

    name = "least-loaded"

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        return greedy(cluster, least_loaded)


class BestFit(_Passive):
    """Pack: each waiting task goes to the host it fills most tightly."""

    name = "best-fit"

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        return greedy(cluster, best_fit)


class EarliestDeadline(_Passive):
    """Spread in earliest-deadline-first order: the tightest SLA gets the room first.

    Not among the paper's baselines; added because the co-simulating schedulers may choose an
    EDF ordering, and a fair comparison should show how much of their gain EDF alone gives."""

    name = "edf"

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        return greedy(cluster, least_loaded, edf_order(cluster))


def edf_order(cluster: Cluster) -> np.ndarray:
    """Waiting tasks sorted by the time left to their SLA deadline (stable on ties)."""
    tk = cluster.tasks
    waiting = np.flatnonzero(tk.host < 0)
    slack = tk.arrival[waiting] + tk.deadline[waiting] - cluster.now
    return waiting[np.argsort(slack, kind="stable")]


class _AwakePack:
    """Best fit over awake hosts; a sleeping host only when no awake one has room."""

    def __init__(self, asleep: np.ndarray) -> None:
        self.penalty = np.where(asleep, 5.0, 0.0)  # between a fit (<= 1) and overflow (>= 10)

    def __call__(self, load: np.ndarray, ram: np.ndarray, need: np.ndarray) -> np.ndarray:
        return best_fit(load, ram, need) + self.penalty


def pack_and_sleep(cluster: Cluster, order: np.ndarray | None = None) -> Decision:
    """Consolidate new tasks on awake hosts (best fit) and put every empty host to sleep."""
    placement = greedy(cluster, _AwakePack(cluster.asleep), order)
    return Decision(placement, sleep=_empty_after(cluster, placement))


def _empty_after(cluster: Cluster, placement: np.ndarray) -> np.ndarray:
    target = np.where(placement >= 0, placement, cluster.tasks.host)
    return np.bincount(target[target >= 0], minlength=cluster.hosts.n) == 0


class PackSleep(_Passive):
    """Reactive power management without a forecast: best fit on awake hosts, every empty host
    sleeps, a sleeping host wakes only when no awake host has room. Not a COSCO baseline: it
    shows how much energy sleep alone saves, so CARSS's forecast-driven sleep is not credited
    with it."""

    name = "pack-sleep"

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> Decision:
        return pack_and_sleep(cluster)


def forecast_actions(cluster: Cluster) -> list[Decision]:
    """Decisions whose value depends on the future, for the co-simulator to weigh over the
    forecast horizon: consolidate and sleep empty hosts (pays off if no burst comes), wake
    every sleeping host now (pays the wake latency before a forecast burst), pre-emptive
    migration off hosts above 70 % (before they overload), and admission control (waiting
    tasks start only where they keep the host at or below 100 %; the rest wait)."""
    tk = cluster.tasks
    base = spread(cluster)
    consolidate = greedy(cluster, make_consolidate(efficiency(cluster)))
    wake_all = greedy(cluster, least_loaded)
    admit = base.copy()
    load = cluster.host_load().copy()
    demand = cluster.demand()
    for i in np.flatnonzero(base >= 0):
        h = base[i]
        after = load[h] + demand[i] / cluster.hosts.cpu[h]
        if after > 1.0 and load[h] > 0:
            admit[i] = -1
        else:
            load[h] = after
    del tk
    return [
        pack_and_sleep(cluster),
        Decision(consolidate, sleep=_empty_after(cluster, consolidate)),
        Decision(wake_all, wake=cluster.asleep.copy()),
        Decision(rebalance(cluster, base, 0.7)),
        Decision(admit),
    ]


def candidate_decisions(
    cluster: Cluster, rng: np.random.Generator, extra: int = 2, actions: bool = False
) -> list[np.ndarray | Decision]:
    """The decisions a co-simulating scheduler chooses among: spread, pack, energy-aware
    consolidation, each with and without migrations off overloaded hosts; spread in
    earliest-deadline-first and smallest-RAM-first order (which waiting tasks get the room
    matters when RAM is short); plus random perturbations of the spread decision."""
    tk = cluster.tasks
    waiting = np.flatnonzero(tk.host < 0)
    spread = greedy(cluster, least_loaded)
    pack = greedy(cluster, best_fit)
    consolidate = greedy(cluster, make_consolidate(efficiency(cluster)))
    out = [
        spread,
        pack,
        consolidate,
        rebalance(cluster, spread),
        rebalance(cluster, pack, 0.9),
        rebalance(cluster, consolidate),
        greedy(cluster, least_loaded, edf_order(cluster)),
        greedy(cluster, least_loaded, waiting[np.argsort(tk.ram[waiting], kind="stable")]),
    ]
    for _ in range(extra):
        order = rng.permutation(waiting)
        noisy = greedy(
            cluster, lambda load, ram, need: load + need + 0.15 * rng.random(load.size), order
        )
        out.append(noisy)
    if actions:
        if cluster.asleep.any():  # the plain candidates must not wake every sleeping host
            awake = WakeAware(cluster.asleep)
            out = [
                greedy(cluster, awake),
                rebalance(cluster, greedy(cluster, awake)),
                greedy(cluster, awake, edf_order(cluster)),
                *out[1:2],
            ]
        out.extend(forecast_actions(cluster))
    return out


class CoSimScheduler(_Passive):
    """Pick the candidate with the lowest co-simulated objective (mean over arrival samples).

    With the adaptive forecaster this is CARSS without its recurrent surrogate (an ablation);
    with the static forecaster it is the static-arrival co-simulation baseline.
    """

    name = "cosim"

    def __init__(
        self,
        forecaster: str = "adaptive",
        horizon: int = 4,
        samples: int = 3,
        season: int = 48,
        seed: int = 0,
        candidates: int = 2,
        forecaster_kwargs: dict | None = None,
        actions: bool = False,
    ) -> None:
        self.actions = actions
        self.forecaster: Forecaster = make_forecaster(
            forecaster, season=season, seed=seed, **(forecaster_kwargs or {})
        )
        self.pool = TaskPool()
        # with the forecast-dependent actions the horizon also scores the SLA misses it sets up
        self.cosim = CoSimulator(self.forecaster, self.pool, horizon, samples, terminal=actions)
        self.extra = candidates
        self.last: list[QoSPrediction] = []
        self.chosen = 0

    def prepare(self, history: np.ndarray) -> None:
        self.forecaster.fit(np.asarray(history, dtype=float))

    def arrive(self, batch: Tasks) -> None:
        self.forecaster.update(float(len(batch)))
        self.pool.add(batch)

    def score(
        self, cluster: Cluster, predictions: list[QoSPrediction], candidates: list[np.ndarray]
    ) -> np.ndarray:
        return np.array([p.objective for p in predictions])

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        candidates = candidate_decisions(cluster, rng, self.extra, self.actions)
        self.last = self.cosim.evaluate(cluster, candidates, rng)
        choice = int(np.argmin(self.score(cluster, self.last, candidates)))
        self.chosen = choice
        return candidates[choice]
