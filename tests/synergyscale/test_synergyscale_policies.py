"""Every policy through the same invariants; the runtime's bit-identity to in-memory training."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.synergyscale import (
    BUILTIN_MODELS,
    POLICIES,
    BudgetExceededError,
    Hardware,
    estimate,
    make_policy,
    problem_for,
    synthetic_batches,
    train,
    train_reference,
)
from schedlab.synergyscale.plan import memory_needs

#: a fixed CPU-like machine so plans do not depend on this host's measured speed
FIXED = Hardware("fixed", 2 * 2**20, 64 * 2**20, 2**30, 5e10, 5e9, 5e9, 1e9, 5e8, 5e7, 5e7,
                 task_overhead=5e-5, mixed_precision=False)
TINY = BUILTIN_MODELS["gpt-tiny"]
STATES = problem_for(TINY, FIXED).params * 16


def budgets_for(policy: str) -> tuple[int, int]:
    """Device and host budgets under which ``policy`` must offload (or, for no-offload, fit)."""
    if policy == "no-offload":
        return 4 * STATES, 4 * STATES
    host = 4 * STATES if policy == "zero-offload" else int(0.6 * STATES)
    return int(0.45 * STATES), host


def fixed(device: int, host: int, nvme: int = 2**30) -> Hardware:
    from dataclasses import replace

    return replace(FIXED, device_bytes=device, host_bytes=host, nvme_bytes=nvme)


@pytest.mark.parametrize("name", POLICIES)
def test_plan_invariants(name: str) -> None:
    device, host = budgets_for(name)
    problem = problem_for(TINY, fixed(device, host))
    plan = make_policy(name).plan(problem)
    assert [s for g in plan.groups for s in g] == list(range(TINY.n_stages))
    assert len(plan.placement) == len(plan.groups)
    needs = memory_needs(problem, plan)
    assert needs["device"] <= device and needs["host"] <= host
    est = estimate(problem, plan)
    assert est.iteration_s > 0 and 0.0 <= est.device_idle <= 1.0
    offloaded = [p for p in plan.placement if p != "device"]
    assert (est.h2d_bytes > 0) == bool(offloaded)


@pytest.mark.parametrize("name", POLICIES)
def test_training_bit_identical_to_in_memory(name: str) -> None:
    """Same seed, same data order: the same losses and the same final weights, bit for bit."""
    batches = synthetic_batches(TINY, 5, seed=3)
    losses, params = train_reference(TINY, batches, seed=3)
    device, host = budgets_for(name)
    report = train(TINY, batches, name, device, host, hardware=fixed(device, host), seed=3,
                   keep_params=True)
    assert report.losses == losses
    for stage, ref in enumerate(params):
        for key, value in ref.items():
            assert torch.equal(report.final_params[stage][key], value), (stage, key)
    assert report.device_peak <= device
    if name != "no-offload":
        assert report.device_peak < STATES  # the device never held the whole model
        assert report.bytes_moved["h2d"] > 0


def test_synergyscale_uses_nvme_when_host_is_small() -> None:
    device, host = budgets_for("synergyscale")
    report = train(TINY, synthetic_batches(TINY, 2, 0), "synergyscale", device, host,
                   hardware=fixed(device, host))
    assert report.plan["chunks_nvme"] > 0
    assert report.bytes_moved["nvme_read"] > 0 and report.bytes_moved["nvme_write"] > 0


def test_no_offload_fails_past_the_budget() -> None:
    with pytest.raises(BudgetExceededError) as info:
        make_policy("no-offload").plan(problem_for(TINY, fixed(int(0.45 * STATES), STATES)))
    assert info.value.field == "device_budget"


@pytest.mark.parametrize("name", POLICIES)
def test_budget_below_one_layer_is_a_clear_error(name: str) -> None:
    with pytest.raises(ConfigError, match="cannot hold even one layer"):
        make_policy(name).plan(problem_for(TINY, fixed(10_000, STATES)))


def test_unknown_policy_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError, match="synergyscale"):
        make_policy("deepspeed")


@settings(max_examples=25)
@given(device_frac=st.floats(0.3, 1.2), host_frac=st.floats(0.4, 3.0))
def test_synergyscale_never_predicted_slower_than_a_feasible_baseline(
        device_frac: float, host_frac: float) -> None:
    """The auto-tuner's choice is at least as fast (by its own model) as any baseline that fits."""
    problem = problem_for(TINY, fixed(int(device_frac * STATES), int(host_frac * STATES)))
    try:
        ours = estimate(problem, make_policy("synergyscale").plan(problem)).iteration_s
    except BudgetExceededError:
        for name in ("zero-offload", "zero-infinity", "no-offload"):
            with pytest.raises((BudgetExceededError, ConfigError)):
                make_policy(name).plan(problem)
        return
    except ConfigError:
        return
    for name in ("zero-offload", "zero-infinity", "no-offload"):
        try:
            theirs = estimate(problem, make_policy(name).plan(problem)).iteration_s
        except (BudgetExceededError, ConfigError):
            continue
        assert ours <= theirs * 1.0001, name


def test_autotuner_matches_brute_force_over_its_search_space() -> None:
    """The chosen (chunk size, depth) is the fastest feasible candidate, by exhaustive search."""
    from schedlab.synergyscale.plan import group_stages
    from schedlab.synergyscale.policies import SynergyScale

    problem = problem_for(BUILTIN_MODELS["gpt-small"], fixed(8 * 2**20, 12 * 2**20))
    policy = SynergyScale()
    chosen = policy.plan(problem)
    best = float("inf")
    largest = max(problem.stage_numel)
    for mult in policy.chunk_multiples:
        for depth in policy.depths:
            groups = group_stages(problem.stage_numel, largest * mult)
            plan = policy.place(problem, groups, depth, largest * mult)
            if plan is not None:
                best = min(best, estimate(problem, plan).iteration_s)
    assert estimate(problem, chosen).iteration_s == pytest.approx(best)
