"""Coalition formation among selfish cloudlets: values, fair payoffs, ε-best response, SPoA.

A coalition S pools its cloudlets: users homed in S may be served by any cloudlet of S. Its
value v(S) is what a caching solver achieves on S's users and cloudlets (gain over sending every
request to the cloud, minus storage cost; a request served by another member pays the edge
transfer and its delay) minus an optional coordination charge ``coord_cost`` per pair of
members per second. That charge is not the paper's: it is 0 by default and an explicit sweep
parameter (``experiment.coord_cost_sweep``).

Payoff allocation (efficient: members' payoffs sum to v(S)):

* ``proportional`` (default): each member keeps its stand-alone value v({i}) and the cooperative
  surplus v(S) - sum_j v({j}) is split in proportion to the resources it brings (storage and
  compute, each normalised by the market mean) - "proportional to contribution".
* ``shapley``: the exact Shapley value over S's sub-coalitions (small coalitions only).
* ``earned``: no side payments - each member keeps what its own cloudlet earns in S's plan
  (the gain of the requests it serves minus its storage cost; the coordination charge split
  equally). Efficient too, but not individually rational by construction: a member whose
  users are served by a cheaper neighbour can earn less than alone.

Individual rationality. With an exact oracle v is superadditive (S ∪ T can run S's and T's
plans side by side), so v(S) >= sum_j v({j}) and both ``proportional`` and ``shapley`` give
every member at least its stand-alone value in *any* coalition, the grand one included:
coalition formation cannot improve on the grand coalition there. :func:`provider_shares`
measures it per provider for any plan (``experiment.provider_rationality``).

ε-perturbed best response: cloudlets take turns (seeded random order); cloudlet i in S looks at
moving alone or into a neighbouring coalition T. A move is allowed when i gains more than ε
*and* the two affected coalitions together gain more than ε (v(T+i) + v(S-i) > v(T) + v(S) + ε,
so T's members can be compensated under the efficient allocation). i takes its best allowed
move. Every move raises the potential W = sum of coalition values by more than ε, and W is
bounded, so the process stops after at most (W_max - W_0)/ε moves; where it stops no cloudlet
has an allowed move, which is the stability we test (ε-switch-stable).

Merge and split (Apt & Witzel's rules, utilitarian order, as in Saad et al.'s merge-and-split
for wireless networks): two neighbouring coalitions merge when v(S ∪ T) > v(S) + v(T) + ε; a
coalition splits into two parts when v(A) + v(B) > v(S) + ε. Every bipartition is tried for
coalitions of at most ``split_max`` members, and only peeling off one member above that (the
number of bipartitions is 2^(|S|-1) - 1). Both raise the potential W by more than ε, so the
convergence argument still holds. :func:`find_deviation` checks all three kinds;
:func:`blocking_coalition` checks coalitional (core-type) deviations by brute force.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from schedlab.core.errors import UnknownNameError
from schedlab.mec_coalition import heuristics, ilp
from schedlab.mec_coalition.ilp import Placement
from schedlab.mec_coalition.model import Instance

Solver = Callable[[Instance, np.ndarray, int], Placement]


def _greedy(inst: Instance, idx: np.ndarray, seed: int) -> Placement:
    cached = heuristics.greedy_cache(inst, idx)
    choice = heuristics.assign(inst, idx, cached)
    return Placement(cached, choice, heuristics.objective(inst, cached, choice))


def _rounding(inst: Instance, idx: np.ndarray, seed: int) -> Placement:
    return heuristics.randomized_rounding(inst, idx, seed)


def _exact(inst: Instance, idx: np.ndarray, seed: int) -> Placement:
    return ilp.solve(inst, idx)[0]


#: caching solvers a coalition can use to compute its value, by name
SOLVERS: dict[str, Solver] = {"greedy": _greedy, "rounding": _rounding, "ilp": _exact}
ALLOCATIONS = ("proportional", "shapley", "earned")


@dataclass
class CoalitionGame:
    """The coalition game on one instance, with memoised coalition values."""

    inst: Instance
    solver: str = "greedy"
    allocation: str = "proportional"
    seed: int = 0
    _memo: dict[frozenset, float] = field(default_factory=dict, repr=False)
    _earned: dict[frozenset, dict[int, float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise UnknownNameError("coalition solver", self.solver, list(SOLVERS))
        if self.allocation not in ALLOCATIONS:
            raise UnknownNameError("payoff allocation", self.allocation, list(ALLOCATIONS))
        cand, c = self.inst.cand, self.inst.cloudlets
        homes = self.inst.home[cand.user]
        order = np.argsort(homes, kind="stable")
        bounds = np.searchsorted(homes[order], np.arange(c.n + 1))
        self._by_home = [order[bounds[i]: bounds[i + 1]] for i in range(c.n)]
        self.weight = (c.storage_gb / max(c.storage_gb.mean(), 1e-12)
                       + c.compute_tflops / max(c.compute_tflops.mean(), 1e-12))
        self.calls = 0
        self.nbrs = self.inst.neighbours  # a property that rebuilds the graph: read it once

    @property
    def n(self) -> int:
        return self.inst.cloudlets.n

    def candidates(self, members: frozenset[int]) -> np.ndarray:
        """Candidate triples inside S: users homed in S, served by a cloudlet of S."""
        if not members:
            return np.zeros(0, dtype=np.int64)
        idx = np.concatenate([self._by_home[i] for i in sorted(members)])
        inside = np.zeros(self.n, dtype=bool)
        inside[list(members)] = True
        return idx[inside[self.inst.cand.node[idx]]]

    def placement(self, members: frozenset[int]) -> Placement:
        return SOLVERS[self.solver](self.inst, self.candidates(members), self.seed)

    def coordination(self, size: int) -> float:
        return self.inst.economy.coord_cost * size * (size - 1) / 2

    def value(self, members: frozenset[int]) -> float:
        """v(S): the solver's objective on S minus the coordination cost of S."""
        if not members:
            return 0.0
        if members not in self._memo:
            self.calls += 1
            place = self.placement(members)
            self._memo[members] = place.value - self.coordination(len(members))
            if self.allocation == "earned":
                own = earned(self.inst, place)
                charge = self.coordination(len(members)) / len(members)
                self._earned[members] = {i: float(own[i]) - charge for i in members}
        return self._memo[members]

    def payoff(self, i: int, members: frozenset[int]) -> float:
        """φ_i(S) under the chosen (efficient) allocation rule."""
        if self.allocation == "shapley":
            return self.shapley(members)[i]
        if self.allocation == "earned":
            self.value(members)
            return self._earned[members][i]
        alone = {j: self.value(frozenset([j])) for j in members}
        surplus = self.value(members) - sum(alone.values())
        share = self.weight[i] / sum(self.weight[j] for j in members)
        return alone[i] + surplus * share

    def shapley(self, members: frozenset[int]) -> dict[int, float]:
        """Exact Shapley values: mean marginal contribution over all orders (via subsets)."""
        players = sorted(members)
        k = len(players)
        out = dict.fromkeys(players, 0.0)
        for i in players:
            rest = [j for j in players if j != i]
            for r in range(k):
                weight = math.factorial(r) * math.factorial(k - r - 1) / math.factorial(k)
                for sub in itertools.combinations(rest, r):
                    s = frozenset(sub)
                    out[i] += weight * (self.value(s | {i}) - self.value(s))
        return out

    def welfare(self, structure: list[frozenset[int]]) -> float:
        return sum(self.value(s) for s in structure)


