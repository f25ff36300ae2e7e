"""Memory-ordering analysis: affine forms, dependence tests, transitive reduction."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import memref, scf

from schedlab.redpanda.analysis import (
    affine_form,
    loop_carries_dependence,
    may_alias_same_iteration,
    ordering_graph,
)
from schedlab.redpanda.frontend import parse_kernel
from schedlab.redpanda.lowering import Lowering
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.workloads import load_suite_kernel

SHIFT = """func.func @shift(%a: memref<16xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %n = arith.constant 8 : index
  scf.for %i = %c0 to %n step %c1 {
    %j = arith.muli %i, %c2 : index
    %k = arith.addi %j, %c1 : index
    %v = memref.load %a[%j] : memref<16xi32>
    memref.store %v, %a[%k] : memref<16xi32>
  }
  func.return
}
"""


def _loop_and_accesses(kernel, flow="redpanda"):
    low = Lowering(kernel, get_flow(flow))
    loops = [op for op in kernel.func.walk() if isinstance(op, scf.ForOp | scf.WhileOp)]
    return low, loops


def _accesses(low, loop):
    return [low.access(o) for o in loop.walk() if isinstance(o, memref.LoadOp | memref.StoreOp)]


def test_affine_forms_of_scaled_and_shifted_indices():
    kernel = parse_kernel(SHIFT)
    low, (loop,) = _loop_and_accesses(kernel)
    load, store = _accesses(low, loop)
    iv = loop.body.block.args[0]
    assert load.forms == [{iv: 2, 1: 0}] or load.forms == [{iv: 2}]
    assert store.forms[0][iv] == 2 and store.forms[0][1] == 1


def test_even_odd_accesses_never_conflict_across_iterations():
    """a[2i] vs a[2i+1]: 2(i - i') = 1 has no integer solution."""
    low, (loop,) = _loop_and_accesses(parse_kernel(SHIFT))
    accesses = _accesses(low, loop)
    assert not loop_carries_dependence(loop, accesses)
    assert not may_alias_same_iteration(*accesses)


def test_histogram_indirect_update_is_loop_carried():
    low, (loop,) = _loop_and_accesses(load_suite_kernel("histogram", 3))
    assert loop_carries_dependence(loop, _accesses(low, loop))


def test_in_place_update_same_index_is_not_loop_carried():
    low, loops = _loop_and_accesses(load_suite_kernel("atax", 3))
    inner_update = loops[-1]  # y[j] += ...: same address in one iteration only
    accesses = [a for a in _accesses(low, inner_update) if a.memref == "y"]
    assert not loop_carries_dependence(inner_update, accesses)
    outer = loops[0]  # across i, y[j] is revisited: carried
    assert loop_carries_dependence(outer, [a for a in _accesses(low, outer) if a.memref == "y"])


def test_constant_indices():
    kernel = load_suite_kernel("condstore", 3)
    low, (loop,) = _loop_and_accesses(kernel)
    neg = [a for a in _accesses(low, loop) if a.memref == "neg"]
    assert loop_carries_dependence(loop, neg)  # neg[0] every iteration
    c = [op for op in kernel.func.walk() if op.name == "arith.constant"][0]
    assert affine_form(c.result) == {1: 0}


@settings(max_examples=40)
@given(st.integers(2, 7).flatmap(lambda n: st.tuples(
    st.just(n), st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                        .filter(lambda e: e[0] < e[1])),
    st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
            .filter(lambda e: e[0] < e[1])))))
def test_reduction_preserves_order_reachability(case):
    """Kept ordering + data edges reach exactly what all edges reached."""
    n, conflict_edges, data = case
    conflicts = {e: {"m"} for e in conflict_edges}
    prints = [{"m": True} for _ in range(n)]
    preds, entry, sinks = ordering_graph(prints, conflicts, set(data))
    full = nx.DiGraph(list(conflict_edges) + list(data))
    full.add_nodes_from(range(n))
    kept = nx.DiGraph([(i, j) for j, ps in preds.items() for i, _ in ps] + list(data))
    kept.add_nodes_from(range(n))
    assert nx.transitive_closure(full).edges == nx.transitive_closure(kept).edges
    kept_count = sum(len(ps) for ps in preds.values())
    assert kept_count <= len(conflict_edges)
    for j in range(n):  # entry token needed exactly when nothing in the block orders j first
        assert ("m" in entry[j]) == (not any((i, j) in conflicts for i in range(j)))
    assert sinks["m"] == {i for i in range(n) if not any((i, j) in conflicts
                                                         for j in range(i + 1, n))}
