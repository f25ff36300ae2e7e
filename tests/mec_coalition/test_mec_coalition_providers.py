"""Equal routing for TrimCaching, provider shares and rationality, blocking coalitions."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.mec_coalition import Economy, get_policy, heuristics, synthetic
from schedlab.mec_coalition.coalition import (
    CoalitionGame,
    blocking_coalition,
    blocking_coalitions,
    earned,
    form_coalitions,
    labels_of,
    provider_shares,
)
from schedlab.mec_coalition.policies import trimcaching_cache
from schedlab.mec_coalition.workloads import heterogeneous


@pytest.fixture(scope="module")
def market():
    return synthetic(6, 10, 60, seed=5, tasks=4, economy=Economy(reach=4))


def test_trimcaching_is_routed_by_our_rule_and_its_routing_is_optimal(market):
    idx = np.arange(market.cand.size)
    plan = get_policy("trimcaching").plan(market, 0)
    cached = plan.placement.cached
    assert (plan.placement.choice == heuristics.assign(market, idx, cached, exact=True)).all()
    assert heuristics.routing_regret(market, cached, plan.placement.choice) == 0.0
    assert heuristics.routing_regret(market, cached, plan.placement.choice,
                                     np.zeros(market.cloudlets.n, dtype=np.int64)) == 0.0


def test_native_trimcaching_serves_the_nearest_replica_on_the_same_cache():
    from dataclasses import replace

    from schedlab.mec_coalition.model import Instance

    tight = synthetic(6, 10, 60, seed=5, tasks=4, economy=Economy(reach=4))
    roomy = Instance(tight.zoo, replace(tight.cloudlets,
                                        compute_tflops=tight.cloudlets.compute_tflops * 50,
                                        gpu_tflops=tight.cloudlets.gpu_tflops * 100),
                     tight.users, tight.economy)  # compute never binds: the rule shows plainly
    idx = np.arange(roomy.cand.size)
    ours = get_policy("trimcaching").plan(roomy, 0).placement
    native = get_policy("trimcaching-native").plan(roomy, 0).placement
    assert heuristics.covered_rate(roomy, idx, native.cached) == pytest.approx(
        heuristics.covered_rate(roomy, idx, ours.cached))
    cand = roomy.cand
    served = np.nonzero(native.choice >= 0)[0]
    assert served.size > 10
    for u in served:
        mine = (cand.user == u) & native.cached[cand.node, cand.model]
        assert cand.delay_s[native.choice[u]] == pytest.approx(cand.delay_s[mine].min())
    assert heuristics.routing_regret(roomy, native.cached, native.choice) >= 0.0


def test_routing_regret_counts_a_worse_choice(market):
    idx = np.arange(market.cand.size)
    plan = get_policy("rounding").plan(market, 0).placement
    cand = market.cand
    usable = plan.cached[cand.node, cand.model]
    for u in range(market.users.n):
        opts = np.nonzero(usable & (cand.user == u))[0]
        if opts.size > 1 and np.ptp(cand.gain[opts]) > 1e-6:
            worse = opts[np.argmin(cand.gain[opts])]
            choice = heuristics.assign(market, idx, plan.cached)
            lost = cand.gain[choice[u]] - cand.gain[worse]
            choice[u] = worse
            assert heuristics.routing_regret(market, plan.cached, choice) == pytest.approx(lost)
            # a user confined to its own coalition has nothing to regret outside it
            alone = np.arange(market.cloudlets.n)
            assert heuristics.routing_regret(market, plan.cached, choice, alone) <= lost + 1e-9
            return
    pytest.fail("no user with two cached options of different gain")


def test_trimcaching_cache_covers_at_least_the_per_gb_greedy(market):
    idx = np.arange(market.cand.size)
    rate = market.users.rate[market.cand.user]
    per_gb = heuristics.greedy_cache(market, idx, weight=rate, use_cost=False)
    best = trimcaching_cache(market, idx)
    assert heuristics.covered_rate(market, idx, best) >= heuristics.covered_rate(
        market, idx, per_gb) - 1e-12
    assert (heuristics.storage_used(market, best) <= market.cloudlets.storage_gb + 1e-9).all()


def test_shares_are_efficient_and_side_payments_make_the_grand_coalition_rational(market):
    game = CoalitionGame(market)
    alone = np.array([game.value(frozenset([i])) for i in range(market.cloudlets.n)])
    plan = get_policy("rounding").plan(market, 0)
    own = earned(market, plan.placement)
    assert own.sum() == pytest.approx(plan.placement.value)  # what the cloudlets earn = v(N)
    shares = provider_shares(market, plan.coalitions, plan.placement, alone, game.weight)
    assert shares["proportional"].sum() == pytest.approx(plan.placement.value)
    assert plan.placement.value >= alone.sum()  # surplus >= 0 ...
    assert (shares["proportional"] >= alone - 1e-9).all()  # ... so nobody is below alone
    # without side payments someone earns less than alone (here: a provider serving no one)
    assert (shares["earned"] < alone - 1e-6).any()


def test_heterogeneous_providers_differ_in_capacity_and_price(market):
    inst, large = heterogeneous(market, 1)
    c0, c1 = market.cloudlets, inst.cloudlets
    assert large.any() and (~large).any()
    assert np.allclose(c1.storage_gb[~large], 0.5 * c0.storage_gb[~large]) or (
        c1.storage_gb.max() >= market.zoo.model_gb.max())
    assert np.allclose(c1.storage_cost[large], 0.6 * c0.storage_cost[large])
    assert np.allclose(c1.compute_cost[~large], 1.5 * c0.compute_cost[~large])
    assert (c1.compute_tflops < c1.servers * c1.gpu_tflops).all()  # queues stay stable
    level = inst.users.price / market.users.price
    for n in range(inst.cloudlets.n):  # one price level per provider, for its home users
        assert np.ptp(level[inst.home == n]) < 1e-9 if (inst.home == n).any() else True
    assert 0.6 <= level.min() and level.max() <= 1.6


def test_blocking_coalitions_lists_what_the_first_match_finds():
    inst = synthetic(5, 6, 25, 3, tasks=3, economy=Economy(reach=5))
    game = CoalitionGame(inst, seed=3)
    formed = form_coalitions(game, 3)
    for structure in (formed.structure, [frozenset(range(5))]):
        found = blocking_coalitions(game, structure, formed.epsilon)
        first = blocking_coalition(game, structure, formed.epsilon)
        assert (first is None) == (not found) and (first is None or first == found[0])
        label = labels_of(structure, 5)
        for c in found:  # every member of a blocking coalition strictly gains
            for i in c:
                now = game.payoff(i, frozenset(np.nonzero(label == label[i])[0].tolist()))
                assert game.payoff(i, c) > now + formed.epsilon
