"""Each metric against values computed by hand."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core import metrics
from schedlab.core.errors import BadInputError


def test_percentile_linear_interpolation():
    # sorted [1,2,3,4]: p50 -> h = 1.5 -> 2.5; p90 -> h = 2.7 -> 3.7
    assert metrics.percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert metrics.percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)
    assert metrics.percentile([7], 99) == 7


def test_jain_index_hand_values():
    assert metrics.jain_index([1, 1, 1, 1]) == pytest.approx(1.0)
    assert metrics.jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    # (1+2+3)^2 / (3 * (1+4+9)) = 36 / 42
    assert metrics.jain_index([1, 2, 3]) == pytest.approx(36 / 42)
    assert metrics.jain_index([0, 0]) == 1.0


@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=50))
def test_jain_index_bounds(values):
    j = metrics.jain_index(values)
    assert 1 / len(values) - 1e-9 <= j <= 1 + 1e-9


def test_jain_rejects_negative_and_empty():
    with pytest.raises(BadInputError, match="allocations"):
        metrics.jain_index([1, -1])
    with pytest.raises(BadInputError):
        metrics.jain_index([])


def test_max_min_ratio():
    assert metrics.max_min_ratio([2, 4, 8]) == 4
    assert metrics.max_min_ratio([0, 3]) == math.inf
    assert metrics.max_min_ratio([0, 0]) == 1


def test_coefficient_of_variation():
    # mean 5, population std of [2,4,4,4,5,5,7,9] is 2
    assert metrics.coefficient_of_variation([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(0.4)
    assert metrics.coefficient_of_variation([3, 3]) == 0


def test_slo_attainment_and_goodput():
    lat = [10, 20, 30, 40]
    assert metrics.slo_attainment(lat, 25) == 0.5
    assert metrics.slo_attainment(lat, [5, 20, 30, 39]) == 0.5
    assert metrics.goodput(lat, 30, duration=2.0) == 1.5
    assert metrics.goodput([], 30, duration=2.0) == 0.0
    with pytest.raises(BadInputError, match="duration"):
        metrics.goodput(lat, 30, duration=0)


def test_relative_waste():
    assert metrics.relative_waste([10, 10], [5, 10]) == pytest.approx(0.25)
    assert metrics.relative_waste([0], [0]) == 0
    with pytest.raises(BadInputError, match="used"):
        metrics.relative_waste([1, 2], [1])


def test_mean_ci95_matches_t_interval():
    mean, half = metrics.mean_ci95([1.0, 2.0, 3.0])
    # std = 1, sem = 1/sqrt(3), t(0.975, 2) = 4.302652729911275
    assert mean == 2.0
    assert half == pytest.approx(4.302652729911275 / np.sqrt(3))
    assert metrics.mean_ci95([5.0]) == (5.0, 0.0)


def test_union_length_counts_overlaps_once():
    # [0,2] ∪ [1,3] = [0,3]; [5,6] separate; [5.5,5.7] inside it
    assert metrics.union_length([(5, 6), (0, 2), (1, 3), (5.5, 5.7)]) == pytest.approx(4.0)
    assert metrics.union_length([]) == 0.0


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 10)), max_size=30))
def test_union_length_bounds(pairs):
    spans = [(a, a + d) for a, d in pairs]
    covered = metrics.union_length(spans)
    assert covered <= sum(b - a for a, b in spans) + 1e-9
    assert covered >= max((b - a for a, b in spans), default=0.0) - 1e-9
