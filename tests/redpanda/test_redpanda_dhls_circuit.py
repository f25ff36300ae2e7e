"""DHLS back end: circuit structure, buffer-placement MILP (vs brute force), sharing."""

from __future__ import annotations

import itertools

import pytest

from schedlab.redpanda.backends.dhls.buffers import (
    critical_levels,
    place_buffers,
    placement_cost,
    placement_feasible,
)
from schedlab.redpanda.backends.dhls.circuit import CP_LEVELS, build_circuit
from schedlab.redpanda.backends.dhls.sharing import occupancy, share_units
from schedlab.redpanda.backends.dhls.verilog import fit, generate, literal
from schedlab.redpanda.compiler import middle_end
from schedlab.redpanda.graph import Graph, Port
from schedlab.redpanda.policies import FLOWS, get_flow
from schedlab.redpanda.workloads import KERNELS, load_suite_kernel


@pytest.fixture(scope="module")
def circuits():
    out = {}
    for name in KERNELS:
        for flow in ("redpanda", "dynamatic"):
            graph = middle_end(load_suite_kernel(name, 3), get_flow(flow))
            circuit = build_circuit(graph)
            out[(name, flow)] = (circuit, place_buffers(circuit))
    return out


def test_buffering_cuts_every_cycle_and_meets_the_clock_target(circuits):
    for (name, flow), (circuit, buffering) in circuits.items():
        chosen = set(buffering.depth)
        assert placement_feasible(circuit, chosen), (name, flow)
        assert critical_levels(circuit, buffering) <= CP_LEVELS
        assert buffering.status == "optimal", (name, flow, buffering.status)
        # every channel has room for a token (no capacity-0 channel can deadlock the circuit)
        assert all((v, i) in buffering.depth or (v, i) in buffering.transparent
                   for _, v, i in circuit.channels)
        assert all(ii >= 1 for ii in buffering.ii.values())


def test_every_fanout_is_an_explicit_fork(circuits):
    for circuit, _ in circuits.values():
        readers: dict[Port, int] = {}
        for _, v, i in circuit.channels:
            port = circuit.graph.nodes[v].inputs[i]
            readers[port] = readers.get(port, 0) + 1
        assert max(readers.values()) == 1
        assert all(w >= 1 for w in circuit.width.values())


def _counter_loop() -> Graph:
    """for (i = 0; i < n; i += 1) {}; return i  -- the smallest loop the IR can express."""
    g = Graph("counter", args=["n"], results=1)
    src = g.add("source")
    n = g.add("arg", "n", bits=32)
    zero = g.add("const", "0", [Port(src.id)], value=0, bits=32)
    one = g.add("const", "1", [], value=1, bits=32)
    iv = g.add("carry", "", [Port(zero.id), None, None])
    bound = g.add("invariant", "all", [None, Port(n.id)])
    cond = g.add("alu", "slt", [Port(iv.id), Port(bound.id)], bits=32, out_bits=1)
    iv.inputs[1] = Port(cond.id)
    bound.inputs[0] = Port(cond.id)
    body = g.add("steer", "true", [Port(cond.id), Port(iv.id)])
    nxt = g.add("alu", "add", [Port(body.id), Port(one.id)], bits=32, out_bits=32)
    iv.inputs[2] = Port(nxt.id)
    done = g.add("steer", "false", [Port(cond.id), Port(iv.id)])
    g.add("output", "0", [Port(done.id)], index=0)
    g.validate()
    return g


def test_milp_placement_is_optimal_against_brute_force():
    circuit = build_circuit(_counter_loop())
    channels = [(v, i) for _, v, i in circuit.channels]
    # adding a buffer never lowers the cost (more latency, more bits) and keeps a placement
    # feasible, so the optimum is a minimal feasible set: small sets suffice for this circuit
    best = min(placement_cost(circuit, set(s))
               for r in range(4)
               for s in itertools.combinations(channels, r)
               if placement_feasible(circuit, set(s)))
    buffering = place_buffers(circuit)
    chosen = set(buffering.depth)
    assert placement_feasible(circuit, chosen)
    assert placement_cost(circuit, chosen) == pytest.approx(best, rel=1e-6)


def test_sharing_respects_occupancy_and_function():
    for name in ("atax", "mm2", "gesummv", "bicg"):
        circuit = build_circuit(middle_end(load_suite_kernel(name, 3), get_flow("redpanda")))
        buffering = place_buffers(circuit)
        for group in share_units(circuit, buffering):
            nodes = [circuit.graph.nodes[n] for n in group]
            assert len({(n.fn, n.attrs["bits"]) for n in nodes}) == 1
            assert sum(occupancy(circuit, buffering, n) for n in group) <= 1 + 1e-9


def test_generated_verilog_instantiates_one_component_per_unit(circuits):
    circuit, buffering = circuits[("gemm", "redpanda")]
    text, iface = generate(circuit, buffering, [])
    assert text.count("rp_carry #") == sum(n.kind == "carry"
                                           for n in circuit.graph.nodes.values())
    assert "module rp_gemm" in text and "assign active" in text
    assert {m for m, *_ in iface.ports} == {"A", "B", "C"}


def test_widths_and_literals():
    assert literal(-1, 8) == "8'd255"
    assert fit("x", 8, 8) == "x"
    assert fit("x", 16, 8) == "x[7:0]"
    assert fit("x", 8, 16) == "{{8{x[7]}}, x}"


@pytest.mark.parametrize("flow", list(FLOWS))
def test_every_flow_builds_a_circuit(flow):
    for name in ("gcd", "condstore", "bsearch"):
        circuit = build_circuit(middle_end(load_suite_kernel(name, 3), get_flow(flow)))
        assert circuit.loops and circuit.channels
