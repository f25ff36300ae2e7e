"""Speed of issue 38's paths: exact fixed-point vs float reduction in one response iteration,
cached vs on-the-fly basis values, and one iteration on the process backend (2 processes)."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.hip_dfpt.policies import make_balancer
from schedlab.hip_dfpt.runtime import Runtime
from schedlab.hip_dfpt.workloads import builtin_molecule


def _dms(nao: int) -> np.ndarray:
    dms = np.random.default_rng(0).standard_normal((3, nao, nao))
    return dms + dms.transpose(0, 2, 1)


@pytest.fixture(scope="module", params=[True, False], ids=["cached", "on-the-fly"])
def ethane(request):
    pytest.importorskip("pyscf")
    from schedlab.hip_dfpt.pipeline import prepare

    return prepare(builtin_molecule("ethane"), "6-31g", cache_ao=request.param)


@pytest.mark.parametrize("deterministic", [True, False], ids=["fixed-point", "float"])
def test_hip_dfpt_bench_reduction(benchmark, ethane, deterministic: bool) -> None:
    runtime = Runtime(ethane.composed, make_balancer("hip-dfpt"), 1, 1, deterministic=deterministic)
    benchmark(runtime.apply, _dms(ethane.composed.nao))


def test_hip_dfpt_bench_process_iteration(benchmark, ethane) -> None:
    runtime = Runtime(ethane.composed, make_balancer("hip-dfpt"), 2, 1, backend="process")
    try:
        benchmark(runtime.apply, _dms(ethane.composed.nao))
    finally:
        runtime.close()
