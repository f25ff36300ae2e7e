"""Metrics run inside every experiment's inner loop; keep them cheap on large vectors."""

import numpy as np

from schedlab.core.metrics import jain_index, percentile, slo_attainment


def test_jain_index_1m(benchmark):
    x = np.random.default_rng(0).exponential(size=1_000_000)
    assert 0 < benchmark(jain_index, x) <= 1


def test_p99_1m(benchmark):
    x = np.random.default_rng(0).exponential(size=1_000_000)
    assert benchmark(percentile, x, 99) > 0


def test_slo_attainment_1m(benchmark):
    x = np.random.default_rng(0).exponential(size=1_000_000)
    assert 0 < benchmark(slo_attainment, x, 1.0) < 1
