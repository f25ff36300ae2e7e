"""The paper's mechanism and every baseline behind one Protocol, listed by CLI name.

A policy turns a market (:class:`~schedlab.mec_coalition.model.Instance`) into a :class:`Plan`:
which cloudlets cooperate (the coalition structure), what each caches and where each user's
requests go. The engine (:mod:`schedlab.mec_coalition.engine`) evaluates any plan the same way.

* ``coalition`` - the paper: ε-perturbed best-response coalition formation (values from the
  fast greedy oracle), then the randomized algorithm inside each coalition.
* ``ilp`` - the grand coalition solved exactly by HiGHS (small instances: the optimum).
* ``rounding`` - the grand coalition solved by the randomized algorithm (the "grand coalition"
  baseline).
* ``non-cooperative`` - every cloudlet alone, randomized algorithm per cloudlet.
* ``no-sharing`` - the coalition mechanism, but every model stored as a private copy.
* ``lfu`` - every cloudlet alone caching its most popular models whole (no sharing).
* ``trimcaching`` - TrimCaching (Qu et al., 2024): all cloudlets cooperate and the cache
  maximises the hit ratio with parameter sharing (blind to prices and costs); requests are
  routed by *our* price- and delay-aware offloading (:func:`heuristics.assign`), the same rule
  as every other policy, so a comparison with it isolates the caching decision.
* ``trimcaching-native`` - the same cache, each request served by its lowest-delay cached
  replica (price-blind): what the routing alone is worth.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from schedlab.core.registry import lookup
from schedlab.mec_coalition import heuristics, ilp
from schedlab.mec_coalition.coalition import CoalitionGame, form_coalitions
from schedlab.mec_coalition.ilp import Placement
from schedlab.mec_coalition.model import Instance


@dataclass
class Plan:
    """A full decision: coalition structure, cache contents and per-user routing."""

    coalitions: list[frozenset[int]]
    placement: Placement
    shared: bool = True  # whether cached models store shared blocks once
    info: dict[str, Any] = field(default_factory=dict)


class Policy(Protocol):
    """Decides cooperation, caching and offloading for one market."""

    name: str

    def plan(self, inst: Instance, seed: int) -> Plan: ...


def _merge(inst: Instance, parts: list[Placement]) -> Placement:
    """Placements of disjoint coalitions combined into one market-wide placement."""
    out = Placement.empty(inst)
    out.value = 0.0
    for p in parts:
        out.cached |= p.cached
        served = p.choice >= 0
        out.choice[served] = p.choice[served]
        out.value += p.value
    return out


def _solve_each(inst: Instance, coalitions: list[frozenset[int]], seed: int,
                solve: Callable[[Instance, np.ndarray, int], Placement],
                shared: bool = True, reroute: bool = True) -> list[Placement]:
    game = CoalitionGame(inst)
    out = []
    for k, s in enumerate(coalitions):
        idx = game.candidates(s)
        place = solve(inst, idx, seed + k)
        out.append(heuristics.reroute(inst, idx, place, shared) if reroute else place)
    return out


def _rounding(inst: Instance, idx: np.ndarray, seed: int) -> Placement:
    return heuristics.randomized_rounding(inst, idx, seed)


def _alone(inst: Instance) -> list[frozenset[int]]:
    return [frozenset([i]) for i in range(inst.cloudlets.n)]


def _grand(inst: Instance) -> list[frozenset[int]]:
    return [frozenset(range(inst.cloudlets.n))]


@dataclass
class CoalitionMechanism:
    """The paper's mechanism: form coalitions, then cache and offload within each."""

    name: str = "coalition"
    allocation: str = "proportional"
    eps_frac: float = 0.01
    oracle: str = "greedy"
    shared: bool = True

    def plan(self, inst: Instance, seed: int) -> Plan:
        work = inst if self.shared else Instance(inst.zoo.unshared(), inst.cloudlets,
                                                 inst.users, inst.economy)
        start = time.perf_counter()
        game = CoalitionGame(work, solver=self.oracle, allocation=self.allocation, seed=seed)
        formed = form_coalitions(game, seed, self.eps_frac)
        formation_s = time.perf_counter() - start
        parts = []
        for k, s in enumerate(formed.structure):
            idx = game.candidates(s)
            fast = game.placement(s)  # what the game valued S at; never do worse than it
            slow = heuristics.randomized_rounding(work, idx, seed + k)
            parts.append(heuristics.reroute(work, idx, slow if slow.value >= fast.value
                                            else fast))
        info = dict(moves=formed.moves, rounds=formed.rounds, converged=formed.converged,
                    epsilon=formed.epsilon, oracle_calls=game.calls, formation_s=formation_s,
                    welfare_trace=formed.welfare_trace)
        return Plan(formed.structure, _merge(inst, parts), self.shared, info)


@dataclass
class FixedStructure:
    """A fixed coalition structure (alone or grand) solved by one caching solver."""

    name: str
    structure: Callable[[Instance], list[frozenset[int]]]
    solve: Callable[[Instance, np.ndarray, int], Placement]
    shared: bool = True
    reroute: bool = True  # final routing by the shared price- and delay-aware rule

    def plan(self, inst: Instance, seed: int) -> Plan:
        coalitions = self.structure(inst)
        parts = _solve_each(inst, coalitions, seed, self.solve, self.shared, self.reroute)
        return Plan(coalitions, _merge(inst, parts), self.shared)


