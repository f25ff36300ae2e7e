"""Every balancer through the same invariants, the dispatcher, and LPT against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.hip_dfpt.policies import BALANCERS, Dispatcher, Plan, lpt, make_balancer
from schedlab.hip_dfpt.tasks import TaskFeatures


def _features(n: int, seed: int) -> TaskFeatures:
    rng = np.random.default_rng(seed)
    return TaskFeatures(rng.integers(1, 129, n), rng.integers(1, 60, n), rng.integers(1, 6, n),
                        rng.integers(0, 2, n), np.sort(rng.integers(0, max(1, n // 4), n)))


def _drain(plan: Plan, streams: int, seed: int = 0) -> list[tuple[int, int, int]]:
    """Pull every task in a shuffled (device, stream) order; return (device, stream, task)."""
    dispatcher = Dispatcher(plan, streams, seed)
    rng = np.random.default_rng(seed)
    live = [(d, s) for d in range(plan.devices) for s in range(streams)]
    pulled = []
    while live:
        d, s = live[int(rng.integers(len(live)))]
        item = dispatcher.next(d, s)
        if item is None:
            live.remove((d, s))
        else:
            pulled.append((d, s, item.task))
    return pulled


@pytest.mark.parametrize("name", list(BALANCERS))
@given(n=st.integers(0, 120), devices=st.integers(1, 9), streams=st.integers(1, 4),
       seed=st.integers(0, 10_000))
def test_every_task_runs_exactly_once(name: str, n: int, devices: int, streams: int,
                                      seed: int) -> None:
    features = _features(n, seed)
    predicted = np.random.default_rng(seed).lognormal(0, 1, n)
    plan = make_balancer(name).plan(features, predicted, devices, streams)
    assert plan.devices == devices
    planned = np.concatenate([plan.device_tasks(d) for d in range(devices)]) if n else []
    assert sorted(planned) == list(range(n))
    pulled = [t for _, _, t in _drain(plan, streams, seed)]
    assert sorted(pulled) == list(range(n))


@pytest.mark.parametrize("name", list(BALANCERS))
def test_bad_arguments_are_config_errors(name: str) -> None:
    features = _features(10, 0)
    with pytest.raises(ConfigError):
        make_balancer(name).plan(features, np.ones(10), 0, 1)
    with pytest.raises(ConfigError):
        make_balancer(name).plan(features, np.ones(9), 2, 1)


def test_unknown_balancer_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownNameError, match="hip-dfpt"):
        make_balancer("random")


def test_static_plans_keep_tasks_on_their_device() -> None:
    features = _features(60, 1)
    for name in ("hip-dfpt", "round-robin", "count-balanced", "lpt-points"):
        plan = make_balancer(name).plan(features, np.ones(60), 3, 2)
        owner = {int(t): d for d in range(3) for t in plan.device_tasks(d)}
        assert all(owner[t] == d for d, _, t in _drain(plan, 2))


def test_work_stealing_moves_work_from_a_loaded_device() -> None:
    plan = Plan([[np.arange(20)], [np.array([], dtype=np.int64)]], shared_streams=True,
                steal=True)
    dispatcher = Dispatcher(plan, 1)
    first = dispatcher.next(1, 0)  # device 1 has nothing: it must steal
    assert first is not None and first.steal and first.migrated
    assert dispatcher.steals == 1
    # the victim keeps its front: its next task is still task 0
    assert dispatcher.next(0, 0).task == 0


def test_hip_dfpt_orders_each_device_longest_first() -> None:
    features = _features(40, 2)
    predicted = np.random.default_rng(2).lognormal(0, 1, 40)
    plan = make_balancer("hip-dfpt").plan(features, predicted, 3, 2)
    for d in range(3):
        costs = predicted[plan.device_tasks(d)]
        assert np.all(np.diff(costs) <= 0)


def _brute_force_makespan(costs: np.ndarray, bins: int) -> float:
    best = np.inf
    for owners in itertools.product(range(bins), repeat=len(costs)):
        best = min(best, np.bincount(owners, weights=costs, minlength=bins).max())
    return float(best)


@given(st.lists(st.floats(0.01, 10), min_size=1, max_size=7), st.integers(2, 3))
def test_lpt_is_within_grahams_bound_of_the_optimum(costs: list[float], bins: int) -> None:
    costs = np.array(costs)
    groups = lpt(costs, bins)
    makespan = max(costs[g].sum() for g in groups)
    optimum = _brute_force_makespan(costs, bins)
    assert makespan <= (4 / 3 - 1 / (3 * bins)) * optimum + 1e-9
    assert sorted(np.concatenate(groups)) == list(range(len(costs)))


def test_model_guided_beats_count_balancing_on_skewed_costs() -> None:
    """Heavy tasks clustered in one region: contiguous equal counts cannot balance them."""
    n, devices = 400, 8
    features = _features(n, 3)
    cost = np.where(np.arange(n) < 50, 20.0, 1.0)
    loads = {}
    for name in ("hip-dfpt", "count-balanced"):
        plan = make_balancer(name).plan(features, cost, devices, 1)
        per = np.array([cost[plan.device_tasks(d)].sum() for d in range(devices)])
        loads[name] = per.max() / per.mean()
    assert loads["hip-dfpt"] < 1.05 < loads["count-balanced"]
