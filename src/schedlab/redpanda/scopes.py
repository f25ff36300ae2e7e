"""Lowering scopes: how a value defined outside a region enters it as a token stream.

In a dataflow graph a value is a *stream*: code inside a loop body needs one copy per
iteration, code inside a branch only when that branch is taken. Each region of the structured
input is a :class:`Scope` that imports outer values with the operator its kind calls for
(RedPanda IR, ../shared/papers/08-redpanda.md): ``invariant`` in loops, ``steer`` in steered
branches, nothing in predicated branches. Constants are materialised per scope (triggered by
the scope's own token stream) or folded into the consumer as immediates.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import SSAValue

from schedlab.redpanda.graph import Graph, Node, Port


class Scope:
    """One region being lowered: value environment, trigger stream, predicate, tokens."""

    def __init__(self, graph: Graph, parent: Scope | None, kind: str, *,
                 decider: Port | None = None, polarity: bool = True,
                 consts: dict | None = None) -> None:
        self.graph, self.parent, self.kind = graph, parent, kind
        self.decider, self.polarity = decider, polarity
        self.env: dict[SSAValue, Port] = {}
        self.constants: dict[SSAValue, tuple[int, int]] = consts if consts is not None else {}
        self.trigger: Port | None = None
        self.pred: Port | None = None
        self.pending: list[Node] = []  # nodes whose decider is patched once it is lowered
        self.entries: dict[str, Port] = {}
        self.entry_factory: Callable[[str], Port] | None = None
        self._triggered: dict[tuple[int, int], Port] = {}

    # ---- values -------------------------------------------------------------------------
    def is_const(self, value: SSAValue) -> bool:
        return value in self.constants

    def get(self, value: SSAValue) -> Port:
        """The port carrying ``value`` in this scope, importing it from outer scopes."""
        if value in self.env:
            return self.env[value]
        if self.parent is None:
            raise KeyError(f"value {value.name_hint or value} used before definition")
        port = self._import(self.parent.get(value))
        self.env[value] = port
        return port

    def _import(self, outer: Port) -> Port:
        if self.kind == "predicated":
            return outer
        if self.kind == "branch":
            return self.steer(self.polarity, outer)
        mode = "all" if self.kind == "loop_cond" else "body"
        node = self.graph.add("invariant", mode, [self.decider, outer])
        if self.decider is None:
            self.pending.append(node)
        return Port(node.id)

    def steer(self, polarity: bool, value: Port) -> Port:
        node = self.graph.add("steer", "true" if polarity else "false", [self.decider, value])
        if self.decider is None:
            self.pending.append(node)
        return Port(node.id)

    def use(self, value: SSAValue, immediate: bool) -> Port:
        """A value as an operand: constants become immediates or triggered constants."""
        if value in self.constants:
            number, bits = self.constants[value]
            return self.immediate(number, bits) if immediate else self.const(number, bits)
        return self.get(value)

    def immediate(self, number: int, bits: int) -> Port:
        root = self.root()
        key = ("imm", number, bits)
        cache = root._triggered
        if key not in cache:
            cache[key] = Port(self.graph.add("const", str(number), [], value=number,
                                             bits=bits).id)
        return cache[key]

    def const(self, number: int, bits: int) -> Port:
        """A constant emitted once per token of this scope's trigger stream."""
        key = (number, bits)
        if key not in self._triggered:
            node = self.graph.add("const", str(number), [self.trigger_port()], value=number,
                                  bits=bits)
            self._triggered[key] = Port(node.id)
        return self._triggered[key]

    def trigger_port(self) -> Port:
        if self.trigger is None:
            if self.kind == "predicated":
                self.trigger = self.parent.trigger_port()
            elif self.kind == "branch":
                self.trigger = self.steer(self.polarity, self.parent.trigger_port())
            else:
                raise RuntimeError(f"{self.kind} scope has no trigger")
        return self.trigger

    def root(self) -> Scope:
        return self if self.parent is None else self.parent.root()

    # ---- memory ordering tokens --------------------------------------------------------
    def entry(self, key: str) -> Port:
        """The token that says every earlier access to ``key`` outside this scope is done."""
        if key not in self.entries:
            if self.entry_factory is None:
                raise RuntimeError(f"{self.kind} scope cannot produce a token for {key}")
            self.entries[key] = self.entry_factory(key)
        return self.entries[key]

    def set_decider(self, decider: Port) -> None:
        """Patch every node created before the scope's decider was lowered."""
        self.decider = decider
        for node in self.pending:
            node.inputs[0] = decider
        self.pending.clear()


def join(graph: Graph, ports: list[Port]) -> Port | None:
    """One token meaning 'all of these arrived' (no node when there is zero or one)."""
    unique = list(dict.fromkeys(ports))
    if not unique:
        return None
    if len(unique) == 1:
        return unique[0]
    return Port(graph.add("join", "", unique).id)
