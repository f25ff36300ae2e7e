"""The CGRA fabric the list and MILP mappers target, a mapping onto it, and the II bounds.

Why a module of its own: the list mapper (``cgra``), the exact modulo scheduler (``modulo``)
and the place-and-route router (``router``) all use the fabric, the mapping and the
ResMII/RecMII bounds, while ``cgra`` dispatches to the other two; the shared model sits below
all three.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from schedlab.core.errors import BadInputError
from schedlab.redpanda.graph import Graph
from schedlab.redpanda.simulator import Timing, node_latency

MEMORY_KINDS = frozenset({"load", "store"})


@dataclass(frozen=True)
class CGRA:
    """A rows x cols mesh; memory ops only on the border columns (next to the SRAM banks)."""

    rows: int = 4
    cols: int = 4
    contexts: int = 16         # instructions one PE can hold in temporal mode
    hop_latency: int = 1       # cycles per mesh hop beyond the first
    buffer_depth: int = 2      # default FIFO slots per PE input

    def __post_init__(self) -> None:
        if self.rows < 1 or self.cols < 2 or self.contexts < 1:
            raise BadInputError("a CGRA needs rows >= 1, cols >= 2 and contexts >= 1",
                                field="rows/cols/contexts")

    @property
    def pes(self) -> list[tuple[int, int]]:
        return [(r, c) for r in range(self.rows) for c in range(self.cols)]

    def memory_capable(self, pe: tuple[int, int]) -> bool:
        return pe[1] in (0, self.cols - 1)

    def hops(self, a: tuple[int, int], b: tuple[int, int]) -> int:
        return abs(a[0] - b[0]) + abs(a[1] - b[1])

    def delay(self, a: tuple[int, int], b: tuple[int, int]) -> int:
        return max(self.hops(a, b) - 1, 0) * self.hop_latency


@dataclass
class Mapping:
    """Where and when every instruction runs, and what that costs."""

    graph: Graph
    arch: CGRA
    mode: str
    ii: int
    min_ii: int
    res_mii: int
    rec_mii: int
    place: dict[int, tuple[int, int]] = field(default_factory=dict)
    start: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    mapper: str = "list"
    slot_ii: int = 0  # II of the modulo reservation table (contexts used per PE)

    def timing(self, size_buffers: bool) -> Timing:
        """Latencies, routing delays and FIFO depths for the cycle simulator."""
        delay, capacity = {}, {}
        for src, dst, operand in self.graph.edges():
            if src in self.place and dst in self.place:
                delay[(dst, operand)] = self.arch.delay(self.place[src], self.place[dst])
            if size_buffers and src in self.start and dst in self.start:
                life = self.start[dst] - self.start[src] + (self.ii if back_edge(
                    self.graph, dst, operand) else 0)
                capacity[(dst, operand)] = max(self.arch.buffer_depth,
                                               math.ceil(max(life, 1) / self.ii) + 1)
        pe_of = None
        if self.mode == "temporal":
            index = {pe: i for i, pe in enumerate(self.arch.pes)}
            pe_of = {n: index[pe] for n, pe in self.place.items()}
        return Timing(delay=delay, capacity=capacity, default_capacity=self.arch.buffer_depth,
                      pe_of=pe_of)

    def metrics(self) -> dict[str, float]:
        used = len(set(self.place.values()))
        n = len(self.place)
        return dict(ii=self.ii, min_ii=self.min_ii, res_mii=self.res_mii, rec_mii=self.rec_mii,
                    slot_ii=self.slot_ii, instructions=n, pes_used=used,
                    pe_utilisation=n / (len(self.arch.pes) * self.ii),
                    mapping_seconds=self.seconds)


def back_edge(graph: Graph, dst: int, operand: int) -> bool:
    """Operands consumed for the *next* emission of a loop operator (distance 1)."""
    kind = graph.nodes[dst].kind
    return (kind == "carry" and operand >= 1) or (kind == "invariant" and operand == 0)


def mapped_nodes(graph: Graph) -> list[int]:
    return [n.id for n in graph.instructions()]


def min_ii(graph: Graph, arch: CGRA, mode: str) -> tuple[int, int, int]:
    """(MII, ResMII, RecMII) assuming one-hop routing on every edge."""
    nodes = mapped_nodes(graph)
    n_mem = sum(graph.nodes[n].kind in MEMORY_KINDS for n in nodes)
    mem_pes = sum(arch.memory_capable(p) for p in arch.pes)
    if mode == "spatial":
        if len(nodes) > len(arch.pes) or n_mem > mem_pes:
            raise BadInputError(
                f"{graph.name}: {len(nodes)} instructions ({n_mem} memory) do not fit a "
                f"{arch.rows}x{arch.cols} spatial CGRA; use --temporal or a larger fabric",
                field="rows/cols")
        res = 1
    else:
        if len(nodes) > len(arch.pes) * arch.contexts or n_mem > mem_pes * arch.contexts:
            raise BadInputError(
                f"{graph.name}: {len(nodes)} instructions ({n_mem} memory) exceed "
                f"{arch.rows}x{arch.cols} PEs x {arch.contexts} contexts", field="contexts")
        res = max(math.ceil(len(nodes) / len(arch.pes)), math.ceil(n_mem / max(mem_pes, 1)))
    rec = rec_mii(graph, {})
    return max(res, rec), res, rec


def rec_mii(graph: Graph, extra: dict[tuple[int, int], int], latency=node_latency) -> int:
    """Smallest II with no positive cycle of latency - II * distance (Bellman-Ford);
    ``latency(node)`` gives unit latencies (default: the token simulator's)."""
    lat = {n.id: latency(n) for n in graph.nodes.values()}
    edges = [(s, d, lat[s] + extra.get((d, i), 0), int(back_edge(graph, d, i)))
             for s, d, i in graph.edges()]
    if not any(dist for *_, dist in edges):
        return 1

    def feasible(ii: int) -> bool:
        dist = dict.fromkeys(graph.nodes, 0)
        for _ in range(len(graph.nodes)):
            changed = False
            for s, d, w, k in edges:
                if dist[s] + w - ii * k > dist[d]:
                    dist[d] = dist[s] + w - ii * k
                    changed = True
            if not changed:
                return True
        return False

    lo, hi = 1, max(1, sum(w for _, _, w, _ in edges))
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if feasible(mid) else (mid + 1, hi)
    return lo
