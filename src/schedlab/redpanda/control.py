"""Firing rules of the RedPanda control operators (steer, carry, invariant, merge).

These are the operators that make structured control flow dataflow (RipTide-style, as used by
RedPanda, ../shared/papers/08-redpanda.md). They are stateful or consume operands selectively,
so unlike arithmetic they do not simply wait for every operand.
"""

from __future__ import annotations

from schedlab.redpanda.graph import Node

INIT, BLOCK = 0, 1


def control_rule(sim, node: Node, t: int):
    """(operands consumed, outputs emitted) when ``node`` can fire at cycle ``t``, else None."""
    nid, state = node.id, sim.state[node.id]
    ready = sim._ready
    orders = list(range(node.n_values, len(node.inputs)))
    if node.kind == "steer":
        if not (ready(nid, 0, t) and ready(nid, 1, t)):
            return None
        decider, value = sim._peek(nid, 0), sim._peek(nid, 1)
        keep = bool(decider) == (node.fn == "true")
        return [0, 1], [(0, value)] if keep else []
    if node.kind == "merge":
        if not ready(nid, 0, t):
            return None
        side = 1 if sim._peek(nid, 0) else 2
        if not ready(nid, side, t):
            return None
        return [0, side], [(0, sim._peek(nid, side))]
    if node.kind == "carry":
        return _carry(sim, node, t, state, orders)
    return _invariant(sim, node, t, state)


def _carry(sim, node: Node, t: int, state: list, orders: list[int]):
    nid, ready = node.id, sim._ready
    if state[0] == INIT:
        if not ready(nid, 0, t):
            return None
        state[0] = BLOCK
        return [0], [(0, sim._peek(nid, 0))]
    if not ready(nid, 1, t):
        return None
    if not sim._peek(nid, 1):
        state[0] = INIT
        return [1], []
    if not (ready(nid, 2, t) and all(ready(nid, i, t) for i in orders)):
        return None
    return [1, 2, *orders], [(0, sim._peek(nid, 2))]


def _invariant(sim, node: Node, t: int, state: list):
    nid, ready = node.id, sim._ready
    if state[0] == INIT:
        if not ready(nid, 1, t):
            return None
        state[0], state[1] = BLOCK, sim._peek(nid, 1)
        return [1], [(0, state[1])] if node.fn == "all" else []
    if not ready(nid, 0, t):
        return None
    if sim._peek(nid, 0):
        return [0], [(0, state[1])]
    state[0], state[1] = INIT, None
    return [0], []

