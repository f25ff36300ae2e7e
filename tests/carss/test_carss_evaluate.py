"""Measurement procedures: walk-forward forecast errors and co-simulator prediction error."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.carss.evaluate import cosim_errors, rolling_errors, summarise_cosim
from schedlab.carss.hosts import make_hosts
from schedlab.carss.workloads import arrival_series, make_workload
from schedlab.core.errors import BadInputError


def test_rolling_errors_are_zero_for_an_exact_forecaster() -> None:
    frame = rolling_errors(
        np.full(50, 5.0), ["last-value", "static", "seasonal-naive"], 20, 3, 12, 0
    )
    assert frame["mae"].to_list() == [0.0, 0.0, 0.0]
    assert frame["coverage80"].min() == 1.0
    with pytest.raises(BadInputError):
        rolling_errors(np.ones(10), ["last-value"], 9, 3, 12, 0)


def test_rolling_errors_rank_a_shifted_series_sensibly() -> None:
    y = np.concatenate([np.full(40, 10.0), np.full(40, 50.0)])
    frame = rolling_errors(y, ["last-value", "static"], 30, 2, 12, 0)
    mae = dict(zip(frame["forecaster"], frame["mae"], strict=True))
    assert mae["last-value"] < mae["static"]  # static replay keeps predicting the old level


def test_cosim_errors_compare_prediction_with_what_happened() -> None:
    series = arrival_series("regime", 80, 12.0, 0, min_regime=10, max_regime=20)
    workload = make_workload(series.counts[50:], 300.0, 1)
    points = cosim_errors(
        workload,
        make_hosts(4),
        series.counts[:50],
        ["static", "last-value"],
        horizon=3,
        samples=2,
        season=12,
        seed=0,
    )
    assert set(points["forecaster"]) == {"static", "last-value"}
    assert points["interval"].max() <= 30 - 3
    assert (points["true_energy_j"] > 0).all() and (points["pred_energy_j"] > 0).all()
    summary = summarise_cosim(points)
    assert summary["points"].to_list() == [14, 14]
    assert (summary["response_mae_s"] >= 0).all()
