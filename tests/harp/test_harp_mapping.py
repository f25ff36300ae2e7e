"""Mapping solvers: the HiGHS ILP against brute force and the exact level sweep."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.harp import ArchConfig, build_workload, make_mapper
from schedlab.harp.mapping import (
    BALANCED_AREA,
    WEIGHTS,
    Problem,
    _objective,
    brute_force,
    evaluate,
    greedy,
    problem,
    solve_ilp,
    sweep_levels,
)


def _objective_value(prob: Problem, strategy: str, copies: np.ndarray) -> float:
    return _objective(prob, strategy)(*evaluate(prob, copies))


problems = st.builds(
    lambda t, x, budget_factor, floor, r: Problem(
        tuple(f"op{i}" for i in range(len(t))), np.array(t, dtype=float),
        np.array(x[:len(t)] + [1] * (len(t) - len(x)), dtype=np.int64),
        tuple(range(1, r + 1)), int(budget_factor * sum(x[:len(t)] + [1] * (len(t) - len(x)))),
        floor),
    st.lists(st.floats(10, 1000), min_size=1, max_size=4),
    st.lists(st.integers(1, 20), min_size=4, max_size=4),
    st.floats(1.0, 6.0), st.floats(0.0, 300.0), st.integers(1, 4),
)


@given(problems, st.sampled_from(sorted(WEIGHTS)))
def test_ilp_and_levels_match_brute_force(prob: Problem, strategy: str) -> None:
    best = _objective_value(prob, strategy, brute_force(prob, strategy))
    for solver in (solve_ilp, sweep_levels):
        copies = solver(prob, strategy)
        t, a = evaluate(prob, copies)
        limit = prob.budget if strategy != "balanced" else min(
            prob.budget, BALANCED_AREA * prob.crossbars.sum())
        assert a <= limit + 1e-9
        assert _objective_value(prob, strategy, copies) <= best + 1e-6


@given(problems, st.sampled_from(sorted(WEIGHTS)))
def test_greedy_is_feasible_and_never_worse_than_one_copy(prob: Problem, strategy: str) -> None:
    copies = greedy(prob, strategy)
    assert evaluate(prob, copies)[1] <= prob.budget
    ones = np.ones(len(prob.ops), dtype=np.int64)
    assert _objective_value(prob, strategy, copies) <= _objective_value(prob, strategy, ones)


@pytest.mark.parametrize("model", ["bert-base", "gpt2-medium", "vit-b16"])
@pytest.mark.parametrize("strategy", sorted(WEIGHTS))
def test_ilp_reaches_exact_optimum_on_built_in_models(model: str, strategy: str) -> None:
    prob = problem(build_workload(model), ArchConfig())
    ilp, exact = solve_ilp(prob, strategy), sweep_levels(prob, strategy)
    assert np.isclose(_objective_value(prob, strategy, ilp),
                      _objective_value(prob, strategy, exact), rtol=1e-9)


def test_strategies_trade_latency_for_area() -> None:
    work, arch = build_workload("bert-base"), ArchConfig()
    maps = {s: make_mapper(s).map(work, arch) for s in WEIGHTS}
    assert maps["area"].crossbars <= maps["balanced"].crossbars <= maps["latency"].crossbars
    assert maps["latency"].bottleneck_ns <= maps["balanced"].bottleneck_ns
    assert maps["balanced"].bottleneck_ns <= maps["area"].bottleneck_ns
    assert maps["balanced"].crossbars <= BALANCED_AREA * maps["area"].crossbars
    assert set(maps["area"].replicas.values()) == {1}


def test_model_that_does_not_fit_is_a_clear_error() -> None:
    arch = ArchConfig(max_crossbars=1000)
    with pytest.raises(ConfigError, match="needs .* crossbars") as info:
        make_mapper("area").map(build_workload("bert-base"), arch)
    assert info.value.field == "max_crossbars"


def test_unknown_strategy_and_solver() -> None:
    with pytest.raises(UnknownNameError):
        make_mapper("fastest")
    with pytest.raises(UnknownNameError):
        make_mapper("latency", "magic").map(build_workload("bert-base", 8), ArchConfig())
