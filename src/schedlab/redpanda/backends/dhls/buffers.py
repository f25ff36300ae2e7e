"""Buffer placement for elastic circuits: a MILP on the circuit's cycles, solved with HiGHS.

RedPanda's DHLS back end (../shared/papers/08-redpanda.md) must place elastic buffers so that
(1) every cycle of the circuit holds a register (no combinational loop on valid, data or
ready), (2) no register-to-register path is deeper than the clock target and (3) loops run as
fast as their recurrences allow. This is the formulation of Josipović et al. (FPGA'20, "Buffer
placement and sizing for high-performance dataflow circuits"), simplified to one token per
loop cycle:

* ``b[e]`` in {0, 1}: an elastic buffer (latency 1, cuts every path) on channel ``e``;
* ``o[v]``: a topological order that must increase along every unbuffered channel, so every
  cycle is cut (constraint 1);
* ``t[v]``: arrival time in LUT levels, reset by buffers and registered units (constraint 2);
* per loop L: retiming times ``r[L, v]`` and the loop's initiation interval ``Phi[L]``, with
  ``r[v] >= r[u] + lat(u) + b[e] - Phi[L]`` on L's back edges (distance 1) and without the
  ``Phi`` term elsewhere (constraint 3).

The objective weights each loop's ``Phi`` by ``8**depth`` (inner loops run more often) plus a
small cost per buffered bit. Buffer *sizes* follow from the solution: with ``Phi`` fixed, an
as-soon-as-possible schedule gives each channel's waiting time (slack); a channel whose tokens
wait at least one period gets a FIFO deep enough to hold them (slack matching).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from schedlab.redpanda.backends.dhls.circuit import (
    CP_LEVELS,
    REGISTERED,
    Circuit,
    is_back_edge,
    levels,
    unit_latency,
)
from schedlab.redpanda.graph import Port

#: objective cost of one buffered bit relative to one cycle of an outermost loop's II
BIT_COST = 1e-4
MAX_DEPTH = 16


@dataclass
class Buffering:
    """Where the elastic buffers go, how deep they are, and the loops' predicted IIs."""

    depth: dict[tuple[int, int], int] = field(default_factory=dict)  # (dst, operand) -> slots
    transparent: dict[tuple[int, int], int] = field(default_factory=dict)  # slack-matching FIFOs
    ii: dict[int, float] = field(default_factory=dict)                # loop index -> Phi
    seconds: float = 0.0
    status: str = ""

    @property
    def count(self) -> int:
        return len(self.depth) + len(self.transparent)

    @property
    def slots(self) -> int:
        return sum(self.depth.values()) + sum(self.transparent.values())


