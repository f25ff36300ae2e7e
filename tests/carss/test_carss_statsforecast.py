"""statsforecast's automatic models as CARSS forecasters, and the input guards of issue 32."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.carss.forecast import make_forecaster
from schedlab.carss.workloads import MAX_TASKS, read_arrivals, scale_counts
from schedlab.core.errors import BadInputError, MissingDependencyError

statsforecast = pytest.importorskip("statsforecast", reason="statsforecast not installed")


def _seasonal(n: int = 240, season: int = 24) -> np.ndarray:
    t = np.arange(n)
    return 50 + 20 * np.sin(2 * np.pi * t / season)


@pytest.mark.parametrize("name", ["sf-mstl", "sf-autoets", "sf-autotheta", "sf-autoarima"])
def test_statsforecast_models_follow_the_protocol(name):
    model = make_forecaster(name, season=24, seed=0)
    y = _seasonal()
    model.fit(y[:120])
    for value in y[120:130]:
        model.update(float(value))
    fc = model.predict(6)
    assert fc.mean.shape == (6,) and (fc.std > 0).all() and (fc.point() >= 0).all()
    assert fc.quantile(0.9)[0] >= fc.quantile(0.1)[0]


@pytest.mark.parametrize("name", ["sf-mstl", "sf-autoets", "sf-autotheta", "sf-autoarima"])
def test_a_history_shorter_than_two_seasons_still_forecasts(name):
    """Too short for the season: the model falls back to a non-seasonal fit (MSTL with
    season 1 would need the optional supersmoother package)."""
    model = make_forecaster(name, season=24, seed=0)
    y = _seasonal(40)
    model.fit(y[:30])
    model.update(float(y[30]))
    fc = model.predict(4)
    assert fc.mean.shape == (4,) and np.isfinite(fc.mean).all() and (fc.std > 0).all()


def test_predict_before_fit_is_a_clear_error():
    with pytest.raises(BadInputError, match="fit"):
        make_forecaster("sf-autoets", season=24, seed=0).predict(3)


def test_mstl_learns_a_clean_season():
    """A noiseless daily cycle: MSTL's forecast must be within 1 % of the truth."""
    y = _seasonal(264)
    model = make_forecaster("sf-mstl", season=24, seed=0)
    model.fit(y[:240])
    assert np.abs(model.predict(24).point() - y[240:264]).max() < 0.01 * y.mean()


def test_our_seasonal_naive_equals_statsforecasts():
    """The walk-forward protocol's own naive model agrees with the peer's on the same data."""
    from statsforecast.models import SeasonalNaive

    rng = np.random.default_rng(0)
    y = rng.poisson(40, 200).astype(float)
    ours = make_forecaster("seasonal-naive", season=24, seed=0)
    ours.fit(y)
    peer = SeasonalNaive(season_length=24).fit(y).predict(12)["mean"]
    assert np.allclose(ours.predict(12).point(), peer)


def test_missing_statsforecast_is_one_clear_error(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name.startswith("statsforecast"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(MissingDependencyError, match=r"schedlab\[forecast\]"):
        make_forecaster("sf-mstl", season=24)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -1.0])
def test_bad_scales_are_refused(scale):
    with pytest.raises(BadInputError, match="scale"):
        scale_counts(np.array([3, 4]), scale)


def test_a_scale_that_would_exhaust_memory_is_refused():
    with pytest.raises(BadInputError, match="at most"):
        scale_counts(np.array([10, 10]), MAX_TASKS)
    assert scale_counts(np.array([1, 2]), 2.5).tolist() == [2, 5]


@pytest.mark.parametrize("interval", [float("nan"), 0.0, -5.0, 1e-6])
def test_bad_or_absurd_intervals_are_refused(tmp_path, interval):
    path = tmp_path / "t.csv"
    path.write_text("timestamp\n0\n100\n86400\n")
    with pytest.raises(BadInputError, match="interval"):
        read_arrivals(path, "timestamp", interval)
