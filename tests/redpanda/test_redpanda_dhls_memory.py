"""DHLS memory as hardware has it: port budgets, memory controllers, checked in Verilog."""

from __future__ import annotations

import pytest

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.dhls import tools
from schedlab.redpanda.backends.dhls.memory import (
    MemoryConfig,
    assign_ports,
    port_pressure,
    ports_in_verilog,
)
from schedlab.redpanda.backends.dhls.testbench import collisions
from schedlab.redpanda.compiler import middle_end
from schedlab.redpanda.dhls import (
    DHLS_FLOW_FACTORIES,
    PIPELINED_BASELINES,
    compile_dhls,
    evaluate_dhls,
    get_dhls_flow,
)
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.workloads import load_suite_kernel, random_inputs

needs_iverilog = pytest.mark.skipif(
    not tools.have("iverilog"), reason="iverilog not installed (apt-get install iverilog)"
)


def test_memory_config_parses_budgets_and_rejects_bad_ones():
    assert MemoryConfig.parse(None).budget("a") == 2
    config = MemoryConfig.parse("1, a=2,b=4")
    assert (config.budget("a"), config.budget("b"), config.budget("c")) == (2, 4, 1)
    assert MemoryConfig.parse("0").budget("x") == 0
    for bad, where in (
        ("two", "'two'"),
        ("a=x", "'a=x'"),
        ("-1", "mem_ports"),
        ("a=0", "array 'a'"),
    ):
        with pytest.raises(BadInputError, match=where):
            MemoryConfig.parse(bad)


@pytest.mark.parametrize("name", ["jacobi1d", "isort"])
def test_arrays_with_four_accesses_get_at_most_their_budget_of_ports(name):
    kernel = load_suite_kernel(name, 3, "c")
    unlimited = compile_dhls(kernel, get_flow("redpanda"), memory=MemoryConfig(0))
    assert max(ports_in_verilog(unlimited.verilog).values()) >= 4  # one port per access
    for budget in (2, 1):
        design = compile_dhls(kernel, get_flow("redpanda"), memory=MemoryConfig(budget))
        ports = ports_in_verilog(design.verilog)
        assert max(ports.values()) == budget, ports
        assert design.verilog.count("rp_memport #") == sum(ports.values())
        assert design.metrics()["shared_ports"] >= 1
        # the buffer MILP knows a port serves several accesses per iteration
        circuit = design.circuit
        floor = port_pressure(circuit, assign_ports(circuit, MemoryConfig(budget)))
        assert all(design.buffering.ii[k] >= n for k, n in floor.items())


def test_per_array_override_and_every_access_is_served_once():
    kernel = load_suite_kernel("jacobi1d", 3, "c")
    design = compile_dhls(kernel, get_flow("redpanda"), memory=MemoryConfig(2, {"a": 1}))
    ports = ports_in_verilog(design.verilog)
    assert ports["a"] == 1 and ports["b"] <= 2
    served = sorted(n for lanes in design.portmap.ports.values() for lane in lanes for n in lane)
    accesses = sorted(
        n.id for n in design.circuit.graph.nodes.values() if n.kind in ("load", "store")
    )
    assert served == accesses
    with pytest.raises(BadInputError, match="no array 'A' is accessed by jacobi1d"):
        compile_dhls(kernel, get_flow("redpanda"), memory=MemoryConfig(2, {"A": 1}))


@needs_iverilog
@pytest.mark.parametrize("name", ["jacobi1d", "isort"])
def test_shared_ports_compute_what_the_interpreter_computes(name, tmp_path):
    """Budget 1 (every access of an array through one arbitrated port) vs one port per access;
    the default budget of 2 runs on every kernel in test_redpanda_dhls_rtl.py."""
    kernel = load_suite_kernel(name, 3, "c")
    cycles = {}
    for budget in (0, 1):
        ev = evaluate_dhls(
            kernel,
            get_flow("redpanda"),
            random_inputs(kernel, 5),
            directory=tmp_path / str(budget),
            memory=MemoryConfig(budget),
        )
        assert ev.correct
        cycles[budget] = ev.run.cycles
    assert cycles[0] < cycles[1]  # four-plus accesses through one port cost cycles


def test_testbench_has_the_circuits_ports_and_watches_collisions(tmp_path):
    kernel = load_suite_kernel("jacobi1d", 3, "c")
    design = compile_dhls(kernel, get_flow("redpanda"))
    paths = design.write(tmp_path, random_inputs(kernel, 0))
    tb = paths["testbench"].read_text()
    assert tb.count("_rdata <= mem_a[") == ports_in_verilog(design.verilog)["a"] == 2
    assert "COLLISION a" in tb
    assert collisions("CYCLES 3\nCOLLISION a 5\nEND\n") == ["a"]
    assert collisions("CYCLES 3\nEND\n") == []


def test_pipelined_dynamatic_style_baselines_are_registered():
    assert set(PIPELINED_BASELINES) <= set(DHLS_FLOW_FACTORIES)
    for name in PIPELINED_BASELINES:
        flow = get_dhls_flow(name)
        assert flow.pipelined and not flow.share_units and flow.name == name
    with pytest.raises(Exception, match="flow"):
        get_dhls_flow("vivado")
    # per-array interfaces: the two arrays of gemm's inner loop are not ordered together
    graph = middle_end(load_suite_kernel("gemm", 3, "c"), get_dhls_flow("dynamatic-pipelined"))
    serial = middle_end(load_suite_kernel("gemm", 3, "c"), get_flow("baseline"))
    assert len(graph.nodes) < len(serial.nodes)
