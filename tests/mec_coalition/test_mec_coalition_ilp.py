"""The ILP against brute force and the NLIP; LP bound; randomized rounding's guarantees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.mec_coalition import (
    Economy,
    brute_force,
    heuristics,
    nlip_objective,
    solve,
    synthetic,
)


def tiny(seed: int):
    return synthetic(2, 3, 4, seed, tasks=2, economy=Economy(reach=2))


@pytest.mark.parametrize("seed", range(6))
def test_ilp_matches_brute_force(seed):
    inst = tiny(seed)
    idx = np.arange(inst.cand.size)
    place = solve(inst, idx)[0]
    assert place.optimal
    assert place.value == pytest.approx(brute_force(inst, idx), abs=1e-7)


@pytest.mark.parametrize("seed", range(4))
def test_lp_bounds_ilp_bounds_heuristics(seed):
    inst = synthetic(4, 8, 20, seed, tasks=3, economy=Economy(reach=4))
    idx = np.arange(inst.cand.size)
    best = solve(inst, idx)[0]
    lp = solve(inst, idx, relax=True)[0].value
    rounded = heuristics.randomized_rounding(inst, idx, seed)
    assert lp >= best.value - 1e-6
    assert best.value >= rounded.value - 1e-6
    assert rounded.bound == pytest.approx(lp)
    # the ILP's own objective is the NLIP's at its solution, and the engine's objective
    assert nlip_objective(inst, best.cached, best.choice) == pytest.approx(best.value, abs=1e-6)
    assert heuristics.objective(inst, best.cached, best.choice) == pytest.approx(best.value,
                                                                                 abs=1e-6)


@settings(max_examples=25)
@given(seed=st.integers(0, 10_000), bits=st.integers(0, 2**30))
def test_nlip_product_form_equals_union_of_blocks(seed, bits):
    """Linearisation step 2 (OR of binaries) is exact for every cache matrix."""
    inst = synthetic(3, 6, 10, seed, tasks=3)
    n, m = inst.cloudlets.n, inst.zoo.n_models
    cached = np.array([(bits >> k) & 1 for k in range(n * m)], dtype=bool).reshape(n, m)
    choice = heuristics.assign(inst, np.arange(inst.cand.size), cached)
    assert nlip_objective(inst, cached, choice) == pytest.approx(
        heuristics.objective(inst, cached, choice), abs=1e-9)


@settings(max_examples=15)
@given(seed=st.integers(0, 10_000))
def test_rounding_is_always_feasible(seed):
    inst = synthetic(5, 10, 30, seed, tasks=4, economy=Economy(reach=3))
    idx = np.arange(inst.cand.size)
    place = heuristics.randomized_rounding(inst, idx, seed, samples=3)
    used = heuristics.storage_used(inst, place.cached)
    assert (used <= inst.cloudlets.storage_gb + 1e-6).all()
    t = place.choice[place.choice >= 0]
    assert place.cached[inst.cand.node[t], inst.cand.model[t]].all()
    load = np.bincount(inst.cand.node[t], inst.cand.load[t], inst.cloudlets.n)
    assert (load <= inst.cloudlets.compute_tflops + 1e-6).all()


def test_threshold_rounding_counts_a_shared_block_once():
    """With rho = 1 a block is present exactly when its best model clears U_n, so expected
    storage equals the LP's z-storage; per-model coins would over-count shared blocks."""
    inst = synthetic(3, 10, 30, 1, tasks=3, economy=Economy(reach=3))
    zoo = inst.zoo
    lora = [k for k, kind in enumerate(zoo.kind) if kind == "lora"]
    base = zoo.kind.index("base")
    both = np.zeros((inst.cloudlets.n, zoo.n_models), dtype=bool)
    both[0, [base, lora[0]]] = True
    only_lora = np.zeros_like(both)
    only_lora[0, lora[0]] = True
    assert heuristics.storage_used(inst, both)[0] == pytest.approx(
        heuristics.storage_used(inst, only_lora)[0])
    assert heuristics.storage_used(inst, both, shared=False)[0] > \
        heuristics.storage_used(inst, both)[0]


def test_empty_candidate_set_gives_empty_placement():
    inst = tiny(0)
    place = solve(inst, np.zeros(0, dtype=np.int64))[0]
    assert place.value == 0 and not place.cached.any()
