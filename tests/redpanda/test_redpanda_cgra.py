"""CGRA back end: HiGHS modulo scheduling vs brute force, and mapping invariants."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.redpanda.backends.cgra import (
    CGRA,
    MEMORY_KINDS,
    back_edge,
    map_graph,
    mapped_nodes,
    min_ii,
)
from schedlab.redpanda.backends.modulo import map_graph_milp, schedule_ii
from schedlab.redpanda.compiler import middle_end
from schedlab.redpanda.graph import Graph, Port
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.simulator import node_latency
from schedlab.redpanda.workloads import load_suite_kernel


def _brute_min_ii(graph: Graph, pes: int) -> int:
    nodes = mapped_nodes(graph)
    lat = {n: node_latency(graph.nodes[n]) for n in nodes}
    edges = [(s, d, back_edge(graph, d, i)) for s, d, i in graph.edges()]
    for ii in range(1, 12):
        horizon = sum(lat.values()) + ii
        for times in itertools.product(range(horizon), repeat=len(nodes)):
            t = dict(zip(nodes, times, strict=True))
            slots = [t[n] % ii for n in nodes]
            if max(slots.count(s) for s in range(ii)) > pes:
                continue
            if all(t[d] + (ii if back else 0) >= t[s] + lat[s] for s, d, back in edges):
                return ii
    raise AssertionError("no II below 12")


@st.composite
def tiny_graphs(draw):
    """2-4 instructions, random forward edges, and recurrences through carries."""
    n = draw(st.integers(2, 4))
    g = Graph("tiny")
    imm = g.add("const", "0", [], value=0, bits=32)  # immediates are not instructions
    kinds = draw(st.lists(st.sampled_from(["alu", "load", "carry"]), min_size=n, max_size=n))
    ids = [g.add(kind, "add" if kind == "alu" else "", [], n_out=2 if kind == "load" else 1,
                 bits=32, out_bits=32, memref="a").id for kind in kinds]
    for d in range(n):
        node = g.nodes[ids[d]]
        preds = [Port(ids[s]) for s in range(d) if draw(st.booleans())]
        if node.kind == "carry":
            init = preds[0] if preds else Port(imm.id)
            later = draw(st.integers(d, n - 1))
            node.inputs = [init, Port(ids[later]), Port(ids[draw(st.integers(d, n - 1))])]
        else:
            node.inputs = preds or [Port(imm.id)]
    return g


@settings(max_examples=25)
@given(graph=tiny_graphs(), pes=st.integers(1, 2))
def test_milp_minimum_ii_equals_brute_force(graph, pes):
    expected = _brute_min_ii(graph, pes)
    found = next(ii for ii in range(1, 12) if schedule_ii(graph, ii, pes, None) is not None)
    assert found == expected


@pytest.mark.parametrize("mapper", ["list", "milp"])
@pytest.mark.parametrize("mode", ["spatial", "temporal"])
@pytest.mark.parametrize("kernel", ["gemm", "bsearch", "histogram"])
def test_mapping_invariants(kernel, mode, mapper):
    graph = middle_end(load_suite_kernel(kernel, 3), get_flow("redpanda"))
    arch = CGRA(4, 4, contexts=16) if mode == "temporal" else CGRA(7, 7)
    mapping = (map_graph_milp if mapper == "milp" else map_graph)(graph, arch, mode)
    assert set(mapping.place) == set(mapped_nodes(graph))
    assert mapping.ii >= mapping.min_ii >= max(mapping.res_mii, 1)
    for node, pe in mapping.place.items():
        assert pe in arch.pes
        if graph.nodes[node].kind in MEMORY_KINDS:
            assert arch.memory_capable(pe)
    if mode == "spatial":
        assert len(set(mapping.place.values())) == len(mapping.place)  # one op per PE
    else:
        slots = [(pe, mapping.start[n] % mapping.slot_ii) for n, pe in mapping.place.items()]
        assert len(set(slots)) == len(slots)  # one op per (PE, context)
        per_pe = [list(mapping.place.values()).count(pe) for pe in arch.pes]
        assert max(per_pe) <= arch.contexts
    metrics = mapping.metrics()
    assert 0 < metrics["pe_utilisation"] <= 1


def test_spatial_too_small_is_a_clear_error():
    graph = middle_end(load_suite_kernel("mm2", 3), get_flow("redpanda"))
    with pytest.raises(BadInputError, match="--temporal"):
        map_graph(graph, CGRA(2, 2), "spatial")


def test_temporal_resource_bound():
    graph = middle_end(load_suite_kernel("mm2", 3), get_flow("redpanda"))
    mii, res, _ = min_ii(graph, CGRA(2, 2, contexts=64), "temporal")
    assert res >= graph.instruction_count() / 4
    with pytest.raises(BadInputError):
        map_graph(graph, CGRA(2, 2, contexts=2), "temporal")
