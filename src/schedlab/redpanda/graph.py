"""The RedPanda dataflow graph: the working form of the RedPanda IR.

RedPanda (../shared/papers/08-redpanda.md) compiles both dataflow CGRAs and dynamic HLS from one
IR. The IR is also an xDSL dialect (:mod:`schedlab.redpanda.dialect`); analyses, the simulator and
the back ends work on this plain-Python graph because they walk it thousands of times, and the
two forms convert losslessly (``to_xdsl`` / ``from_xdsl``).

Every node is one dataflow instruction. Operand ports point at ``(producer, output index)``;
a producer's output is broadcast to all its consumers (implicit fork; the DHLS back end makes the
forks explicit with :func:`schedlab.redpanda.passes.materialize_forks`). Trailing operands beyond
an op's arity are *ordering tokens*: consumed, never read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class Port(NamedTuple):
    """One output of one node."""

    node: int
    index: int = 0


#: node kinds and their number of value (non-token) operands; -1 = variable
ARITY: dict[str, int] = {
    "source": 0,     # emits one token when the kernel starts
    "arg": 0,        # emits a scalar kernel argument once
    "const": -1,     # 0 operands = immediate (always available); 1 = triggered constant
    "alu": 2,        # integer arithmetic / comparison (fn names the operation)
    "select": 3,     # predication: consumes all three operands, picks one
    "steer": 2,      # (decider, value): forwards value when decider == polarity, else drops it
    "carry": 3,      # (init, decider, next): loop-carried value
    "invariant": 2,  # (decider, value): re-emits a loop-invariant value per iteration
    "merge": 3,      # (decider, true, false): consumes only the selected side
    "join": -1,      # waits for all operands, emits one token
    "load": -1,      # (indices..., [predicate]) -> (value, done)
    "store": -1,     # (value, indices..., [predicate]) -> done
    "output": 1,     # a kernel result
    "fork": 1,       # explicit fan-out (DHLS only); n_out copies
    "buffer": 1,     # explicit FIFO slot (DHLS only)
}

#: kinds that are not instructions on a PE: immediates live in the consumer's instruction word
FREE_KINDS = frozenset({"source", "arg", "output"})


@dataclass
class Node:
    """One dataflow instruction."""

    id: int
    kind: str
    fn: str = ""
    inputs: list[Port | None] = field(default_factory=list)
    n_out: int = 1
    attrs: dict = field(default_factory=dict)

    @property
    def n_values(self) -> int:
        """Operands that carry values; the rest are ordering tokens."""
        return len(self.inputs) - self.attrs.get("n_order", 0)

    @property
    def is_immediate(self) -> bool:
        return self.kind == "const" and not self.inputs


@dataclass
class Graph:
    """A kernel as a dataflow graph, plus the memory it touches."""

    name: str
    nodes: dict[int, Node] = field(default_factory=dict)
    memrefs: dict[str, tuple[int, ...]] = field(default_factory=dict)  # name -> shape
    args: list[str] = field(default_factory=list)                      # scalar arg names
    results: int = 0
    attrs: dict = field(default_factory=dict)
    _next: int = 0

    def add(self, kind: str, fn: str = "", inputs: list[Port | None] | None = None,
            n_out: int = 1, **attrs) -> Node:
        node = Node(self._next, kind, fn, list(inputs or []), n_out, dict(attrs))
        self.nodes[node.id] = node
        self._next += 1
        return node

    def add_order(self, node: Node, tokens: list[Port]) -> None:
        """Append ordering-token operands to ``node``."""
        node.inputs.extend(tokens)
        node.attrs["n_order"] = node.attrs.get("n_order", 0) + len(tokens)

    def consumers(self) -> dict[Port, list[tuple[int, int]]]:
        """For each output port, the (consumer node, operand index) pairs reading it."""
        users: dict[Port, list[tuple[int, int]]] = {}
        for node in self.nodes.values():
            for i, port in enumerate(node.inputs):
                if port is not None:
                    users.setdefault(port, []).append((node.id, i))
        return users

    def instructions(self) -> list[Node]:
        """Nodes that occupy a PE instruction slot (immediates and I/O do not)."""
        return [n for n in self.nodes.values()
                if n.kind not in FREE_KINDS and not n.is_immediate]

    def instruction_count(self) -> int:
        return len(self.instructions())

    def edges(self) -> list[tuple[int, int, int]]:
        """(producer, consumer, operand index) for every non-immediate operand."""
        out = []
        for node in self.nodes.values():
            for i, port in enumerate(node.inputs):
                if port is not None and not self.nodes[port.node].is_immediate:
                    out.append((port.node, node.id, i))
        return out

    def validate(self) -> None:
        """Every operand points at an existing output (catches lowering bugs early)."""
        for node in self.nodes.values():
            for i, port in enumerate(node.inputs):
                if port is None:
                    raise ValueError(f"node {node.id} ({node.kind}) operand {i} unset")
                src = self.nodes.get(port.node)
                if src is None or port.index >= src.n_out:
                    raise ValueError(f"node {node.id} operand {i} reads missing {port}")

    def kind_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.instructions():
            counts[node.kind] = counts.get(node.kind, 0) + 1
        return counts
