"""Analytic extrapolation: bisection vs exhaustive scan, the A100 figures, byte accounting."""

from __future__ import annotations

from dataclasses import replace

import pytest

from schedlab.synergyscale import NAMED_HARDWARE, make_policy, problem_for
from schedlab.synergyscale.costmodel import estimate
from schedlab.synergyscale.scaling import largest_model, plan_for_params, trainable
from schedlab.synergyscale.tiers import BudgetExceededError
from schedlab.synergyscale.workloads import gpt_family

SMALL = replace(NAMED_HARDWARE["a100-80g"], device_bytes=8 * 2**30, host_bytes=64 * 2**30,
                nvme_bytes=256 * 2**30)


@pytest.mark.parametrize("policy", ["synergyscale", "zero-offload", "no-offload"])
def test_bisection_matches_exhaustive_scan(policy: str) -> None:
    layers, _ = largest_model(SMALL, policy, batch=1, seq=512, max_layers=64)
    scan = [n for n in range(1, 65) if trainable(n, SMALL, policy, 1, 512) is not None]
    assert layers == (max(scan) if scan else 0)
    assert scan == list(range(1, layers + 1))  # feasibility is monotone in model size


def test_a100_114b() -> None:
    hw = NAMED_HARDWARE["a100-80g"]
    layers, est = plan_for_params(114.41e9, hw, "synergyscale")
    assert abs(est.params - 114.41e9) / 114.41e9 < 0.05
    assert est.device_need <= hw.device_bytes
    problem = problem_for(gpt_family(layers), hw)
    with pytest.raises(BudgetExceededError):
        make_policy("no-offload").plan(problem)


def test_bytes_moved_match_the_plan() -> None:
    """Each offloaded chunk crosses PCIe twice (forward, backward) except those kept at the
    turn; gradients cross once."""
    problem = problem_for(gpt_family(12, seq=512, batch=1), SMALL)
    plan = make_policy("zero-offload").plan(problem)
    est = estimate(problem, plan)
    numel = plan.chunk_numel(problem)
    kept = numel[-(plan.prefetch_depth + 1):]
    st = problem.state
    assert est.h2d_bytes == (2 * sum(numel) - sum(kept)) * st.dev_param
    assert est.d2h_bytes == sum(numel) * st.dev_grad
    assert est.nvme_read_bytes == 0


def test_largest_model_at_a_minimum_throughput_is_smaller() -> None:
    """The throughput floor binds: the capacity-bound largest plan is far too slow for it."""
    from schedlab.synergyscale.hardware import NAMED_HARDWARE
    from schedlab.synergyscale.scaling import largest_model

    hw = NAMED_HARDWARE["a100-80g"]
    _, capacity = largest_model(hw, "synergyscale", batch=4)
    _, floor = largest_model(hw, "synergyscale", batch=4, min_tokens_per_s=1000)
    assert floor is not None and floor.params < capacity.params
    assert 4 * 2048 / floor.iteration_s >= 1000
