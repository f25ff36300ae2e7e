"""Token-level cycle simulator of RedPanda dataflow graphs.

RedPanda (../shared/papers/08-redpanda.md) targets self-timed dataflow fabrics: an instruction
fires when its operands are present and its consumers have buffer space. This simulator models
exactly that, cycle by cycle: per-edge FIFOs with credit-based capacity, per-node latency plus
per-edge routing delay (from the CGRA placement), one firing per node per cycle (spatial), or one
firing per PE per cycle among the instructions sharing it (temporal). It is event driven: only
nodes whose inputs or output space changed are examined, so cost tracks activity, not size.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.redpanda.graph import Graph, Node
from schedlab.redpanda.semantics import evaluate, wrap

#: default latencies (cycles) of the modelled PE functional units
LATENCY = {"load": 2, "store": 1, "mul": 2, "div": 4, "rem": 4}


class SimulationError(SchedlabError):
    """The graph deadlocked or ran past the cycle limit (a compiler bug, not a user error)."""


class CycleLimitError(SimulationError):
    """The run reached its cycle or wall-time limit with tokens still moving."""

    def __init__(self, graph: str, limit: str, option: str) -> None:
        super().__init__(f"{graph}: simulation stopped at {limit} with tokens still moving: the "
                         "kernel may not terminate on these inputs (if it does, raise "
                         f"{option})", field=option.lstrip("-"))
        self.limit, self.option = limit, option

    def __reduce__(self):
        return (CycleLimitError, (self.message.split(":", 1)[0], self.limit, self.option))


@dataclass
class Timing:
    """Where latency comes from: unit latency, routing delay per edge, FIFO depth per edge."""

    latency: dict[int, int] = field(default_factory=dict)
    delay: dict[tuple[int, int], int] = field(default_factory=dict)    # (dst, operand) -> cycles
    capacity: dict[tuple[int, int], int] = field(default_factory=dict)
    default_capacity: int = 2
    pe_of: dict[int, int] | None = None  # temporal mode: instructions sharing a PE


@dataclass
class SimResult:
    results: list[int]
    memory: dict[str, np.ndarray]
    cycles: int
    firings: int
    firings_by_node: dict[int, int]


def node_latency(node: Node) -> int:
    return LATENCY.get(node.kind, LATENCY.get(node.fn, 1))


class Simulator:
    """Run one graph on one set of inputs."""

    def __init__(self, graph: Graph, inputs: Mapping[str, object], timing: Timing | None = None,
                 max_cycles: int = 2_000_000, time_limit: float | None = None) -> None:
        self.g, self.timing, self.max_cycles = graph, timing or Timing(), max_cycles
        self.time_limit = time_limit
        self.memory = {}
        for name, shape in graph.memrefs.items():
            if name not in inputs:
                raise BadInputError(f"missing input memref '{name}'", field=name)
            data = np.array(inputs[name], dtype=np.int64)
            if data.size != int(np.prod(shape)):
                raise BadInputError(f"memref '{name}' needs {int(np.prod(shape))} values, "
                                    f"got {data.size}", field=name)
            self.memory[name] = data.reshape(shape).copy()
        self.scalars = {}
        for name in graph.args:
            if name not in inputs:
                raise BadInputError(f"missing input scalar '{name}'", field=name)
            self.scalars[name] = int(inputs[name])
        self.queues: dict[int, list[deque | None]] = {}
        self.imm: dict[int, list[int | None]] = {}
        for node in graph.nodes.values():
            self.queues[node.id] = [None if graph.nodes[p.node].is_immediate else deque()
                                    for p in node.inputs]
            self.imm[node.id] = [graph.nodes[p.node].attrs["value"]
                                 if graph.nodes[p.node].is_immediate else None
                                 for p in node.inputs]
        self.fanout: dict[int, list[list[tuple[int, int]]]] = {
            n.id: [[] for _ in range(n.n_out)] for n in graph.nodes.values()}
        for node in graph.nodes.values():
            for i, port in enumerate(node.inputs):
                if not graph.nodes[port.node].is_immediate:
                    self.fanout[port.node][port.index].append((node.id, i))
        self.state: dict[int, list] = {n: [0, None] for n in graph.nodes}
        self.outputs: dict[int, int] = {}
        self.firings: dict[int, int] = {n: 0 for n in graph.nodes}
        self.lat = {n.id: timing.latency.get(n.id, node_latency(n)) if timing else node_latency(n)
                    for n in graph.nodes.values()}

    # ---- operand helpers ----------------------------------------------------------------
    def _ready(self, nid: int, i: int, t: int) -> bool:
        q = self.queues[nid][i]
        return q is None or (bool(q) and q[0][0] <= t)

    def _peek(self, nid: int, i: int) -> int:
        q = self.queues[nid][i]
        return self.imm[nid][i] if q is None else q[0][1]

    def _space(self, nid: int) -> bool:
        cap, default = self.timing.capacity, self.timing.default_capacity
        for consumers in self.fanout[nid]:
            for dst, i in consumers:
                if len(self.queues[dst][i]) >= cap.get((dst, i), default):
                    return False
        return True

    # ---- firing rules -------------------------------------------------------------------
    def _rule(self, node: Node, t: int) -> tuple[list[int], list[tuple[int, int]]] | None:
        """(operands to consume, (output index, value) to emit) if ``node`` can fire now."""
        nid, kind, n = node.id, node.kind, len(node.inputs)
        everything = list(range(n))
        if node.is_immediate:
            return None
        if kind in ("source", "arg"):
            if self.state[nid][0]:
                return None
            self.state[nid][0] = 1
            return [], [(0, self.scalars[node.fn] if kind == "arg" else 0)]
        if kind in ("carry", "invariant", "merge", "steer"):
            from schedlab.redpanda.control import control_rule

            return control_rule(self, node, t)
        if not all(self._ready(nid, i, t) for i in everything):
            return None
        vals = [self._peek(nid, i) for i in range(node.n_values)]
        fired = self._datapath(node, vals, everything)
        if fired is not None:
            return fired
        if kind == "output":
            self.outputs[node.attrs["index"]] = vals[0]
            return everything, []
        return self._memory(node, vals, everything)

    @staticmethod
    def _datapath(node: Node, vals: list[int], everything: list[int]):
        """What a const/ALU/select/join/fork/buffer firing consumes and emits, or None for
        other kinds (shared with the configuration simulator, so both compute alike)."""
        kind = node.kind
        if kind == "const":
            return everything, [(0, node.attrs["value"])]
        if kind in ("alu", "select"):
            value = evaluate(node.fn, vals, node.attrs["bits"], node.attrs["out_bits"])
            guard = node.attrs.get("guard")
            if guard is not None and bool(vals[-1]) != guard:
                return everything, []
            return everything, [(0, value)]
        if kind in ("join", "fork", "buffer"):
            return everything, [(i, vals[0] if vals else 0) for i in range(node.n_out)]
        return None

    def _memory(self, node: Node, vals: list[int], everything: list[int]):
        array = self.memory[node.attrs["memref"]]
        pred = True
        if node.attrs.get("predicated"):
            pred, vals = bool(vals[-1]), vals[:-1]
        if node.kind == "load":
            value = int(array[self._index(node, array, vals)]) if pred else 0
            return everything, [(0, value), (1, 0)]
        if pred:
            array[self._index(node, array, vals[1:])] = wrap(vals[0], node.attrs["bits"])
        return everything, [(0, 0)]

    def _index(self, node: Node, array: np.ndarray, idx: list[int]) -> tuple[int, ...]:
        if any(not 0 <= i < s for i, s in zip(idx, array.shape, strict=True)):
            raise SimulationError(f"{node.kind} {node.attrs['memref']}{idx} out of bounds "
                                  f"{array.shape}")
        return tuple(idx)

    # ---- main loop ------------------------------------------------------------------------
    def run(self) -> SimResult:
        g, pe_of = self.g, self.timing.pe_of
        active = {n.id for n in g.nodes.values() if not n.is_immediate}
        wake: list[tuple[int, int]] = []
        t, last, rounds = 0, 0, 0
        delay = self.timing.delay
        started = time.monotonic()
        while active or wake:
            rounds += 1
            if self.time_limit is not None and rounds % 2048 == 0 and (
                    time.monotonic() - started > self.time_limit):
                raise CycleLimitError(
                    g.name, f"the {self.time_limit:g} s time limit (cycle {t:,})", "--time-limit")
            while wake and wake[0][0] <= t:
                active.add(heapq.heappop(wake)[1])
            busy: set[int] = set()
            nxt: set[int] = set()
            for nid in sorted(active):
                node = g.nodes[nid]
                if pe_of is not None and nid in pe_of and pe_of[nid] in busy:
                    nxt.add(nid)
                    continue
                if not self._space(nid):
                    continue
                rule = self._rule(node, t)
                if rule is None:
                    continue
                consume, emit = rule
                for i in consume:
                    q = self.queues[nid][i]
                    if q is not None:
                        q.popleft()
                        nxt.add(node.inputs[i].node)  # credit returned to the producer
                for index, value in emit:
                    for dst, i in self.fanout[nid][index]:
                        arrive = t + self.lat[nid] + delay.get((dst, i), 0)
                        self.queues[dst][i].append((arrive, value))
                        heapq.heappush(wake, (arrive, dst))
                self.firings[nid] += 1
                nxt.add(nid)
                last = max(last, t + self.lat[nid])
                if pe_of is not None and nid in pe_of:
                    busy.add(pe_of[nid])
            active = nxt
            t = t + 1 if active else (wake[0][0] if wake else t + 1)
            if t > self.max_cycles:
                raise CycleLimitError(
                    g.name, f"the cycle limit ({self.max_cycles:,} cycles)", "--max-cycles")
        missing = [i for i in range(g.results) if i not in self.outputs]
        if missing:
            raise SimulationError(f"{g.name}: deadlock at cycle {t}, results {missing} missing")
        return SimResult([self.outputs[i] for i in range(g.results)], self.memory, last,
                         sum(self.firings.values()), dict(self.firings))


def simulate(graph: Graph, inputs: Mapping[str, object], timing: Timing | None = None,
             max_cycles: int = 2_000_000, time_limit: float | None = None) -> SimResult:
    """Execute ``graph`` on ``inputs``; results, final memory and cycle count.

    Raises :class:`CycleLimitError` past ``max_cycles`` cycles or ``time_limit`` seconds.
    """
    return Simulator(graph, inputs, timing, max_cycles, time_limit).run()
