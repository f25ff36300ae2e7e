"""Schedulers behind one protocol: CARSS, its co-simulation ablations and every baseline.

CARSS (paper 07) compares against the best baseline scheduler; the issue names random, round
robin, least-loaded, best-fit, a GOBI-style surrogate without co-simulation (Tuli et al.) and
co-simulation with static arrivals. Learned schedulers (GOBI, CARSS) live in
:mod:`schedlab.carss.surrogate` and import PyTorch only when built. The engine
(:func:`schedlab.carss.engine.run`) calls the same four methods on every scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from schedlab.carss.cosim import CoSimulator, QoSPrediction, TaskPool
from schedlab.carss.forecast import Forecaster, make_forecaster
from schedlab.carss.placement import (
    best_fit,
    efficiency,
    greedy,
    least_loaded,
    make_consolidate,
    rebalance,
)
from schedlab.carss.simulator import Cluster, IntervalStats, Tasks
from schedlab.core.registry import lookup


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


def candidate_decisions(cluster: Cluster, rng: np.random.Generator,
                        extra: int = 2) -> list[np.ndarray]:
    """The decisions a co-simulating scheduler chooses among: spread, pack, energy-aware
    consolidation, each with and without migrations off overloaded hosts; spread in
    earliest-deadline-first and smallest-RAM-first order (which waiting tasks get the room
    matters when RAM is short); plus random perturbations of the spread decision."""
    tk = cluster.tasks
    waiting = np.flatnonzero(tk.host < 0)
    spread = greedy(cluster, least_loaded)
    pack = greedy(cluster, best_fit)
    consolidate = greedy(cluster, make_consolidate(efficiency(cluster)))
    out = [spread, pack, consolidate, rebalance(cluster, spread), rebalance(cluster, pack, 0.9),
           rebalance(cluster, consolidate), greedy(cluster, least_loaded, edf_order(cluster)),
           greedy(cluster, least_loaded, waiting[np.argsort(tk.ram[waiting], kind="stable")])]
    for _ in range(extra):
        order = rng.permutation(waiting)
        noisy = greedy(cluster, lambda load, ram, need: load + need
                       + 0.15 * rng.random(load.size), order)
        out.append(noisy)
    return out


class CoSimScheduler(_Passive):
    """Pick the candidate with the lowest co-simulated objective (mean over arrival samples).

    With the adaptive forecaster this is CARSS without its recurrent surrogate (an ablation);
    with the static forecaster it is the static-arrival co-simulation baseline.
    """

    name = "cosim"

    def __init__(self, forecaster: str = "adaptive", horizon: int = 4, samples: int = 3,
                 season: int = 48, seed: int = 0, candidates: int = 2,
                 forecaster_kwargs: dict | None = None) -> None:
        self.forecaster: Forecaster = make_forecaster(forecaster, season=season, seed=seed,
                                                      **(forecaster_kwargs or {}))
        self.pool = TaskPool()
        self.cosim = CoSimulator(self.forecaster, self.pool, horizon, samples)
        self.extra = candidates
        self.last: list[QoSPrediction] = []
        self.chosen = 0

    def prepare(self, history: np.ndarray) -> None:
        self.forecaster.fit(np.asarray(history, dtype=float))

    def arrive(self, batch: Tasks) -> None:
        self.forecaster.update(float(len(batch)))
        self.pool.add(batch)

    def score(self, cluster: Cluster, predictions: list[QoSPrediction],
              candidates: list[np.ndarray]) -> np.ndarray:
        return np.array([p.objective for p in predictions])

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        candidates = candidate_decisions(cluster, rng, self.extra)
        self.last = self.cosim.evaluate(cluster, candidates, rng)
        choice = int(np.argmin(self.score(cluster, self.last, candidates)))
        self.chosen = choice
        return candidates[choice]


def _cosim(forecaster: str) -> Callable[..., Scheduler]:
    def build(**kwargs: object) -> Scheduler:
        scheduler = CoSimScheduler(forecaster=forecaster, **kwargs)  # type: ignore[arg-type]
        scheduler.name = f"cosim-{forecaster}"
        return scheduler

    return build


def _learned(kind: str) -> Callable[..., Scheduler]:
    def build(**kwargs: object) -> Scheduler:
        from schedlab.carss import surrogate

        return getattr(surrogate, kind)(**kwargs)

    return build


SCHEDULERS: dict[str, Callable[..., Scheduler]] = {
    "carss": _learned("CARSS"),
    "cosim-adaptive": _cosim("adaptive"),
    "cosim-static": _cosim("static"),
    "gobi": _learned("GOBI"),
    "least-loaded": LeastLoaded,
    "edf": EarliestDeadline,
    "best-fit": BestFit,
    "round-robin": RoundRobin,
    "random": RandomScheduler,
}
#: the baselines (the issue's list plus edf); cosim-adaptive is our ablation of CARSS
BASELINES = ("cosim-static", "gobi", "least-loaded", "edf", "best-fit", "round-robin", "random")
#: keyword arguments each kind of scheduler accepts from an experiment's configuration
COSIM_KEYS = ("horizon", "samples", "season", "seed", "candidates", "forecaster_kwargs")


def make_scheduler(name: str, **kwargs: object) -> Scheduler:
    """Build a scheduler by CLI name; co-simulating ones take horizon/samples/season/seed/
    candidates/forecaster_kwargs, GOBI takes seed, heuristics ignore every keyword."""
    factory = lookup(SCHEDULERS, "scheduler", name)
    if name in ("carss", "cosim-adaptive", "cosim-static"):
        return factory(**{k: v for k, v in kwargs.items() if k in COSIM_KEYS})
    if name == "gobi":
        return factory(**{k: v for k, v in kwargs.items() if k == "seed"})
    return factory()