def earned(inst: Instance, place: Placement, shared: bool = True) -> np.ndarray:
    """What each cloudlet earns in ``place`` without side payments (payoff/s over the cloud).

    The gain of every request it serves (the user's payment and QoS terms minus compute and
    transfer, over that user's cloud payoff) minus its storage cost. Summed over cloudlets it
    is the plan's objective.
    """
    cand, n = inst.cand, inst.cloudlets.n
    t = place.choice[place.choice >= 0]
    served = np.bincount(cand.node[t], cand.gain[t], n)
    storage = inst.cloudlets.storage_cost * heuristics.storage_used(inst, place.cached, shared)
    return served - storage


def provider_shares(inst: Instance, structure: list[frozenset[int]], place: Placement,
                    alone: np.ndarray, weight: np.ndarray) -> dict[str, np.ndarray]:
    """Each provider's payoff under ``structure``'s plan, with and without side payments.

    ``earned``: what its cloudlet earns (:func:`earned`). ``proportional``: the mechanism's rule
    inside each coalition S - its stand-alone value ``alone[i]`` plus the surplus
    v(S) - sum_j alone[j] split by ``weight`` (v(S) = what S's members earn together).
    """
    own = earned(inst, place)
    prop = np.zeros(inst.cloudlets.n)
    for s in structure:
        members = np.fromiter(s, dtype=np.int64)
        surplus = own[members].sum() - alone[members].sum()
        prop[members] = alone[members] + surplus * weight[members] / weight[members].sum()
    return dict(earned=own, proportional=prop)


