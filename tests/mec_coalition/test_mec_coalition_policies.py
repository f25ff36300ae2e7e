"""Every policy through the same invariants (one parametrised test, scikit-learn style)."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.core.errors import UnknownNameError
from schedlab.mec_coalition import POLICIES, Economy, engine, get_policy, synthetic
from schedlab.mec_coalition.engine import InfeasiblePlanError
from schedlab.mec_coalition.ilp import Placement
from schedlab.mec_coalition.policies import Plan


@pytest.fixture(scope="module")
def market():
    return synthetic(8, 10, 50, seed=3, tasks=4, economy=Economy(reach=4))


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_makes_a_feasible_consistent_plan(name, market):
    plan = get_policy(name).plan(market, seed=1)
    engine.check(market, plan)  # capacities, coalition boundaries, cached models
    members = sorted(i for s in plan.coalitions for i in s)
    assert members == list(range(market.cloudlets.n))
    metrics = engine.evaluate(market, plan, seed=1)
    for key in ("hit_ratio", "local_hit_ratio", "deadline_met"):
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["local_hit_ratio"] <= metrics["hit_ratio"] + 1e-12
    assert metrics["avg_delay_ms"] > 0 and metrics["cost"] >= 0
    # the sampled-stream payoff tracks the expected one the optimiser reasons about
    expected = engine.expected_payoff(market, plan)
    assert metrics["payoff"] == pytest.approx(expected, rel=0.05, abs=0.5)
    # deterministic for a fixed seed
    again = get_policy(name).plan(market, seed=1)
    assert np.array_equal(again.placement.choice, plan.placement.choice)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_beats_or_matches_caching_nothing(name, market):
    """Serving from the edge is only chosen when it beats the cloud, so the caching objective
    (gain minus storage) is never negative: a policy that caches must earn its storage."""
    plan = get_policy(name).plan(market, seed=2)
    from schedlab.mec_coalition.heuristics import objective

    assert objective(market, plan.placement.cached, plan.placement.choice, plan.shared) > -1e-9


def test_ilp_policy_has_the_best_grand_coalition_objective(market):
    from schedlab.mec_coalition.heuristics import objective

    values = {}
    for name in ("ilp", "rounding", "trimcaching"):
        plan = get_policy(name).plan(market, seed=0)
        values[name] = objective(market, plan.placement.cached, plan.placement.choice)
    assert values["ilp"] >= max(values["rounding"], values["trimcaching"]) - 1e-6


def test_unknown_policy_lists_valid_names():
    with pytest.raises(UnknownNameError, match="coalition"):
        get_policy("magic")


def test_engine_rejects_plans_that_break_constraints(market):
    plan = get_policy("rounding").plan(market, seed=0)
    served = np.nonzero(plan.placement.choice >= 0)[0]
    assert served.size
    broken = Placement(np.zeros_like(plan.placement.cached), plan.placement.choice.copy())
    with pytest.raises(InfeasiblePlanError, match="does not cache"):
        engine.check(market, Plan(plan.coalitions, broken))
    with pytest.raises(InfeasiblePlanError, match="no coalition"):
        engine.check(market, Plan([frozenset([0])], plan.placement))
    alone = [frozenset([i]) for i in range(market.cloudlets.n)]
    remote = market.cand.node[plan.placement.choice[served]] != market.home[served]
    if remote.any():
        with pytest.raises(InfeasiblePlanError, match="outside"):
            engine.check(market, Plan(alone, plan.placement))
    full = Placement(np.ones_like(plan.placement.cached), np.full(market.users.n, -1))
    with pytest.raises(InfeasiblePlanError, match="GB"):
        engine.check(market, Plan(plan.coalitions, full))
