"""The elastic circuit a RedPanda graph becomes: explicit forks, channel widths, loops, timing.

RedPanda (../shared/papers/08-redpanda.md) lowers one IR to dynamically scheduled (elastic)
circuits. Every graph node becomes one handshake component; every non-immediate operand one
channel. This module gathers what buffer placement, resource sharing and the Verilog generator
all need: explicit fan-out (``materialize_forks``), the bit width of every channel, which
channels close a loop (back edges), the loops themselves, and the timing model of each unit.

Timing model (documented in docs/systems/redpanda.md): ``LATENCY`` is the number of register
stages inside a unit (0 = combinational); ``levels`` estimates a unit's combinational depth in
6-input-LUT levels, used by the buffer-placement MILP to keep every register-to-register path
within ``CP_LEVELS``.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import networkx as nx

from schedlab.core.errors import BadInputError
from schedlab.redpanda.graph import Graph, Node, Port
from schedlab.redpanda.passes import materialize_forks

#: register stages inside each unit (cycles from firing to the result's handshake)
LATENCY = {"mul": 2, "div": 4, "rem": 4, "load": 2, "store": 1}
#: the functional units worth sharing (DSP blocks and divider cores)
SHAREABLE = frozenset({"mul", "div", "rem"})
#: target register-to-register depth in LUT levels for buffer placement
CP_LEVELS = 12
#: kinds whose output comes from a register (a path starts afresh after them)
REGISTERED = frozenset({"load", "store", "source", "arg", "buffer"})
SUPPORTED_KINDS = frozenset({"source", "arg", "const", "alu", "select", "steer", "carry",
                             "invariant", "merge", "join", "load", "store", "output", "fork",
                             "buffer"})


def unit_latency(node: Node) -> int:
    if node.kind in ("load", "store"):
        return LATENCY[node.kind]
    if node.kind == "alu":
        return LATENCY.get(node.fn, 0)
    return 0


def is_back_edge(graph: Graph, dst: int, operand: int) -> bool:
    """Operands a loop operator consumes for its *next* emission (distance 1)."""
    kind = graph.nodes[dst].kind
    return (kind == "carry" and operand >= 1) or (kind == "invariant" and operand == 0)


@dataclass
class Loop:
    """One loop of the circuit: its operators, its body, nesting depth and weight."""

    key: Port                       # the loop's decider (resolved through forks)
    heads: list[int]                # carry / invariant nodes of this loop
    body: set[int] = field(default_factory=set)
    depth: int = 0


@dataclass
class Circuit:
    """A forked copy of a RedPanda graph plus everything the DHLS back end derives from it."""

    graph: Graph
    width: dict[Port, int]
    channels: list[tuple[int, int, int]]   # (producer, consumer, operand), non-immediate only
    loops: list[Loop]

    def channel_width(self, dst: int, operand: int) -> int:
        return self.width[self.graph.nodes[dst].inputs[operand]]

    def innermost(self, nid: int) -> Loop | None:
        inside = [loop for loop in self.loops if nid in loop.body]
        return max(inside, key=lambda lp: lp.depth) if inside else None


def levels(node: Node, width: int) -> int:
    """Estimated combinational depth of a unit in LUT levels (carry chains count W/16)."""
    if node.kind in ("alu", "select"):
        fn = node.fn
        if fn in ("add", "sub", "eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt",
                  "uge"):
            return 2 + math.ceil(node.attrs.get("bits", width) / 16)
        if fn in ("shl", "shr"):
            return max(1, math.ceil(math.log2(max(node.attrs.get("bits", width), 2)) / 2))
        if fn in ("cast",):
            return 0
        return 1
    if node.kind in ("const", "source", "arg", "output"):
        return 0
    if node.kind in ("load", "store"):
        return 2 + math.ceil(len(node.inputs) / 2)  # join + address arithmetic
    return 1  # steer, merge, carry, invariant, fork, join: one level of handshake logic


def _widths(graph: Graph) -> dict[Port, int]:
    memo: dict[Port, int] = {}

    def width(port: Port) -> int:
        if port in memo:
            return memo[port]
        node = graph.nodes[port.node]
        kind = node.kind
        if kind in ("alu", "select"):
            w = node.attrs["out_bits"]
        elif kind in ("const", "arg"):
            w = node.attrs.get("bits", 64)
        elif kind == "load":
            w = node.attrs["bits"] if port.index == 0 else 1
        elif kind in ("source", "join", "store"):
            w = 1
        elif kind in ("steer", "invariant", "fork", "buffer"):
            w = width(node.inputs[1 if kind in ("steer", "invariant") else 0])
        elif kind == "merge":
            w = width(node.inputs[1])
        elif kind == "carry":
            w = width(node.inputs[0])
        else:
            raise BadInputError(f"node {node.id}: no DHLS component for '{kind}'", field=kind)
        memo[port] = max(int(w), 1)
        return memo[port]

    for node in graph.nodes.values():
        for index in range(node.n_out):
            if node.kind != "output":
                width(Port(node.id, index))
    return memo


def _root(graph: Graph, port: Port) -> Port:
    while graph.nodes[port.node].kind == "fork":
        port = graph.nodes[port.node].inputs[0]
    return port


def find_loops(graph: Graph) -> list[Loop]:
    """Loops by decider; body = nodes on a forward path from a head to a back-edge source."""
    forward = nx.DiGraph()
    forward.add_nodes_from(graph.nodes)
    back: dict[Port, set[int]] = {}
    loops: dict[Port, Loop] = {}
    for node in graph.nodes.values():
        if node.kind in ("carry", "invariant"):
            decider = node.inputs[1] if node.kind == "carry" else node.inputs[0]
            key = _root(graph, decider)
            loops.setdefault(key, Loop(key, [])).heads.append(node.id)
        for i, port in enumerate(node.inputs):
            if graph.nodes[port.node].is_immediate:
                continue
            if is_back_edge(graph, node.id, i):
                kind = node.kind
                decider = node.inputs[1] if kind == "carry" else node.inputs[0]
                back.setdefault(_root(graph, decider), set()).add(port.node)
            else:
                forward.add_edge(port.node, node.id)
    if not nx.is_directed_acyclic_graph(forward):
        raise BadInputError(f"{graph.name}: a cycle does not pass through a loop operator",
                            field="graph")
    for key, loop in loops.items():
        reach: set[int] = set(loop.heads)
        for head in loop.heads:
            reach |= nx.descendants(forward, head)
        sources = back.get(key, set())
        closing: set[int] = set(sources)
        for src in sources:
            closing |= nx.ancestors(forward, src)
        loop.body = (reach & closing) | set(loop.heads)
    for loop in loops.values():
        carries = {h for h in loop.heads if graph.nodes[h].kind == "carry"} or set(loop.heads)
        loop.depth = sum(1 for other in loops.values()
                         if other is not loop and carries <= other.body)
    return sorted(loops.values(), key=lambda lp: min(lp.heads))


def build_circuit(graph: Graph, index_bits: int = 32) -> Circuit:
    """Copy ``graph``, make fan-out explicit and derive widths, channels and loops.

    64-bit values (MLIR ``index``) are narrowed to ``index_bits`` (bit-width reduction, as
    dynamic-HLS tools do): loop counters and subscripts of our kernels need far fewer bits,
    and 64-bit comparators would dominate the circuit. Pass 64 for kernels with i64 data.
    """
    if index_bits not in (16, 32, 64):
        raise BadInputError("index_bits must be 16, 32 or 64", field="index_bits")
    g = copy.deepcopy(graph)
    for node in g.nodes.values():
        for key in ("bits", "out_bits"):
            if node.attrs.get(key) == 64:
                node.attrs[key] = index_bits
        if node.kind not in SUPPORTED_KINDS:
            raise BadInputError(f"node {node.id}: no DHLS component for '{node.kind}'",
                                field=node.kind)
        if node.attrs.get("n_order") and node.kind in ("steer", "merge", "invariant"):
            raise BadInputError(f"node {node.id}: ordering tokens on a {node.kind}",
                                field=node.kind)
    materialize_forks(g)
    g.validate()
    channels = [(s, d, i) for s, d, i in g.edges()]
    return Circuit(g, _widths(g), channels, find_loops(g))