@dataclass
class Formation:
    """The outcome of the best-response process."""

    structure: list[frozenset[int]]
    moves: int
    rounds: int
    converged: bool
    epsilon: float
    welfare_trace: list[float]


def epsilon_for(game: CoalitionGame, eps_frac: float) -> float:
    """ε as a fraction of the mean stand-alone value, so it scales with the market."""
    alone = np.mean([game.value(frozenset([i])) for i in range(game.n)])
    return max(eps_frac * abs(float(alone)), 1e-9)


def best_move(game: CoalitionGame, i: int, label: np.ndarray,
              eps: float) -> tuple[float, int] | None:
    """i's best allowed move as (gain, target label; -1 = alone), or None when it has none."""
    current = frozenset(np.nonzero(label == label[i])[0].tolist())
    mine = game.payoff(i, current)
    left = current - {i}
    targets = {int(label[j]) for j in game.nbrs[i]} - {int(label[i])}
    options = sorted(targets) + ([-1] if left else [])
    best: tuple[float, int] | None = None
    for t in options:
        other = frozenset() if t < 0 else frozenset(np.nonzero(label == t)[0].tolist())
        joined = other | {i}
        delta_w = (game.value(joined) + game.value(left) - game.value(other)
                   - game.value(current))
        gain = game.payoff(i, joined) - mine
        if gain > eps and delta_w > eps and (best is None or gain > best[0]):
            best = (gain, t)
    return best


def _adjacent(game: CoalitionGame, a: frozenset[int], b: frozenset[int]) -> bool:
    return any(game.nbrs[i] & b for i in a)


def find_merge(game: CoalitionGame, structure: list[frozenset[int]],
               eps: float) -> tuple[frozenset[int], frozenset[int]] | None:
    """Two neighbouring coalitions whose union is worth more than both by > ε (best first)."""
    best, found = eps, None
    for a, b in itertools.combinations(structure, 2):
        if not _adjacent(game, a, b):
            continue
        gain = game.value(a | b) - game.value(a) - game.value(b)
        if gain > best:
            best, found = gain, (a, b)
    return found


def bipartitions(members: frozenset[int], split_max: int) -> Iterator[frozenset[int]]:
    """One side A of every split {A, S - A} (all of them up to ``split_max``, else singletons)."""
    players = sorted(members)
    if len(players) < 2:
        return
    if len(players) > split_max:
        for i in players:
            yield frozenset([i])
        return
    first, rest = players[0], players[1:]
    for r in range(0, len(rest)):
        for sub in itertools.combinations(rest, r):
            yield frozenset((first, *sub))


def find_split(game: CoalitionGame, structure: list[frozenset[int]], eps: float,
               split_max: int = 8) -> tuple[frozenset[int], frozenset[int]] | None:
    """A coalition S and a part A with v(A) + v(S - A) > v(S) + ε (the best such split)."""
    best, found = eps, None
    for s in structure:
        for a in bipartitions(s, split_max):
            gain = game.value(a) + game.value(s - a) - game.value(s)
            if gain > best:
                best, found = gain, (s, a)
    return found


def form_coalitions(game: CoalitionGame, seed: int, eps_frac: float = 0.01,
                    max_rounds: int = 200, start: np.ndarray | None = None,
                    merge_split: bool = True, split_max: int = 8) -> Formation:
    """Run ε-perturbed best response from ``start`` (default: every cloudlet alone).

    Each round: every cloudlet (seeded order) takes its best allowed switch; then, with
    ``merge_split``, the best merge and the best split are applied while they exist.
    """
    rng = np.random.default_rng(seed)
    label = np.arange(game.n) if start is None else np.asarray(start).copy()
    eps = epsilon_for(game, eps_frac)
    moves, trace = 0, [game.welfare(structure_of(label))]
    for rounds in range(1, max_rounds + 1):
        moved = False
        for i in rng.permutation(game.n):
            found = best_move(game, int(i), label, eps)
            if found is None:
                continue
            label[i] = found[1] if found[1] >= 0 else _fresh_label(label)
            moves += 1
            moved = True
            trace.append(game.welfare(structure_of(label)))
        while merge_split:
            structure = structure_of(label)
            merge = find_merge(game, structure, eps)
            if merge is not None:
                label[list(merge[1])] = label[min(merge[0])]
            else:
                split = find_split(game, structure, eps, split_max)
                if split is None:
                    break
                label[list(split[1])] = _fresh_label(label)
            moves += 1
            moved = True
            trace.append(game.welfare(structure_of(label)))
        if not moved:
            return Formation(structure_of(label), moves, rounds, True, eps, trace)
    return Formation(structure_of(label), moves, max_rounds, False, eps, trace)


