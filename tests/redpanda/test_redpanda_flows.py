"""Every flow on every kernel: the dataflow graph computes what xDSL's interpreter computes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.redpanda.backends.cgra import CGRA, map_graph
from schedlab.redpanda.compiler import middle_end, outputs_match
from schedlab.redpanda.graph import FREE_KINDS
from schedlab.redpanda.lowering import lower
from schedlab.redpanda.policies import FLOWS, get_flow
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.simulator import simulate
from schedlab.redpanda.workloads import KERNELS, load_suite_kernel, random_inputs

SIZE = 3


@pytest.fixture(scope="module")
def suite():
    return {name: load_suite_kernel(name, SIZE) for name in KERNELS}


@pytest.mark.parametrize("flow", list(FLOWS))
def test_every_flow_is_correct_and_well_formed_on_every_kernel(flow, suite):
    """The common check every flow must pass (the check_estimator of this system)."""
    for name, kernel in suite.items():
        inputs = random_inputs(kernel, seed=7)
        graph = middle_end(kernel, get_flow(flow))
        graph.validate()
        assert graph.instruction_count() > 0
        # nothing dangles: every instruction is read by someone or has a side effect
        read = {p.node for n in graph.nodes.values() for p in n.inputs}
        for node in graph.instructions():
            assert node.id in read or node.kind in ("store", "output"), (name, node)
        for mode in ("spatial", "temporal"):
            timing = None
            if mode == "temporal":
                timing = map_graph(graph, CGRA(4, 4, contexts=16), "temporal").timing(True)
            sim = simulate(graph, inputs, timing)
            assert outputs_match(sim, run_reference(kernel, inputs)), (name, flow, mode)


@settings(max_examples=12)
@given(seed=st.integers(0, 10_000), name=st.sampled_from(KERNELS),
       flow=st.sampled_from(list(FLOWS)))
def test_differential_random_inputs(seed, name, flow, suite):
    kernel = suite[name]
    inputs = random_inputs(kernel, seed)
    sim = simulate(middle_end(kernel, get_flow(flow)), inputs)
    assert outputs_match(sim, run_reference(kernel, inputs))


def test_serial_memory_orders_more_than_redpanda(suite):
    """Serialising every access can only add ordering, so it never runs faster here."""
    for name in ("histogram", "jacobi1d", "gemm"):
        kernel = suite[name]
        inputs = random_inputs(kernel, 1)
        fast = simulate(middle_end(kernel, get_flow("redpanda")), inputs).cycles
        slow = simulate(middle_end(kernel, get_flow("serial-memory")), inputs).cycles
        assert fast <= slow, name


def test_non_pipelined_never_overlaps_iterations(suite):
    kernel = suite["matvec"]
    inputs = random_inputs(kernel, 0)
    piped = simulate(middle_end(kernel, get_flow("redpanda")), inputs).cycles
    serial = simulate(middle_end(kernel, get_flow("non-pipelined")), inputs).cycles
    assert serial > piped


def test_branch_modes_follow_the_flow(suite):
    kernel = suite["condstore"]
    assert set(lower(kernel, get_flow("predication-only")).attrs["branch_modes"]) == {"predicate"}
    # a branch holding a loop can never be predicated, whatever the flow asks
    assert get_flow("predication-only").branch_mode(
        __import__("schedlab.redpanda.policies", fromlist=["BranchShape"]).BranchShape(
            1, 1, 1, 0, False, True), "temporal") == "steer"


def test_histogram_with_repeated_bins_keeps_read_modify_write_order(suite):
    kernel = suite["histogram"]
    inputs = random_inputs(kernel, 0)
    inputs["x"] = np.zeros_like(inputs["x"])  # every iteration hits bin 0
    sim = simulate(middle_end(kernel, get_flow("redpanda")), inputs)
    assert sim.memory["h"][0] == 4 * SIZE


def test_instruction_counts_exclude_free_nodes(suite):
    graph = middle_end(suite["gcd"], get_flow("redpanda"))
    assert all(n.kind not in FREE_KINDS and not n.is_immediate for n in graph.instructions())
