"""DHLS back end speed: circuit generation (forks + buffer MILP + Verilog), RTL simulation."""

from __future__ import annotations

import pytest

from schedlab.redpanda.backends.dhls import DHLSBackend, have
from schedlab.redpanda.compiler import middle_end
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.workloads import load_suite_kernel, random_inputs


@pytest.fixture(scope="module")
def mm2():
    kernel = load_suite_kernel("mm2", 8)
    return kernel, middle_end(kernel, get_flow("redpanda"))


def test_redpanda_bench_dhls_generate(benchmark, mm2):
    _, graph = mm2
    design = benchmark(DHLSBackend().compile, graph)
    assert design.verilog


@pytest.mark.skipif(not have("iverilog"), reason="iverilog not installed")
def test_redpanda_bench_dhls_iverilog(benchmark, mm2, tmp_path):
    kernel, graph = mm2
    design = DHLSBackend().compile(graph)
    inputs = random_inputs(kernel, 0)
    run = benchmark.pedantic(design.simulate, args=(inputs, tmp_path), rounds=2, iterations=1)
    assert run.complete
