"""Composition, the device simulator and the scale study: conservation and limiting cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import ConfigError
from schedlab.hip_dfpt.policies import BALANCERS, Plan, make_balancer
from schedlab.hip_dfpt.scale import scale_study
from schedlab.hip_dfpt.simulator import (
    DeviceModel,
    TaskCosts,
    compose_features,
    simulate,
    task_costs,
    with_branches,
)
from schedlab.hip_dfpt.synthetic import synthetic_system
from schedlab.hip_dfpt.tasks import (
    CompositionConfig,
    TaskFeatures,
    compose_batches,
    octree_batches,
    plan_composition,
)


def _features(n: int, seed: int) -> TaskFeatures:
    rng = np.random.default_rng(seed)
    return TaskFeatures(rng.integers(1, 129, n), rng.integers(1, 300, n), rng.integers(1, 6, n),
                        np.zeros(n, np.int64), np.sort(rng.integers(0, max(1, n // 5), n)))


@given(n=st.integers(1, 300), low=st.floats(10, 5000), factor=st.floats(1.5, 20),
       seed=st.integers(0, 10_000))
def test_composition_covers_every_task_once(n: int, low: float, factor: float,
                                            seed: int) -> None:
    f = _features(n, seed)
    config = CompositionConfig(low, low * factor)
    starts, parts = plan_composition(f, config)
    assert starts[0] == 0 and np.all(np.diff(starts) > 0) and (parts >= 1).all()
    ends = np.append(starts[1:], n)
    for start, end, k in zip(starts, ends, parts, strict=True):
        assert len(set(f.key[start:end].tolist())) == 1  # never merges across neighbourhoods
        total = f.parallelism[start:end].sum()
        assert k == max(1, int(np.ceil(total / config.max_parallelism)))
        if end - start > 1:
            assert f.parallelism[start:end - 1].sum() < config.min_parallelism
    batches = [np.arange(10 * i, 10 * i + int(g)) for i, g in enumerate(f.n_points)]
    points = np.sort(np.concatenate(compose_batches(batches, f, config)))
    assert np.array_equal(points, np.sort(np.concatenate(batches)))


@given(n=st.integers(1, 400), seed=st.integers(0, 1000))
def test_simulated_composition_conserves_points(n: int, seed: int) -> None:
    device = DeviceModel()
    f = with_branches(_features(n, seed), device)
    composed = compose_features(f, device, devices=4, streams=2)
    assert composed.n_points.sum() == f.n_points.sum() and (composed.n_points >= 1).all()
    assert (composed.n_basis >= f.n_basis.min()).all()


def test_octree_batches_partition_the_grid() -> None:
    coords = np.random.default_rng(0).normal(size=(3000, 3)) * 3
    batches = octree_batches(coords, 2.0, 50)
    assert sorted(np.concatenate(batches).tolist()) == list(range(3000))
    assert max(len(b) for b in batches) <= 50
    with pytest.raises(ConfigError):
        octree_batches(coords, 0.0, 50)


@pytest.mark.parametrize("name", list(BALANCERS))
def test_simulation_conserves_work_and_bounds_time(name: str) -> None:
    device = DeviceModel()
    f = with_branches(synthetic_system(300, 0, 4.0), device)
    costs = task_costs(f, device, 1)
    plan = make_balancer(name).plan(f, costs.kernel, 6, 3)
    outcome = simulate(plan, costs, 3, device, seed=0)
    assert outcome.device_full.sum() == pytest.approx(costs.full.sum())
    assert (outcome.device_time >= outcome.device_full - 1e-15).all()
    assert 1.0 <= outcome.balance and 0 < outcome.utilisation <= 1 + 1e-9
    assert 0 < outcome.occupation <= 1 + 1e-9


def test_one_stream_runs_kernels_back_to_back() -> None:
    costs = TaskCosts(kernel=np.array([2.0, 3.0]), full=np.array([1.0, 1.5]),
                      migrate=np.zeros(2), occupancy=np.array([0.5, 0.5]))
    device = DeviceModel(launch_overhead=0.0)
    outcome = simulate(Plan([[np.array([0, 1])]]), costs, 1, device)
    assert outcome.device_time[0] == pytest.approx(5.0)
    assert outcome.occupation == pytest.approx(0.5)


def test_streams_share_capacity_when_oversubscribed() -> None:
    """Two full-occupancy kernels on two streams take as long as back to back."""
    costs = TaskCosts(kernel=np.array([1.0, 1.0]), full=np.array([1.0, 1.0]),
                      migrate=np.zeros(2), occupancy=np.ones(2))
    device = DeviceModel(launch_overhead=0.0)
    plan = Plan([[np.array([0]), np.array([1])]])
    assert simulate(plan, costs, 2, device).device_time[0] == pytest.approx(2.0)
    half = TaskCosts(costs.kernel * 2, costs.full, costs.migrate, np.full(2, 0.5))
    assert simulate(plan, half, 2, device).device_time[0] == pytest.approx(2.0)
    assert simulate(plan, half, 2, device).occupation == pytest.approx(1.0)


def test_synthetic_system_is_valid_and_seeded() -> None:
    a, b = synthetic_system(500, 3), synthetic_system(500, 3)
    assert np.array_equal(a.n_basis, b.n_basis)
    assert (a.n_points >= 1).all() and (a.n_points <= 128).all() and (a.n_basis >= 5).all()
    assert len(np.unique(a.key)) == 500
    with pytest.raises(ConfigError):
        synthetic_system(0, 0)


def test_scale_study_rows_and_method_wins_balance() -> None:
    report = scale_study(atoms=1500, devices=24, streams=2, seed=0)
    rows = {r["config"]: r for r in report.rows}
    assert {"sota", "sota+streams", "hip-dfpt"} <= set(rows)
    assert len(rows) == 2 + len(BALANCERS)
    assert rows["hip-dfpt"]["balance"] < rows["micro-tasks+count-balanced"]["balance"]
    assert rows["hip-dfpt"]["occupation"] > rows["sota"]["occupation"]
    assert set(report.model_error) == {"branch-hybrid", "global-linear", "points"}