@dataclass
class ExactILP:
    """The grand coalition solved by HiGHS, never worse than the randomized algorithm's plan.

    HiGHS runs under a time limit. When it stops without proving optimality its incumbent can
    be poor - on a loaded machine even the all-cloud plan (x = 0), or nothing at all - so the
    randomized algorithm's plan (LP relaxation + rounding) is computed too and the better of
    the two is kept. ``info['plan_source']`` says which: ``"highs"`` (HiGHS's incumbent, proven
    optimal or not) or ``"rounding"``; ``info['solver']`` is HiGHS's own report either way and
    ``info['gap_to_bound']`` the kept plan's gap to the best upper bound known (HiGHS's dual
    bound or the LP relaxation's), a certificate that holds whichever plan was kept.
    """

    name: str = "ilp"
    time_limit: float = 60.0
    max_nonzeros: int = ilp.MAX_NONZEROS
    shared: bool = True
    fallback: bool = True  # False: HiGHS's answer only (a missing incumbent raises)

    def plan(self, inst: Instance, seed: int) -> Plan:
        coalitions = _grand(inst)
        idx = CoalitionGame(inst).candidates(coalitions[0])
        if not self.fallback:
            place = ilp.solve(inst, idx, time_limit=self.time_limit,
                              max_nonzeros=self.max_nonzeros)[0]
            info = dict(solver=place.solver.as_dict(), proven_optimal=place.optimal,
                        plan_source="highs")
            return Plan(coalitions, place, self.shared, info)
        ilp.check_size(inst, idx, self.max_nonzeros)  # refuse before any work
        start = time.perf_counter()
        rounded = heuristics.randomized_rounding(inst, idx, seed)
        rounding_s = time.perf_counter() - start
        try:
            place = ilp.solve(inst, idx, time_limit=self.time_limit,
                              max_nonzeros=self.max_nonzeros)[0]
            solver = place.solver.as_dict()
        except ilp.NoIncumbentError as exc:  # stopped before any feasible solution
            place = None
            solver = dict(status="time or iteration limit, no incumbent", status_code=1,
                          proven_optimal=False, mip_gap=float("inf"), dual_bound=float("nan"),
                          time_limit_s=float(self.time_limit), seconds=float("nan"),
                          relaxed=False, variables=0, nonzeros=0, message=str(exc),
                          objective=float("nan"))
        highs_value = place.value if place is not None else float("nan")
        proven = place is not None and place.optimal
        use_highs = place is not None and (proven or place.value >= rounded.value - 1e-9)
        kept = place if use_highs else Placement(rounded.cached, rounded.choice, rounded.value)
        bounds = [b for b in (solver["dual_bound"], rounded.bound) if b == b]
        bound = min(bounds) if bounds else float("nan")
        gap = (bound - kept.value) / abs(bound) if bound == bound and bound != 0 else 0.0
        info = dict(solver=solver, proven_optimal=proven,
                    plan_source="highs" if use_highs else "rounding",
                    highs_objective=highs_value, rounding_objective=rounded.value,
                    upper_bound=bound, gap_to_bound=max(gap, 0.0), rounding_s=rounding_s)
        return Plan(coalitions, kept, self.shared, info)


def _lfu(inst: Instance, idx: np.ndarray, seed: int) -> Placement:
    cached = heuristics.lfu_cache(inst, idx)
    choice = heuristics.assign(inst, idx, cached)
    return Placement(cached, choice, heuristics.objective(inst, cached, choice, shared=False))


def trimcaching_cache(inst: Instance, idx: np.ndarray) -> np.ndarray:
    """TrimCaching's placement (Qu et al., 2024): maximise the hit ratio with shared blocks.

    A user counts as a hit when some cloudlet in its reach caches a model that meets its
    accuracy and deadline (the candidates); blocks shared by cached models are stored once;
    prices and delay beyond the deadline do not enter. Best of two greedies (marginal hit rate
    per marginal GB, and marginal hit rate alone) by the rate covered, the classical guard of
    the per-GB greedy on knapsack-constrained coverage; unused models are then dropped (they
    only cost storage).
    """
    idx = np.asarray(idx, dtype=np.int64)
    rate = inst.users.rate[inst.cand.user[idx]]
    options = [heuristics.greedy_cache(inst, idx, weight=rate, use_cost=False, per_gb=per_gb)
               for per_gb in (True, False)]
    return max(options, key=lambda c: heuristics.covered_rate(inst, idx, c))


def _trimcaching(inst: Instance, idx: np.ndarray, seed: int, route: str = "gain") -> Placement:
    cached = trimcaching_cache(inst, idx)
    choice = heuristics.assign(inst, idx, cached, key=route, exact=True)
    cached = cached & heuristics.used_pairs(inst, choice, cached.shape)
    return Placement(cached, choice, heuristics.objective(inst, cached, choice))


def _trimcaching_native(inst: Instance, idx: np.ndarray, seed: int) -> Placement:
    return _trimcaching(inst, idx, seed, route="delay")


#: the method and every baseline, by CLI name
POLICIES: dict[str, Callable[[], Policy]] = {
    "coalition": CoalitionMechanism,
    "ilp": ExactILP,
    "rounding": lambda: FixedStructure("rounding", _grand, _rounding),
    "non-cooperative": lambda: FixedStructure("non-cooperative", _alone, _rounding),
    "no-sharing": lambda: replace(CoalitionMechanism(), name="no-sharing", shared=False),
    "lfu": lambda: FixedStructure("lfu", _alone, _lfu, shared=False),
    "trimcaching": lambda: FixedStructure("trimcaching", _grand, _trimcaching),
    "trimcaching-native": lambda: FixedStructure("trimcaching-native", _grand,
                                                 _trimcaching_native, reroute=False),
}
BASELINES = ("rounding", "non-cooperative", "no-sharing", "lfu", "trimcaching")


def get_policy(name: str) -> Policy:
    return lookup(POLICIES, "method", name)()
