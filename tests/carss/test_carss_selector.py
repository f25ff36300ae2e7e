"""The selecting forecaster and forecast-quantile provisioning (issue 54)."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.carss.engine import run
from schedlab.carss.evaluate import crps, rolling_errors
from schedlab.carss.forecast import make_forecaster
from schedlab.carss.forecasts import Forecast
from schedlab.carss.hosts import make_hosts
from schedlab.carss.provision import Provisioner, run_objective
from schedlab.carss.selector import SelectingForecaster, gaussian_crps
from schedlab.carss.simulator import Cluster
from schedlab.carss.workloads import make_workload
from schedlab.core.errors import BadInputError

CHEAP = ("seasonal-naive", "last-value", "moving-average")


def _select(**kwargs) -> SelectingForecaster:
    return SelectingForecaster(make=make_forecaster, **kwargs)


def _seasonal(n: int, season: int = 12, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return 50 + 30 * np.sin(2 * np.pi * t / season) + rng.normal(0, 1, n)


def test_gaussian_crps_matches_the_quantile_grid() -> None:
    fc = Forecast(np.array([10.0, 20.0]), np.array([2.0, 5.0]))
    truth = np.array([11.0, 14.0])
    exact = gaussian_crps((truth - fc.mean) / fc.std, fc.std).mean()
    assert crps(fc, truth) == pytest.approx(exact, rel=0.08)


def test_selector_picks_the_member_that_fits_the_series() -> None:
    y = _seasonal(240)
    model = _select(season=12, members=CHEAP, horizon=4)
    model.fit(y[:120])
    for v in y[120:]:
        model.update(v)
    assert model.chosen == "seasonal-naive"
    frame = rolling_errors(y, list(CHEAP), 120, 4, 12, 0)
    mae = dict(zip(frame["forecaster"], frame["mae"], strict=True))
    model = _select(season=12, members=CHEAP, horizon=4)
    model.fit(y[:120])
    errors = []
    for t in range(120, y.size - 3):
        errors.append(np.abs(model.predict(4).point() - y[t : t + 4]).mean())
        model.update(y[t])
    assert np.mean(errors) <= 1.05 * min(mae.values())


def test_selector_switches_after_a_detected_change() -> None:
    rng = np.random.default_rng(1)
    seasonal = _seasonal(200)
    walk = seasonal[-1] + np.cumsum(rng.normal(0, 8, 160)) + 200  # level shift, then a walk
    y = np.maximum(np.concatenate([seasonal, walk]), 0)
    model = _select(season=12, members=CHEAP, horizon=4, combine=False)
    model.fit(y[:120])
    for v in y[120:200]:
        model.update(v)
    assert model.chosen == "seasonal-naive"
    for v in y[200:]:
        model.update(v)
    assert model.changes and model.changes[-1] >= 195
    assert model.chosen == "last-value"


def test_calibration_lowers_the_crps_of_a_mis_scaled_member() -> None:
    y = _seasonal(300)
    raw = rolling_errors(y, ["last-value"], 150, 3, 12, 0)["crps"][0]
    model = _select(season=12, members=("last-value",), horizon=3)
    model.fit(y[:150])
    scores = []
    for t in range(150, 298):
        scores.append(crps(model.predict(3), y[t : t + 3]))
        model.update(y[t])
    assert np.mean(scores) < raw
    assert not np.allclose(model.scale, 1.0)


def test_selector_rejects_bad_input() -> None:
    with pytest.raises(BadInputError, match="history"):
        _select(season=12, members=CHEAP).fit(np.array([1.0, np.nan]))
    with pytest.raises(BadInputError, match="horizon"):
        _select(season=12, members=CHEAP, horizon=0)
    with pytest.raises(BadInputError, match="predict|history"):
        _select(season=12, members=CHEAP).predict(2)


def _cluster(hosts: int = 8) -> Cluster:
    return Cluster(make_hosts(hosts), 300.0)


def test_more_hosts_for_a_higher_level_and_a_wider_spread() -> None:
    policy = Provisioner("last-value", season=12, horizon=3, quantile=0.9)
    cluster, demand = _cluster(), np.zeros(0)
    rng = np.random.default_rng(0)
    narrow = np.cumsum(rng.normal(5, 0.5, (400, 3)), axis=1)
    wide = np.cumsum(rng.normal(5, 4.0, (400, 3)), axis=1)
    high = np.cumsum(rng.normal(10, 0.5, (400, 3)), axis=1)
    k_narrow = policy._hosts_for(cluster, demand, narrow, 1500.0)
    assert policy._hosts_for(cluster, demand, wide, 1500.0) > k_narrow
    assert policy._hosts_for(cluster, demand, high, 1500.0) > k_narrow
    median = Provisioner("last-value", season=12, horizon=3, quantile=0.5)
    assert median._hosts_for(cluster, demand, wide, 1500.0) < policy._hosts_for(
        cluster, demand, wide, 1500.0
    )


def test_provisioning_runs_conserve_tasks_and_the_oracle_sees_the_burst() -> None:
    counts = np.array([1, 1, 1, 1, 30, 30, 1, 1, 1, 1] * 2, dtype=float)
    workload = make_workload(counts, 300.0, seed=3)
    hosts = make_hosts(12)
    oracle = Provisioner(oracle=workload, horizon=2)
    report = run(oracle, workload, hosts, np.ones(40), seed=0, drain=6)
    s = report.summary
    assert s["completed"] + s["unfinished"] == s["arrived"]
    hosts_chosen = [row["hosts"] for row in oracle.log]
    assert max(hosts_chosen[2:4]) > hosts_chosen[0]  # awake before the burst arrives
    assert run_objective(report.intervals, hosts, 300.0) > 0
    shadowed = Provisioner("last-value", horizon=2, shadows=("static",))
    run(shadowed, workload, hosts, np.ones(40), seed=0, drain=6)
    assert {"hosts", "static"} <= set(shadowed.log[0])


def test_provisioner_rejects_bad_settings() -> None:
    with pytest.raises(BadInputError, match="quantile"):
        Provisioner("last-value", quantile=1.5)
    with pytest.raises(BadInputError, match="util"):
        Provisioner("last-value", util=0.0)
