"""Bucketing kernels against brute force and against simulation of the allocation process."""

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.xbucket import kernels
from schedlab.xbucket.state import BucketingState, next_step


def _naive_split_cost(vals, sigs, b, deterministic):
    """The paper's split cost, written out directly from its definition."""
    lo_v, lo_s, hi_v, hi_s = vals[: b + 1], sigs[: b + 1], vals[b + 1:], sigs[b + 1:]
    p1, p2 = lo_s.sum() / sigs.sum(), hi_s.sum() / sigs.sum()
    e1 = (lo_v * lo_s).sum() / lo_s.sum()
    e2 = (hi_v * hi_s).sum() / hi_s.sum() if hi_s.sum() else 0.0
    brk, top = vals[b], vals[-1]
    if deterministic:
        return p1 * (brk - e1) + p2 * (brk + top - e2)
    return (p1 * p1 * (brk - e1) + p1 * p2 * (top - e1) + p2 * p1 * (brk + top - e2)
            + p2 * p2 * (top - e2))


def _naive_list_cost(bvals, probs, means, deterministic):
    """Expected waste with the full N x N cost table, as the paper defines it (O(N^3))."""
    n = len(bvals)
    if deterministic:
        return sum(probs[i] * (sum(bvals[: i + 1]) - means[i]) for i in range(n))
    table = np.zeros((n, n))
    for i in range(n):
        for j in range(n - 1, -1, -1):
            if j >= i:
                table[i, j] = bvals[j] - means[i]
            else:
                upper = probs[j + 1:] / probs[j + 1:].sum()
                table[i, j] = bvals[j] + (upper * table[i, j + 1:]).sum()
    return float(np.outer(probs, probs).__mul__(table).sum())


values = st.lists(st.integers(1, 5000), min_size=2, max_size=60)


@given(values, st.booleans())
def test_greedy_first_split_is_the_brute_force_minimum(raw, deterministic):
    vals = np.sort(np.asarray(raw, float))
    sigs = np.arange(1, len(vals) + 1, dtype=float)
    csig, cvs = kernels._prefix(vals, sigs)
    fast = [kernels.split_cost(csig, cvs, vals, 0, len(vals) - 1, b, deterministic)
            for b in range(len(vals))]
    slow = [_naive_split_cost(vals, sigs, b, deterministic) for b in range(len(vals))]
    assert np.allclose(fast, slow, rtol=1e-9, atol=1e-6)
    chosen = kernels._best_break(csig, cvs, vals, 0, len(vals) - 1, deterministic)
    assert fast[chosen] <= min(fast) + 1e-9


@given(values, st.booleans(), st.integers(1, 10))
def test_exhaustive_picks_the_cheapest_candidate_list(raw, deterministic, max_buckets):
    vals = np.sort(np.asarray(raw, float))
    sigs = np.arange(1, len(vals) + 1, dtype=float)
    csig, cvs = kernels._prefix(vals, sigs)
    costs = []
    for n in range(1, max_buckets + 1):
        bvals, probs = kernels._group(vals, csig, kernels.candidate_tops(vals[-1], n))
        means = kernels.bucket_means(vals, csig, cvs, bvals)
        fast = kernels.list_cost(bvals, probs, means, deterministic)
        assert fast == pytest.approx(_naive_list_cost(bvals, probs, means, deterministic),
                                     rel=1e-9, abs=1e-6)
        costs.append((fast, bvals))
    best_v, _ = kernels.exhaustive_buckets(vals, sigs, max_buckets, deterministic)
    assert min(c for c, _ in costs) == pytest.approx(
        next(c for c, b in costs if np.array_equal(b, best_v)))


@given(values, st.integers(0, 3))
def test_every_splitter_returns_a_probability_distribution_over_sorted_tops(raw, which):
    vals = np.sort(np.asarray(raw, float))
    sigs = np.arange(1, len(vals) + 1, dtype=float)
    bvals, probs = [
        kernels.greedy_buckets(vals, sigs, False), kernels.greedy_buckets(vals, sigs, True),
        kernels.exhaustive_buckets(vals, sigs, 10, False), kernels.quantized_buckets(vals, 4),
    ][which]
    assert np.all(np.diff(bvals) >= 0)
    assert bvals[-1] == vals[-1]  # the top bucket covers every record
    assert probs.sum() == pytest.approx(1.0)
    assert np.all(probs > 0)
    assert set(bvals.tolist()) <= set(vals.tolist())  # tops are real records


@pytest.mark.parametrize("deterministic", [False, True])
def test_expected_waste_formula_matches_a_simulation_of_the_retry_process(deterministic):
    """Draw tasks from the buckets, allocate as the chooser does, and average the waste."""
    rng = np.random.default_rng(3)
    vals = np.sort(np.concatenate([rng.normal(100, 10, 40), rng.normal(300, 20, 40)]))
    sigs = np.ones_like(vals)  # equal significance: tasks drawn uniformly from the records
    csig, cvs = kernels._prefix(vals, sigs)
    bvals, probs = kernels._group(vals, csig, np.array([130.0, 200.0, vals[-1]]))
    means = kernels.bucket_means(vals, csig, cvs, bvals)
    formula = kernels.list_cost(bvals, probs, means, deterministic)
    draw = random.Random(5)
    cumulative = np.cumsum(probs)
    total, trials = 0.0, 40_000
    for _ in range(trials):
        peak = vals[draw.randrange(len(vals))]
        previous, waste = -1.0, 0.0
        while True:
            start = int(np.searchsorted(bvals, previous, side="right"))
            if deterministic:
                pick = start
            else:
                base = cumulative[start - 1] if start else 0.0
                pick = int(np.searchsorted(cumulative, base + draw.random() * (1 - base),
                                           side="right"))
                pick = min(pick, len(bvals) - 1)
            if bvals[pick] >= peak:
                waste += bvals[pick] - peak
                break
            waste += bvals[pick]
            previous = bvals[pick]
        total += waste
    assert total / trials == pytest.approx(formula, rel=0.03)


@given(st.floats(0.01, 1e7), st.sampled_from([1.0, 1000.0]), st.sampled_from([1.5, 2.0, 3.0]))
def test_next_step_is_the_first_power_strictly_above(previous, default, growth):
    value = next_step(default, growth, previous)
    assert value > previous
    assert value / growth <= previous * (1 + 1e-9) or value == default


@pytest.mark.parametrize("mode", ["pg", "pe", "dg", "de", "quantized"])
def test_state_predicts_above_a_failed_value_in_every_phase(mode):
    state = BucketingState(mode, 1000.0, sampling=5, rng=random.Random(1))
    for value in [400, 900, 1500, 2500, 3100, 800, 1200, 5000]:
        assert state.predict(float(value)) > value
        state.add(float(value))
    assert not state.in_sampling and state.rebuckets == 4
    assert state.predict(None) in state.values
    assert state.predict(9000.0) > 9000.0  # above the top bucket: exponential growth
