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


@pytest.mark.skipif(not have("yosys"), reason="yosys not installed")
def test_redpanda_bench_dhls_yosys_xilinx(benchmark):
    """synth_xilinx of atax N=4 (two shared multipliers -> DSP48E1, one BRAM port pair)."""
    import tempfile
    from pathlib import Path

    from schedlab.redpanda.backends.dhls import tools
    from schedlab.redpanda.dhls import compile_dhls

    design = compile_dhls(load_suite_kernel("atax", 4, "c"), get_flow("redpanda"))

    def once():
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            tools.write_library(directory)
            top = directory / f"{design.iface.top}.v"
            top.write_text(design.verilog)
            return tools.synthesize(directory, top, design.iface.top, tool=tools._yosys())

    res = benchmark.pedantic(once, rounds=1, iterations=1)
    assert res.dsps > 0 and res.luts > 0


@pytest.mark.skipif(not have("iverilog"), reason="iverilog not installed")
def test_redpanda_bench_dhls_iverilog_one_port(benchmark, tmp_path):
    """jacobi1d N=8 with every array behind one arbitrated port (memory controllers)."""
    from schedlab.redpanda.backends.dhls.memory import MemoryConfig
    from schedlab.redpanda.dhls import compile_dhls

    kernel = load_suite_kernel("jacobi1d", 8, "c")
    design = compile_dhls(kernel, get_flow("redpanda"), memory=MemoryConfig(1))
    run = benchmark.pedantic(design.simulate, args=(random_inputs(kernel, 0), tmp_path),
                             rounds=2, iterations=1)
    assert run.complete
