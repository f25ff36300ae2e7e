"""Every scheduler and every forecaster through the same invariants (CARSS paper 07)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from schedlab.carss.engine import run
from schedlab.carss.forecast import FORECASTERS, make_forecaster
from schedlab.carss.hosts import make_hosts
from schedlab.carss.schedulers import BASELINES, COSCO_BASELINES, SCHEDULERS, make_scheduler
from schedlab.carss.simulator import Cluster
from schedlab.carss.workloads import arrival_series, make_tasks, make_workload
from schedlab.core.errors import BadInputError, UnknownNameError

FAST_NEURAL = dict(epochs=3, context=12, horizon=6)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _scheduler(name: str, seed: int = 0):
    policy = make_scheduler(
        name,
        seed=seed,
        season=12,
        horizon=3,
        samples=2,
        candidates=1,
        forecaster_kwargs=FAST_NEURAL if name != "cosim-static" else None,
        offline=20,
    )
    for attribute, small in (("steps", 20), ("epochs", 30), ("generations", 8)):
        if hasattr(policy, attribute) and name != "gobi-lite":
            setattr(policy, attribute, small)  # the same code paths, a fraction of the work
    return policy


#: COSCO's schedulers propose moves without checking RAM and let the cluster refuse them
REFUSING = (*COSCO_BASELINES, "gobi-ll")


@pytest.mark.parametrize("name", SCHEDULERS)
def test_scheduler_invariants(name: str) -> None:
    """Valid, RAM-feasible decisions; every task accounted for; same seed, same result."""
    hosts = make_hosts(4)
    series = arrival_series("mixed", 70, 10.0, 1, season=12)
    workload = make_workload(series.counts[40:], 300.0, 2)
    cluster = Cluster(hosts, 300.0)
    policy = _scheduler(name)
    policy.prepare(series.counts[:40])
    rng = np.random.default_rng(0)
    for batch in workload.batches[:8]:
        cluster.admit(batch.copy())
        policy.arrive(batch)
        decision = policy.decide(cluster, rng)
        placement = getattr(decision, "placement", decision)
        assert placement.shape == (len(cluster.tasks),)
        assert placement.min(initial=-1) >= -1 and placement.max(initial=0) < hosts.n
        moved, refused = cluster.apply_decision(decision)
        assert refused == 0 or name in REFUSING, "schedulers must only propose RAM-feasible moves"
        assert np.all(cluster.ram_used() <= hosts.ram + 1e-6)
        policy.feedback(cluster, cluster.step(moved, refused))
    first = run(_scheduler(name), workload, hosts, series.counts[:40], seed=5, drain=4).summary
    again = run(_scheduler(name), workload, hosts, series.counts[:40], seed=5, drain=4).summary
    assert first["completed"] + first["unfinished"] == first["arrived"]
    assert first["energy_kwh"] > 0
    for key in ("energy_kwh", "avg_response_s", "sla_violation_rate", "migrations"):
        assert first[key] == again[key]


def test_waiting_tasks_get_placed_when_there_is_room() -> None:
    """On an empty, roomy cluster no heuristic leaves a task waiting."""
    for name in ("least-loaded", "edf", "best-fit", "round-robin", "random"):
        cluster = Cluster(make_hosts(8), 300.0)
        cluster.admit(make_tasks(5, 0.0, 0, np.random.default_rng(0)))
        placement = _scheduler(name).decide(cluster, np.random.default_rng(0))
        assert (placement >= 0).all(), name


def test_edf_serves_the_tightest_deadline_first() -> None:
    """With room for one task only, EDF gives it to the task closest to its deadline."""
    cluster = Cluster(make_hosts(1), 300.0)
    cluster.admit(make_tasks(3, 0.0, 0, np.random.default_rng(0)))
    cluster.tasks.ram[:] = cluster.hosts.ram[0] * 0.6  # only one fits
    cluster.tasks.deadline[:] = [900.0, 300.0, 600.0]
    placement = _scheduler("edf").decide(cluster, np.random.default_rng(0))
    assert placement.tolist() == [-1, 0, -1]


def test_registry_names() -> None:
    assert set(BASELINES) < set(SCHEDULERS)
    with pytest.raises(UnknownNameError, match="valid"):
        make_scheduler("nope")
    with pytest.raises(UnknownNameError):
        make_forecaster("nope")


@pytest.mark.parametrize("name", FORECASTERS)
def test_forecaster_invariants(name: str) -> None:
    """Non-negative forecasts with ordered quantiles and integer samples of the right shape."""
    series = arrival_series("regime", 60, 20.0, 0, min_regime=10, max_regime=20).counts
    kwargs = FAST_NEURAL if name in ("adaptive", "transformer", "lstm") else {}
    model = make_forecaster(name, season=12, seed=0, **kwargs)
    model.fit(series[:40])
    for value in series[40:]:
        model.update(float(value))
    fc = model.predict(4)
    assert fc.point().shape == (4,) and np.all(fc.point() >= 0)
    assert np.all(fc.quantile(0.1) <= fc.quantile(0.9) + 1e-9)
    draws = fc.sample(5, np.random.default_rng(0))
    assert draws.shape == (5, 4) and draws.dtype.kind == "i" and draws.min() >= 0


def test_static_replay_repeats_its_script() -> None:
    model = make_forecaster("static")
    model.fit(np.array([1.0, 2.0, 3.0]))
    assert model.predict(4).point().tolist() == [1.0, 2.0, 3.0, 1.0]


def test_simple_forecasters_are_exact_on_their_own_model() -> None:
    y = np.tile(np.arange(6.0), 4)
    seasonal = make_forecaster("seasonal-naive", season=6)
    seasonal.fit(y)
    assert seasonal.predict(6).point().tolist() == list(np.arange(6.0))
    flat = make_forecaster("ets")
    flat.fit(np.full(30, 7.0))
    assert np.allclose(flat.predict(3).point(), 7.0)
    trend = make_forecaster("arima")
    trend.fit(5.0 + 2.0 * np.arange(40))
    assert np.allclose(trend.predict(3).point(), [85.0, 87.0, 89.0])


def test_neural_forecaster_needs_enough_history() -> None:
    model = make_forecaster("transformer", **FAST_NEURAL)
    with pytest.raises(BadInputError, match="needs at least"):
        model.fit(np.ones(5))


def test_adaptive_forecaster_detects_a_level_shift_and_retrains() -> None:
    rng = np.random.default_rng(0)
    series = np.concatenate([rng.poisson(10, 60), rng.poisson(60, 40)])
    model = make_forecaster("adaptive", season=12, seed=0, **FAST_NEURAL)
    model.fit(series[:40])
    for value in series[40:]:
        model.update(float(value))
    assert any(55 <= c <= 66 for c in model.changes)
    assert model.tunes >= 1
    assert model.predict(2).point()[0] > 30  # it forecasts the new level, not the old one
