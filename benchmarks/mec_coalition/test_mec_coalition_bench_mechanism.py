"""Speed of the mechanism at the issue's scale: 125 cloudlets, 50 models, 800 users (< 10 s)."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.mec_coalition import get_policy, synthetic
from schedlab.mec_coalition.heuristics import randomized_rounding


@pytest.fixture(scope="module")
def market():
    return synthetic(125, 50, 800, seed=0)


def test_mec_coalition_bench_coalition_125_50_800(benchmark, market):
    """Randomized algorithm + coalition formation end to end (target: under 10 s)."""
    plan = benchmark.pedantic(get_policy("coalition").plan, args=(market, 0), rounds=3,
                              iterations=1)
    assert plan.info["converged"]


def test_mec_coalition_bench_rounding_grand_125_50_800(benchmark, market):
    """The randomized algorithm alone on the grand coalition (one LP with all users)."""
    idx = np.arange(market.cand.size)
    benchmark.pedantic(randomized_rounding, args=(market, idx, 0), rounds=3, iterations=1)


def test_mec_coalition_bench_market_build(benchmark):
    """Building the market and its candidate triples."""
    benchmark(synthetic, 125, 50, 800, 1)
