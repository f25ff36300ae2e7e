"""Token-level semantics of the control operators and the simulator's resource rules."""

from __future__ import annotations

import pytest

from schedlab.core.errors import BadInputError
from schedlab.redpanda.graph import Graph, Port
from schedlab.redpanda.simulator import SimulationError, Timing, simulate


def _loop_sum(n: int) -> Graph:
    """sum_{i<n} i, built by hand from carry/steer/invariant."""
    g = Graph("sum", args=["n"])
    src = g.add("source")
    arg = g.add("arg", "n", bits=64)
    zero = g.add("const", "0", [Port(src.id)], value=0, bits=64)
    zero2 = g.add("const", "0", [Port(src.id)], value=0, bits=64)
    i = g.add("carry", "", [Port(zero.id), None, None])
    acc = g.add("carry", "", [Port(zero2.id), None, None])
    bound = g.add("invariant", "all", [None, Port(arg.id)])
    c = g.add("alu", "slt", [Port(i.id), Port(bound.id)], bits=64, out_bits=1)
    for node in (i, acc):
        node.inputs[1] = Port(c.id)
    bound.inputs[0] = Port(c.id)
    ib = g.add("steer", "true", [Port(c.id), Port(i.id)])
    ab = g.add("steer", "true", [Port(c.id), Port(acc.id)])
    one = g.add("const", "1", [], value=1, bits=64)
    i.inputs[2] = Port(g.add("alu", "add", [Port(ib.id), Port(one.id)], bits=64,
                             out_bits=64).id)
    acc.inputs[2] = Port(g.add("alu", "add", [Port(ab.id), Port(ib.id)], bits=64,
                               out_bits=64).id)
    out = g.add("steer", "false", [Port(c.id), Port(acc.id)])
    g.add("output", "0", [Port(out.id)], index=0)
    g.results = 1
    return g


@pytest.mark.parametrize("n", [0, 1, 5, 17])
def test_hand_built_loop(n):
    assert simulate(_loop_sum(n), {"n": n}).results == [n * (n - 1) // 2]


def test_routing_delay_slows_recurrence():
    g = _loop_sum(20)
    fast = simulate(g, {"n": 20}).cycles
    c = next(n for n in g.nodes.values() if n.fn == "slt")
    slow = simulate(g, {"n": 20}, Timing(delay={(c.id, 0): 5})).cycles
    assert slow > fast


def test_temporal_sharing_one_pe_fires_once_per_cycle():
    g = _loop_sum(10)
    alone = simulate(g, {"n": 10})
    shared = simulate(g, {"n": 10}, Timing(pe_of={n: 0 for n in g.nodes}))
    assert shared.results == alone.results
    assert shared.cycles >= shared.firings - 1 - 2  # one firing per cycle (source/arg aside)


def test_merge_consumes_only_the_selected_side():
    g = Graph("m")
    src = g.add("source")
    d = g.add("const", "1", [Port(src.id)], value=1, bits=1)
    t = g.add("const", "7", [Port(src.id)], value=7, bits=32)
    m = g.add("merge", "", [Port(d.id), Port(t.id), None])
    never = g.add("steer", "true", [Port(d.id), Port(d.id)])
    f = g.add("alu", "xor", [Port(never.id), Port(never.id)], bits=1, out_bits=1)
    m.inputs[2] = Port(f.id)  # the false side produces 0 here but is never needed
    g.add("output", "0", [Port(m.id)], index=0)
    g.results = 1
    assert simulate(g, {}).results == [7]


def test_deadlock_is_reported():
    g = Graph("dead")
    src = g.add("source")
    j = g.add("join", "", [Port(src.id), None])
    j.inputs[1] = Port(j.id)  # waits on itself forever
    g.add("output", "0", [Port(j.id)], index=0)
    g.results = 1
    with pytest.raises(SimulationError, match="deadlock"):
        simulate(g, {})


def test_missing_and_misshaped_inputs():
    g = Graph("x", memrefs={"a": (4,)}, args=["n"])
    with pytest.raises(BadInputError):
        simulate(g, {"n": 1})
    with pytest.raises(BadInputError, match="needs 4 values"):
        simulate(g, {"a": [1, 2], "n": 1})
