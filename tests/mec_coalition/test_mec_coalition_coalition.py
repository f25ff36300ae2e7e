"""Coalition formation: convergence, stability, fair allocation, SPoA by brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import UnknownNameError
from schedlab.mec_coalition import (
    CoalitionGame,
    Economy,
    find_deviation,
    form_coalitions,
    strong_price_of_anarchy,
    synthetic,
)
from schedlab.mec_coalition.coalition import (
    blocking_coalition,
    find_merge,
    find_split,
    labels_of,
    set_partitions,
)

BELL = [1, 1, 2, 5, 15, 52, 203]


@pytest.mark.parametrize("n", range(7))
def test_set_partitions_enumerates_bell_many_distinct_partitions(n):
    parts = list(set_partitions(list(range(n))))
    assert len(parts) == BELL[n]
    assert len({frozenset(p) for p in parts}) == BELL[n]
    for p in parts:
        assert sorted(i for s in p for i in s) == list(range(n))


@settings(max_examples=12)
@given(seed=st.integers(0, 10_000), eps=st.sampled_from([0.0, 0.01, 0.05]))
def test_best_response_converges_to_a_stable_structure(seed, eps):
    inst = synthetic(12, 10, 80, seed, tasks=4)
    game = CoalitionGame(inst, seed=seed)
    formed = form_coalitions(game, seed, eps_frac=eps)
    assert formed.converged
    assert find_deviation(game, formed.structure, formed.epsilon) is None
    # the potential (total coalition value) rises by more than ε at every move
    steps = np.diff(formed.welfare_trace)
    assert len(steps) == formed.moves
    assert (steps > formed.epsilon).all()
    sizes = sorted(i for s in formed.structure for i in s)
    assert sizes == list(range(inst.cloudlets.n))


def test_moves_only_go_to_neighbouring_coalitions():
    inst = synthetic(20, 10, 120, 5, tasks=4, economy=Economy(reach=3))
    game = CoalitionGame(inst, seed=0)
    formed = form_coalitions(game, 0)
    for s in formed.structure:
        if len(s) > 1:  # every member touches another member through the reach graph
            for i in s:
                assert inst.neighbours[i] & (s - {i})


@pytest.mark.parametrize("allocation", ["proportional", "shapley", "earned"])
def test_allocations_are_efficient(allocation):
    inst = synthetic(4, 8, 30, 2, tasks=3, economy=Economy(reach=4))
    game = CoalitionGame(inst, solver="greedy", allocation=allocation)  # any oracle will do
    for r in range(1, 5):
        for members in itertools.combinations(range(4), r):
            s = frozenset(members)
            total = sum(game.payoff(i, s) for i in s)
            assert total == pytest.approx(game.value(s), abs=1e-7)
    for i in range(4):
        assert game.payoff(i, frozenset([i])) == pytest.approx(game.value(frozenset([i])))


def test_shapley_is_symmetric_for_identical_players_and_zero_for_dummies():
    game = CoalitionGame(synthetic(3, 6, 0, 0, tasks=2), allocation="shapley")
    # no users: every coalition's value is minus its coordination cost, symmetric in players
    values = game.shapley(frozenset(range(3)))
    assert values[0] == pytest.approx(values[1]) == pytest.approx(values[2])
    assert sum(values.values()) == pytest.approx(-game.coordination(3))


@pytest.mark.parametrize("seed", range(3))
def test_spoa_brute_force_properties(seed):
    inst = synthetic(4, 6, 20, seed, tasks=3, economy=Economy(reach=4))
    game = CoalitionGame(inst, solver="ilp", seed=seed)
    result = strong_price_of_anarchy(game)
    assert result.partitions == BELL[4]
    welfare = [game.welfare(p) for p in set_partitions(list(range(4)))]
    assert result.optimum == pytest.approx(max(welfare))
    if result.stable_structures:
        assert result.worst_stable <= result.optimum + 1e-9
        if result.worst_stable > 0:
            assert result.spoa >= 1 - 1e-12


def test_bad_names_and_sizes_are_rejected():
    inst = synthetic(3, 6, 10, 0, tasks=2)
    with pytest.raises(UnknownNameError):
        CoalitionGame(inst, solver="oracle")
    with pytest.raises(UnknownNameError):
        CoalitionGame(inst, allocation="equal")
    with pytest.raises(UnknownNameError):
        strong_price_of_anarchy(CoalitionGame(synthetic(9, 6, 10, 0, tasks=2)))


def _brute_force_deviations(game, structure, eps):
    """Every switch, merge and split from ``structure`` by enumeration (tiny n only)."""
    found = []
    label = labels_of(structure, game.n)
    for i in range(game.n):
        current = next(s for s in structure if i in s)
        for other in [frozenset(), *[s for s in structure if i not in s]]:
            if not other and len(current) == 1:
                continue
            joined, left = other | {i}, current - {i}
            joint = (game.value(joined) + game.value(left) - game.value(other)
                     - game.value(current))
            mine = game.payoff(i, joined) - game.payoff(i, current)
            if mine > eps and joint > eps:
                found.append(("switch", i, sorted(other)))
    for a, b in itertools.combinations(structure, 2):
        if game.value(a | b) > game.value(a) + game.value(b) + eps:
            found.append(("merge", sorted(a), sorted(b)))
    for s in structure:
        for part in set_partitions(sorted(s)):
            if len(part) == 2 and game.welfare(part) > game.value(s) + eps:
                found.append(("split", sorted(s), sorted(part[0])))
    assert label.min() >= 0
    return found


@pytest.mark.parametrize("coord_cost", [0.0, 0.05])
@pytest.mark.parametrize("seed", range(4))
def test_formation_is_stable_against_switch_merge_and_split_by_brute_force(seed, coord_cost):
    inst = synthetic(5, 6, 25, seed, tasks=3, economy=Economy(reach=5, coord_cost=coord_cost))
    game = CoalitionGame(inst, solver="ilp", seed=seed)
    formed = form_coalitions(game, seed)
    assert formed.converged
    assert sorted(i for s in formed.structure for i in s) == list(range(5))
    assert _brute_force_deviations(game, formed.structure, formed.epsilon) == []
    assert find_deviation(game, formed.structure, formed.epsilon) is None
    # the potential (total value) never falls along the process
    assert all(b > a for a, b in itertools.pairwise(formed.welfare_trace))


def test_merge_and_split_moves_are_found_when_profitable():
    inst = synthetic(4, 6, 30, 1, tasks=3, economy=Economy(reach=4))
    game = CoalitionGame(inst, solver="ilp")
    alone = [frozenset([i]) for i in range(4)]
    grand = [frozenset(range(4))]
    eps = 1e-9
    merge = find_merge(game, alone, eps)
    if game.value(grand[0]) > sum(game.value(s) for s in alone) + 1e-6:
        assert merge is not None
        a, b = merge
        assert game.value(a | b) > game.value(a) + game.value(b)
    # a heavy coordination charge makes splitting the grand coalition profitable
    costly = CoalitionGame(synthetic(4, 6, 30, 1, tasks=3,
                                     economy=Economy(reach=4, coord_cost=100.0)), solver="ilp")
    s, a = find_split(costly, grand, eps)
    assert costly.value(a) + costly.value(s - a) > costly.value(s)
    assert find_deviation(costly, grand, eps)[0] in {"switch", "split"}
    formed = form_coalitions(costly, 0, merge_split=True)
    assert all(len(c) == 1 for c in formed.structure)


def test_blocking_coalition_brute_force():
    inst = synthetic(4, 6, 30, 1, tasks=3, economy=Economy(reach=4))
    game = CoalitionGame(inst, solver="ilp")
    formed = form_coalitions(game, 0)
    blocker = blocking_coalition(game, formed.structure, formed.epsilon)
    if blocker is not None:  # reported, not assumed: every member of C must gain > ε
        now = {i: game.payoff(i, next(s for s in formed.structure if i in s)) for i in range(4)}
        assert all(game.payoff(i, blocker) > now[i] + formed.epsilon for i in blocker)
    with pytest.raises(UnknownNameError):
        blocking_coalition(CoalitionGame(synthetic(13, 6, 0, 0, tasks=2)), [], 0.0)
