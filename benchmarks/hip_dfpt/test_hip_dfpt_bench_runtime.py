"""Speed of HIP-DFPT's hot paths (the issue names no numeric speed target; these are the
figures docs/systems/hip_dfpt.md reports): one response iteration of the real runtime, the
model fit from a 5% sample, LPT planning, and simulated task events per second."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.hip_dfpt.perfmodel import make_model, sample_tasks
from schedlab.hip_dfpt.pipeline import prepare
from schedlab.hip_dfpt.policies import make_balancer
from schedlab.hip_dfpt.runtime import Runtime
from schedlab.hip_dfpt.simulator import DeviceModel, simulate, task_costs, with_branches
from schedlab.hip_dfpt.synthetic import synthetic_system
from schedlab.hip_dfpt.workloads import builtin_molecule

DEVICE = DeviceModel()
SYNTH = with_branches(synthetic_system(5_000, 0), DEVICE)
COSTS = task_costs(SYNTH, DEVICE, 1)


@pytest.fixture(scope="module")
def ethane():
    pytest.importorskip("pyscf")
    return prepare(builtin_molecule("ethane"), "6-31g")


@pytest.mark.parametrize("streams", [1, 2])
def test_hip_dfpt_bench_response_iteration(benchmark, ethane, streams: int) -> None:
    """One DFPT response evaluation (3 perturbations) over all micro-tasks of ethane/6-31g."""
    runtime = Runtime(ethane.composed, make_balancer("hip-dfpt"), 1, streams)
    nao = ethane.composed.nao
    dms = np.random.default_rng(0).standard_normal((3, nao, nao))
    dms = dms + dms.transpose(0, 2, 1)
    benchmark(runtime.apply, dms)


def test_hip_dfpt_bench_raw_batches_iteration(benchmark, ethane) -> None:
    """The same iteration over the raw (uncomposed) batches: composition's CPU gain."""
    runtime = Runtime(ethane.raw, make_balancer("hip-dfpt"), 1, 1)
    nao = ethane.raw.nao
    dms = np.random.default_rng(0).standard_normal((3, nao, nao))
    benchmark(runtime.apply, dms + dms.transpose(0, 2, 1))


def test_hip_dfpt_bench_model_fit(benchmark) -> None:
    sample = sample_tasks(SYNTH, 0.05, 0)
    benchmark(lambda: make_model("branch-hybrid").fit(SYNTH.take(sample),
                                                      COSTS.kernel[sample]).predict(SYNTH))


def test_hip_dfpt_bench_lpt_plan(benchmark) -> None:
    """Inter-device LPT over ~40k tasks onto 512 devices."""
    benchmark(make_balancer("hip-dfpt").plan, SYNTH, COSTS.kernel, 512, 4)


def test_hip_dfpt_bench_simulate(benchmark) -> None:
    """Simulated task events per second: ~40k tasks on 160 devices x 4 streams."""
    plan = make_balancer("hip-dfpt").plan(SYNTH, COSTS.kernel, 160, 4)
    outcome = benchmark(simulate, plan, COSTS, 4, DEVICE)
    assert outcome.makespan > 0
