"""The analytical estimator against the discrete-event simulator, and its building blocks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.harp import MODELS, ArchConfig, build_workload, make_mapper, make_scheduler
from schedlab.harp.estimator import estimate
from schedlab.harp.experiment import STATED_ERROR
from schedlab.harp.plan import Plan, Stage, even_bounds
from schedlab.harp.simulator import simulate


@given(st.integers(1, 40), st.integers(1, 8), st.floats(0, 50), st.floats(0.1, 20),
       st.floats(0, 2), st.integers(1, 5))
def test_single_stage_recurrence_is_exact(items, servers, fixed, per_row, growth, chunk):
    """One stage on its own pool with equal chunks: durations never decrease, items finish in
    row order, so the k-minus-servers recurrence is exactly what the event simulation does."""
    tokens = items * chunk
    stage = Stage("s", "static", "p", even_bounds(tokens, items), fixed, per_row, growth)
    plan = Plan("test", tokens, [stage], {"p": servers}).validate()
    assert estimate(plan).latency_ns == pytest.approx(simulate(plan).latency_ns, rel=1e-9)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_estimator_within_stated_error_of_simulator_for_harp(model: str) -> None:
    """The issue's requirement, on every built-in model (HARP schedule, each mapping)."""
    work, arch = build_workload(model, 48), ArchConfig()
    for strategy in ("latency", "area", "balanced"):
        mapping = make_mapper(strategy, "levels").map(work, arch)
        plan = make_scheduler("harp").plan(work, mapping, arch)
        sim, est = simulate(plan).latency_ns, estimate(plan).latency_ns
        assert abs(est - sim) / sim <= STATED_ERROR, (model, strategy, sim, est)


def test_estimator_is_exact_for_non_pipelined() -> None:
    """With a barrier after every op there is no contention to approximate."""
    work, arch = build_workload("bert-base", 32), ArchConfig()
    mapping = make_mapper("area", "levels").map(work, arch)
    plan = make_scheduler("non-pipelined").plan(work, mapping, arch)
    assert estimate(plan).latency_ns == pytest.approx(simulate(plan).latency_ns, rel=1e-9)


def test_busy_time_is_the_same_in_both_engines() -> None:
    work, arch = build_workload("gpt2-small", 16), ArchConfig()
    plan = make_scheduler("harp").plan(work, make_mapper("latency").map(work, arch), arch)
    assert estimate(plan).busy_ns == pytest.approx(simulate(plan).busy_ns)