def _fresh_label(label: np.ndarray) -> int:
    unused = np.setdiff1d(np.arange(label.size), label)
    return int(unused[0])


def structure_of(label: np.ndarray) -> list[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for i, g in enumerate(label.tolist()):
        groups.setdefault(g, set()).add(i)
    return sorted((frozenset(g) for g in groups.values()), key=min)


def labels_of(structure: list[frozenset[int]], n: int) -> np.ndarray:
    label = np.full(n, -1, dtype=np.int64)
    for k, s in enumerate(structure):
        label[list(s)] = k
    return label


def find_deviation(game: CoalitionGame, structure: list[frozenset[int]], eps: float,
                   merge_split: bool = True, split_max: int = 8) -> tuple | None:
    """An allowed deviation from ``structure``, or None (ε-stable against all three kinds).

    Returns ``("switch", i, target_label)``, ``("merge", S, T)`` or ``("split", S, A)``.
    """
    label = labels_of(structure, game.n)
    for i in range(game.n):
        found = best_move(game, i, label, eps)
        if found is not None:
            return "switch", i, found[1]
    if merge_split:
        merge = find_merge(game, structure, eps)
        if merge is not None:
            return "merge", *merge
        split = find_split(game, structure, eps, split_max)
        if split is not None:
            return "split", *split
    return None


def _blocking(game: CoalitionGame, structure: list[frozenset[int]],
              eps: float) -> Iterator[frozenset[int]]:
    """Coalitions (not in ``structure``, smallest first) in which each member earns > ε more
    than now: brute force over all 2^n - 1 coalitions, so n <= 12."""
    if game.n > 12:
        raise UnknownNameError("blocking-coalition size (brute force needs n <= 12)",
                               str(game.n), [str(k) for k in range(1, 13)])
    label = labels_of(structure, game.n)
    now = {i: game.payoff(i, frozenset(np.nonzero(label == label[i])[0].tolist()))
           for i in range(game.n)}
    for r in range(1, game.n + 1):
        for c in itertools.combinations(range(game.n), r):
            s = frozenset(c)
            if s not in structure and all(game.payoff(i, s) > now[i] + eps for i in s):
                yield s


def blocking_coalition(game: CoalitionGame, structure: list[frozenset[int]],
                       eps: float) -> frozenset[int] | None:
    """A coalition C in which every member earns > ε more than now (brute force, n <= 12)."""
    return next(_blocking(game, structure, eps), None)


def blocking_coalitions(game: CoalitionGame, structure: list[frozenset[int]],
                        eps: float) -> list[frozenset[int]]:
    """Every coalition C (not in ``structure``) in which each member earns > ε more than now:
    an empty list means ``structure`` is strongly stable (core-stable) under the game's rule."""
    return list(_blocking(game, structure, eps))


def set_partitions(items: list[int]) -> Iterator[list[frozenset[int]]]:
    """Every partition of ``items`` (Bell(n) of them)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in set_partitions(rest):
        yield [frozenset([first]), *part]
        for k in range(len(part)):
            yield [*part[:k], part[k] | {first}, *part[k + 1:]]


@dataclass
class SPoA:
    """Strong price of anarchy by enumeration, and where the mechanism's outcome sits."""

    optimum: float
    worst_stable: float
    spoa: float
    stable_structures: int
    partitions: int


def strong_price_of_anarchy(game: CoalitionGame, eps: float = 0.0) -> SPoA:
    """SPoA = best welfare over all structures / worst welfare over strongly stable ones.

    A structure is strongly stable when no coalition C can form in which *every* member earns
    more than ε above its current payoff. Brute force over all 2^n - 1 coalitions and Bell(n)
    structures, so n <= 8.
    """
    if game.n > 8:
        raise UnknownNameError("SPoA size (brute force needs n <= 8)", str(game.n),
                               [str(k) for k in range(1, 9)])
    players = list(range(game.n))
    subsets = [frozenset(c) for r in range(1, game.n + 1)
               for c in itertools.combinations(players, r)]
    inside = {s: {i: game.payoff(i, s) for i in s} for s in subsets}
    best, worst, stable, total = -np.inf, np.inf, 0, 0
    for part in set_partitions(players):
        total += 1
        w = game.welfare(part)
        best = max(best, w)
        now = {i: inside[s][i] for s in part for i in s}
        blocked = any(all(inside[c][i] > now[i] + eps for i in c) for c in subsets)
        if not blocked:
            stable += 1
            worst = min(worst, w)
    spoa = best / worst if stable and worst > 0 else float("nan")
    return SPoA(best, worst if stable else float("nan"), spoa, stable, total)