class _Model:
    """Sparse rows of ``lo <= A x <= hi`` built incrementally."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def add(self, coeffs: dict[int, float], lo: float, hi: float = np.inf) -> None:
        r = len(self.lo)
        for c, v in coeffs.items():
            self.rows.append(r)
            self.cols.append(c)
            self.vals.append(v)
        self.lo.append(lo)
        self.hi.append(hi)

    def matrix(self, size: int):
        return coo_matrix((self.vals, (self.rows, self.cols)), shape=(len(self.lo), size))


def place_buffers(circuit: Circuit, cp_levels: int = CP_LEVELS,
                  time_limit: float = 20.0, ii_floor: dict[int, int] | None = None
                  ) -> Buffering:
    """Solve the placement MILP, then size the buffers by slack matching.

    ``ii_floor`` (loop index -> cycles) bounds a loop's II from below where a shared resource
    must serve several operations per iteration (a memory port: :func:`.memory.port_pressure`).
    """
    ii_floor = ii_floor or {}
    began = time.perf_counter()
    g, channels = circuit.graph, circuit.channels
    nodes = sorted(g.nodes)
    n_ch, n_nodes = len(channels), len(nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    b0, t0, o0 = 0, n_ch, n_ch + n_nodes
    size = o0 + n_nodes
    loop_vars: list[tuple[int, dict[int, int]]] = []
    for loop in circuit.loops:
        phi = size
        r = {v: size + 1 + k for k, v in enumerate(sorted(loop.body))}
        loop_vars.append((phi, r))
        size += 1 + len(r)
    lv = {n: levels(g.nodes[n], circuit.width.get(Port(n, 0), 32)) for n in nodes}
    model = _Model()
    big_t = cp_levels + max(lv.values(), default=0) + 1
    big_o = n_nodes + 1
    for e, (u, v, _) in enumerate(channels):
        if g.nodes[u].kind not in REGISTERED and unit_latency(g.nodes[u]) == 0:
            model.add({t0 + pos[v]: 1, t0 + pos[u]: -1, b0 + e: big_t}, lv[u])
        model.add({o0 + pos[v]: 1, o0 + pos[u]: -1, b0 + e: big_o}, 1)
    for loop, (phi, r) in zip(circuit.loops, loop_vars, strict=True):
        heads = set(loop.heads)
        for e, (u, v, operand) in enumerate(channels):
            if u not in r or v not in r:
                continue
            lat = unit_latency(g.nodes[u])
            if is_back_edge(g, v, operand):
                if v in heads:
                    model.add({r[v]: 1, r[u]: -1, b0 + e: -1, phi: 1}, lat)
            else:
                model.add({r[v]: 1, r[u]: -1, b0 + e: -1}, lat)
    cost = np.zeros(size)
    for e, (_, v, operand) in enumerate(channels):
        cost[b0 + e] = BIT_COST * (1 + circuit.channel_width(v, operand))
    for loop, (phi, _) in zip(circuit.loops, loop_vars, strict=True):
        cost[phi] = 8.0 ** loop.depth
    lower = np.zeros(size)
    upper = np.full(size, 1e4)
    upper[b0:t0] = 1
    for n in nodes:
        upper[t0 + pos[n]] = max(cp_levels - lv[n], 0)
        upper[o0 + pos[n]] = n_nodes
    for k, (phi, _) in enumerate(loop_vars):
        lower[phi] = max(1, ii_floor.get(k, 1))
    integrality = np.zeros(size)
    integrality[b0:t0] = 1
    result = milp(cost, constraints=LinearConstraint(model.matrix(size).tocsr(), model.lo,
                                                     model.hi),
                  integrality=integrality, bounds=Bounds(lower, upper),
                  options=dict(time_limit=time_limit, disp=False))
    if result.x is None:  # never expected: buffering every channel is always feasible
        chosen = set(range(n_ch))
        status = f"fallback (HiGHS: {result.message})"
    else:
        chosen = {e for e in range(n_ch) if result.x[b0 + e] > 0.5}
        status = "optimal" if result.status == 0 else f"time limit ({result.message})"
    buffering = Buffering(status=status)
    for e in chosen:
        _, v, operand = channels[e]
        buffering.depth[(v, operand)] = 2
    _size_by_slack(circuit, buffering, ii_floor)
    _decouple(circuit, buffering)
    buffering.seconds = time.perf_counter() - began
    return buffering


def loop_iis(circuit: Circuit, buffered: set[tuple[int, int]]) -> list[float]:
    """Each loop's II under a buffering: its maximum cycle latency (one token per cycle)."""
    out = []
    for loop in circuit.loops:
        edges = _loop_edges(circuit, loop, buffered)
        lo, hi = 1, 1 + sum(w for *_, w, _ in edges)
        while lo < hi:  # the smallest II with no positive cycle (binary search)
            mid = (lo + hi) // 2
            if _asap(loop.body, edges, mid) is None:
                lo = mid + 1
            else:
                hi = mid
        out.append(float(lo))
    return out


def _loop_edges(circuit: Circuit, loop, buffered: set[tuple[int, int]]):
    g, heads = circuit.graph, set(loop.heads)
    edges = []
    for u, v, operand in circuit.channels:
        if u not in loop.body or v not in loop.body:
            continue
        back = is_back_edge(g, v, operand)
        if back and v not in heads:
            continue
        w = unit_latency(g.nodes[u]) + int((v, operand) in buffered)
        edges.append((u, v, operand, w, int(back)))
    return edges


