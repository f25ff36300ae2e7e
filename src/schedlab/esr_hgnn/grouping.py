"""Reusability-driven metapath grouping: which metapaths share a hardware channel's trie.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) runs K sampling channels in parallel, each walking the
trie of the metapaths assigned to it. Reuse only happens *within* a channel, so the assignment
decides how many traversals are saved. We minimise the summed expected reads of the K tries,
subject to a balance cap of ``ceil(M / K)`` metapaths per channel (without it, one channel would
take everything and the others idle).

* ``optimal``: exact, by dynamic programming over subsets (M <= 12 metapaths, O(K * 3^M)).
* ``greedy``: agglomerative merging by reuse gain, then single moves/swaps until no gain.
* ``round-robin`` and ``random``: reuse-oblivious baselines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from itertools import combinations
from typing import Protocol

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.core.registry import lookup
from schedlab.esr_hgnn.policies import fanout_at
from schedlab.esr_hgnn.trie import MetapathTrie

HopCost = Callable[[str], float]
Grouping = list[list[str]]
EXACT_LIMIT = 12


def fanout_hop_cost(fanouts: Sequence[int]) -> HopCost:
    """Expected reads per seed of the last hop of ``prefix``: frontier size x (1 row + f samples).

    Ignores walks that die at isolated nodes (there are none in the generated graphs), so the cost
    depends on the metapaths' shapes alone and grouping needs no graph.
    """
    fanouts = tuple(fanouts)

    def cost(prefix: str) -> float:
        hop = len(prefix) - 2
        frontier = float(np.prod([fanout_at(fanouts, h) for h in range(hop)])) if hop else 1.0
        return frontier * (1 + fanout_at(fanouts, hop))

    return cost


def group_cost(group: Sequence[str], hop_cost: HopCost) -> float:
    """Expected reads of one channel: the weighted edge count of its trie (0 when empty)."""
    return MetapathTrie(list(group)).weighted_cost(hop_cost) if group else 0.0


def total_cost(grouping: Grouping, hop_cost: HopCost) -> float:
    return sum(group_cost(g, hop_cost) for g in grouping)


def capacity(n_metapaths: int, channels: int) -> int:
    return -(-n_metapaths // channels)


class Grouper(Protocol):
    """Assigns metapaths to ``channels`` groups of at most ``ceil(M / channels)`` each."""

    name: str

    def group(self, metapaths: Sequence[str], channels: int, hop_cost: HopCost,
              seed: int = 0) -> Grouping:
        """Exactly ``channels`` lists (some empty when M < channels) covering ``metapaths``."""
        ...


def _validate(metapaths: Sequence[str], channels: int) -> list[str]:
    if channels < 1:
        raise BadInputError(f"channels must be >= 1, got {channels}", field="channels")
    unique = list(dict.fromkeys(metapaths))
    if not unique:
        raise BadInputError("no metapaths to group", field="metapaths")
    short = [mp for mp in unique if len(mp) < 2]
    if short:
        raise BadInputError(f"metapath {short[0]!r} needs at least one hop", field="metapaths")
    if len({mp[0] for mp in unique}) != 1:
        raise BadInputError("metapaths start at different node types; a channel's trie has one "
                            "root", field="metapaths")
    return unique


class RoundRobinGrouper:
    """Metapath i goes to channel i mod K, in the order given: reuse-oblivious."""

    name = "round-robin"

    def group(self, metapaths, channels, hop_cost, seed=0):
        mps = _validate(metapaths, channels)
        return [mps[c::channels] for c in range(channels)]


class RandomGrouper:
    """A seeded random balanced assignment: what grouping by chance achieves."""

    name = "random"

    def group(self, metapaths, channels, hop_cost, seed=0):
        mps = _validate(metapaths, channels)
        order = np.random.default_rng(seed).permutation(len(mps))
        return [[mps[i] for i in order[c::channels]] for c in range(channels)]


class GreedyGrouper:
    """Merge the pair of groups with the largest reuse gain, then improve by moves and swaps."""

    name = "greedy"

    def group(self, metapaths, channels, hop_cost, seed=0):
        mps = _validate(metapaths, channels)
        cap = capacity(len(mps), channels)
        groups = [[mp] for mp in mps]
        while len(groups) > channels:
            best = None
            for i, j in combinations(range(len(groups)), 2):
                if len(groups[i]) + len(groups[j]) > cap:
                    continue
                gain = (group_cost(groups[i], hop_cost) + group_cost(groups[j], hop_cost)
                        - group_cost(groups[i] + groups[j], hop_cost))
                key = (gain, -len(groups[i]) - len(groups[j]))
                if best is None or key > best[0]:
                    best = (key, i, j)
            if best is None:  # cap blocks every merge (cannot happen when cap * K >= M)
                break
            _, i, j = best
            groups[i] = groups[i] + groups.pop(j)
        groups += [[] for _ in range(channels - len(groups))]
        return _local_search(groups, cap, hop_cost)


def _local_search(groups: Grouping, cap: int, hop_cost: HopCost) -> Grouping:
    """First-improvement moves (one metapath to another channel) and swaps until none helps."""
    improved = True
    while improved:
        improved = False
        for a, b in combinations(range(len(groups)), 2):
            for x, y in ((a, b), (b, a)):
                before = group_cost(groups[x], hop_cost) + group_cost(groups[y], hop_cost)
                for mp in list(groups[x]):
                    if len(groups[y]) < cap:
                        gx = [m for m in groups[x] if m != mp]
                        gy = groups[y] + [mp]
                        if group_cost(gx, hop_cost) + group_cost(gy, hop_cost) < before - 1e-9:
                            groups[x], groups[y], improved = gx, gy, True
                            break
                    for other in groups[y]:
                        gx = [m for m in groups[x] if m != mp] + [other]
                        gy = [m for m in groups[y] if m != other] + [mp]
                        if group_cost(gx, hop_cost) + group_cost(gy, hop_cost) < before - 1e-9:
                            groups[x], groups[y], improved = gx, gy, True
                            break
                    if improved:
                        break
                if improved:
                    break
            if improved:
                break
    return groups


class OptimalGrouper:
    """Exact minimum total trie cost under the balance cap, by DP over subsets of metapaths."""

    name = "optimal"

    def group(self, metapaths, channels, hop_cost, seed=0):
        mps = _validate(metapaths, channels)
        m = len(mps)
        if m > EXACT_LIMIT:
            raise BadInputError(f"optimal grouping is exact up to {EXACT_LIMIT} metapaths, got "
                                f"{m}; use --grouper greedy", field="metapaths")
        cap = capacity(m, channels)
        cost = [0.0] * (1 << m)
        for mask in range(1, 1 << m):
            if mask.bit_count() <= cap:
                cost[mask] = group_cost([mps[i] for i in range(m) if mask >> i & 1], hop_cost)

        @cache
        def best(mask: int, left: int) -> tuple[float, tuple[int, ...]]:
            if mask == 0:
                return 0.0, ()
            if left == 0:
                return float("inf"), ()
            low = mask & -mask
            rest = mask ^ low
            answer: tuple[float, tuple[int, ...]] = (float("inf"), ())
            sub = rest
            while True:  # every group containing the lowest remaining metapath
                group = sub | low
                if group.bit_count() <= cap:
                    tail_cost, tail = best(mask ^ group, left - 1)
                    if cost[group] + tail_cost < answer[0]:
                        answer = (cost[group] + tail_cost, (group, *tail))
                if sub == 0:
                    break
                sub = (sub - 1) & rest
            return answer

        _, masks = best((1 << m) - 1, channels)
        groups = [[mps[i] for i in range(m) if mask >> i & 1] for mask in masks]
        return groups + [[] for _ in range(channels - len(groups))]


def brute_force_grouping(metapaths: Sequence[str], channels: int,
                         hop_cost: HopCost) -> tuple[float, Grouping]:
    """Reference answer for tests: try all K^M assignments (small instances only)."""
    mps = list(dict.fromkeys(metapaths))
    cap = capacity(len(mps), channels)
    best: tuple[float, Grouping] = (float("inf"), [])
    for labels in np.ndindex(*([channels] * len(mps))):
        groups: Grouping = [[] for _ in range(channels)]
        for mp, label in zip(mps, labels, strict=True):
            groups[label].append(mp)
        if max(len(g) for g in groups) > cap:
            continue
        value = total_cost(groups, hop_cost)
        if value < best[0] - 1e-9:
            best = (value, groups)
    return best


GROUPERS: dict[str, Callable[[], Grouper]] = {
    "round-robin": RoundRobinGrouper,
    "random": RandomGrouper,
    "greedy": GreedyGrouper,
    "optimal": OptimalGrouper,
}


def make_grouper(name: str) -> Grouper:
    return lookup(GROUPERS, "grouper", name)()
