"""Fusion model properties, EJPP optimality (ILP vs brute force), the GPU check on a CPU."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import ConfigError
from schedlab.couchsurfer import (
    FusionParams,
    Thresholds,
    brute_force,
    evaluate,
    fit_params,
    host_slowdown,
    pair_rates,
    place_threshold,
    random_instance,
    solve_ilp,
)
from schedlab.couchsurfer.ejpp import surfer_rates

util = st.floats(0.01, 1.0)


@given(util, util, st.sampled_from(["jfm", "priority", "equal"]), st.floats(0.0, 0.5))
def test_rates_are_shares(hu: float, su: float, mode: str, guard: float) -> None:
    host, surfer = pair_rates(hu, su, mode, FusionParams(guard=guard))
    assert 0 < host <= 1 and 0 <= surfer <= 1


@given(util, util, st.floats(0.0, 0.5), st.floats(0.0, 1.0))
def test_jfm_keeps_the_predicted_slowdown_within_the_guard(hu: float, su: float, guard: float,
                                                           beta: float) -> None:
    # on the *predicted* interference (truth = prediction) the controller's choice holds
    params = FusionParams(guard=guard, priority_residual=beta)
    assert host_slowdown(hu, su, "jfm", params) <= guard + 1e-9
    assert host_slowdown(hu, su, "jfm", params) <= host_slowdown(hu, su, "priority", params) \
        + 1e-12


def test_jfm_exceeds_the_guard_when_the_truth_is_worse_than_predicted() -> None:
    # the guard is a mechanism acting on a prediction, not a clamp on the accounting
    params = FusionParams(guard=0.05)
    predicted = host_slowdown(0.6, 0.6, "jfm", params)
    worse = host_slowdown(0.6, 0.6, "jfm", params, truth=(0.45, 0.9))
    assert predicted <= 0.05 < worse


@given(util, util)
def test_a_looser_guard_never_slows_the_surfer(hu: float, su: float) -> None:
    rates = [pair_rates(hu, su, "jfm", FusionParams(guard=g))[1] for g in (0.01, 0.05, 0.2)]
    assert rates == sorted(rates)


def test_fusion_params_are_validated() -> None:
    for bad in (dict(guard=-1), dict(efficiency=0), dict(priority_residual=2),
                dict(guard_margin=1.0), dict(coef=(1.0,)), dict(control_period_s=math.nan)):
        with pytest.raises(ConfigError):
            FusionParams(**bad)
    with pytest.raises(ConfigError):
        pair_rates(0.5, 0.5, "mps", FusionParams())
    with pytest.raises(ConfigError):
        Thresholds(max_host_util=0)


def test_fit_params_recovers_the_priority_residual() -> None:
    rng = np.random.default_rng(1)
    samples = []
    for _ in range(12):
        eq = rng.uniform(0.05, 0.8)
        samples.append(dict(equal_slowdown=eq, priority_slowdown=0.3 * eq))
    assert fit_params(samples).priority_residual == pytest.approx(0.3, rel=1e-9)
    with pytest.raises(ConfigError):
        fit_params([])
    with pytest.raises(ConfigError, match="equal_slowdown"):
        fit_params([dict(priority_slowdown=0.1)])


@given(st.integers(0, 10_000))
def test_vectorised_rates_match_the_scalar_model(seed: int) -> None:
    inst = random_instance(np.random.default_rng(seed), 2, 4, 3,
                           thresholds=Thresholds(max_host_util=1.0, mem_headroom_gib=0,
                                                 min_surfer_rate=0.0))
    for e in range(inst.n_jobs):
        rates = surfer_rates(inst, e)
        for g in np.flatnonzero(~np.isnan(rates)):
            if inst.has_host[g]:
                expected = pair_rates(inst.host_util[g], inst.job_util[e], "jfm", inst.fusion)[1]
            else:
                expected = 1.0
            assert rates[g] == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(8))
def test_ilp_is_optimal_and_threshold_is_feasible(seed: int) -> None:
    inst = random_instance(np.random.default_rng(seed), nodes=2, gpus_per_node=2, jobs=3)
    _, best = brute_force(inst)
    exact = solve_ilp(inst)
    assert evaluate(inst, exact) == pytest.approx(best, abs=1e-6)
    greedy = evaluate(inst, place_threshold(inst))
    assert math.isfinite(greedy) and greedy <= best + 1e-6


def test_evaluate_rejects_infeasible_plans() -> None:
    inst = random_instance(np.random.default_rng(0), nodes=2, gpus_per_node=2, jobs=2,
                           thresholds=Thresholds(max_host_util=1.0, min_surfer_rate=0.0,
                                                 mem_headroom_gib=0.0))
    inst.slot_free[:] = True
    inst.job_gpus[:] = 1
    assert evaluate(inst, {0: (0,), 1: (0,)}) == -math.inf       # shared GPU
    assert evaluate(inst, {0: (0, 1)}) == -math.inf              # wrong gang size


def test_gpu_check_runs_two_processes_on_cpu() -> None:
    pytest.importorskip("torch")
    from schedlab.couchsurfer.gpucheck import measure_pair

    row = measure_pair(device="cpu", steps=3, host_width=64, surfer_width=32, host_gap_ms=1.0)
    assert row["host_alone_s"] > 0 and row["surfer_equal_s"] > 0
    assert row["host_priority_s"] > 0 and 0 <= row["host_util"] <= 1
    assert {"equal_slowdown", "priority_slowdown", "mps"} <= set(row)


@pytest.mark.gpu
def test_gpu_check_on_cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from schedlab.couchsurfer.gpucheck import sweep

    rows = sweep(device="cuda", steps=100)
    assert all(r["equal_slowdown"] > -0.5 for r in rows)
    fit_params(rows)