def _asap(body: set[int], edges, ii: float) -> dict[int, float] | None:
    """Longest-path (ASAP) times with II fixed; None if a cycle is positive (II too small)."""
    r = dict.fromkeys(body, 0.0)
    for _ in range(len(body) + 1):
        changed = False
        for u, v, _, w, back in edges:
            if r[u] + w - ii * back > r[v] + 1e-9:
                r[v] = r[u] + w - ii * back
                changed = True
        if not changed:
            return r
    return None


def _size_by_slack(circuit: Circuit, buffering: Buffering,
                   ii_floor: dict[int, int] | None = None) -> None:
    """Fix each loop's II, schedule ASAP, and give waiting tokens somewhere to wait."""
    buffered = set(buffering.depth)
    iis = [max(ii, float((ii_floor or {}).get(k, 1)))
           for k, ii in enumerate(loop_iis(circuit, buffered))]
    order = sorted(range(len(circuit.loops)), key=lambda k: circuit.loops[k].depth)
    for k in order:  # inner loops last: their (smaller) II decides shared channels
        loop, ii = circuit.loops[k], iis[k]
        buffering.ii[k] = ii
        edges = _loop_edges(circuit, loop, buffered)
        r = _asap(loop.body, edges, ii)
        if r is None:
            continue
        for u, v, operand, w, back in edges:
            if back:
                continue
            slack = r[v] - r[u] - w
            if slack < 1 - 1e-9:
                continue
            tokens = min(math.ceil(slack / ii), MAX_DEPTH)
            if (v, operand) in buffered:
                buffering.depth[(v, operand)] = max(buffering.depth[(v, operand)], tokens + 1)
            else:
                buffering.transparent[(v, operand)] = max(
                    buffering.transparent.get((v, operand), 0), tokens)


def _decouple(circuit: Circuit, buffering: Buffering) -> None:
    """One slot of capacity on every channel that has none (see module docstring)."""
    for _, v, operand in circuit.channels:
        key = (v, operand)
        if key not in buffering.depth and key not in buffering.transparent:
            buffering.transparent[key] = 1


def critical_levels(circuit: Circuit, buffering: Buffering) -> int:
    """Deepest register-to-register path (LUT levels) of the buffered circuit.

    Elastic buffers and registered units (memory ports, pipelined arithmetic) start a path
    afresh; transparent FIFOs do not (their data and valid pass straight through).
    """
    import networkx as nx

    g = circuit.graph
    comb = nx.DiGraph()
    comb.add_nodes_from(g.nodes)
    for u, v, operand in circuit.channels:
        registered = g.nodes[u].kind in REGISTERED or unit_latency(g.nodes[u]) > 0
        if (v, operand) not in buffering.depth and not registered:
            comb.add_edge(u, v)
    depth = {n: levels(g.nodes[n], circuit.width.get(Port(n, 0), 32)) for n in g.nodes}
    arrival: dict[int, int] = {}
    for n in nx.topological_sort(comb):
        arrival[n] = depth[n] + max((arrival[p] for p in comb.predecessors(n)), default=0)
    return max(arrival.values(), default=0)


def placement_cost(circuit: Circuit, buffered: set[tuple[int, int]]) -> float:
    """The MILP's objective for a given set of buffered channels (for reference checks)."""
    iis = loop_iis(circuit, buffered)
    cost = sum(8.0 ** loop.depth * ii for loop, ii in zip(circuit.loops, iis, strict=True))
    return cost + sum(BIT_COST * (1 + circuit.channel_width(v, i)) for v, i in buffered)


def placement_feasible(circuit: Circuit, buffered: set[tuple[int, int]],
                       cp_levels: int = CP_LEVELS) -> bool:
    """Every cycle buffered and every register-to-register path within ``cp_levels``."""
    import networkx as nx

    open_graph = nx.DiGraph()
    open_graph.add_nodes_from(circuit.graph.nodes)
    open_graph.add_edges_from((u, v) for u, v, i in circuit.channels if (v, i) not in buffered)
    if not nx.is_directed_acyclic_graph(open_graph):
        return False
    return critical_levels(circuit, Buffering(depth=dict.fromkeys(buffered, 2))) <= cp_levels
