"""Graphs as McSplit sees them, and the bitset form the search kernel works on.

Hydra-MCS (paper: ../shared/papers/02-hydra_mcs.md) builds on McSplit (Trimble & McCreesh,
IJCAI 2017). We keep McSplit's encoding of a graph exactly, because the deterministic mode must
explore the very same search tree: an edge is an unsigned value in an adjacency matrix (1 for a
plain edge, ``label + 1`` for a labelled one; in a directed graph the outgoing value sits in the
low 16 bits and the incoming one in the high 16 bits), and a self-loop sets the top bit of the
vertex's label. Two vertices are compatible when their labels are equal; two pairs are
compatible when the adjacency values are equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schedlab.core.errors import BadInputError

LOOP_BIT = np.uint32(1 << 31)
WORD = 64


@dataclass(frozen=True)
class Graph:
    """A graph in McSplit's encoding: ``adj[v, u]`` is 0 (no edge) or the edge's value."""

    adj: np.ndarray  # (n, n) uint32
    labels: np.ndarray  # (n,) uint32; top bit = self-loop
    directed: bool = False
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.adj.ndim != 2 or self.adj.shape[0] != self.adj.shape[1]:
            raise BadInputError("adjacency must be a square matrix", field="adj")
        if self.labels.shape != (self.adj.shape[0],):
            raise BadInputError("one label per vertex is needed", field="labels")

    @property
    def n(self) -> int:
        return int(self.adj.shape[0])


class GraphBuilder:
    """Accumulates edges with McSplit's ``add_edge`` rules (loops, directions, values)."""

    def __init__(self, n: int, directed: bool = False) -> None:
        if n < 0 or n > 65535:
            raise BadInputError(f"vertex count {n} out of range 0..65535", field="n")
        self.n = n
        self.directed = directed
        self.adj = np.zeros((n, n), dtype=np.uint32)
        self.labels = np.zeros(n, dtype=np.uint32)

    def add_edge(self, v: int, w: int, value: int = 1) -> None:
        """Add v->w (v-w when undirected); a loop marks the vertex, as McSplit does."""
        if not (0 <= v < self.n and 0 <= w < self.n):
            raise BadInputError(f"edge ({v}, {w}) names a vertex outside 0..{self.n - 1}")
        if v == w:
            self.labels[v] |= LOOP_BIT
        elif self.directed:
            self.adj[v, w] |= np.uint32(value)
            self.adj[w, v] |= np.uint32(value << 16)
        else:
            self.adj[v, w] = value
            self.adj[w, v] = value

    def set_label(self, v: int, label: int) -> None:
        if not 0 <= v < self.n:
            raise BadInputError(f"vertex {v} outside 0..{self.n - 1}")
        if label < 0 or label >= (1 << 31):
            raise BadInputError(f"label {label} out of range 0..2^31-1")
        self.labels[v] |= np.uint32(label)

    def build(self, name: str = "") -> Graph:
        return Graph(self.adj.copy(), self.labels.copy(), self.directed, name)


class LabelTable:
    """Maps label values of any hashable type to the small integers McSplit's encoding uses.

    One table is shared by both graphs of a pair, so equal values (``"C" == "C"``, ``1 ==
    1.0``) get equal codes and the search compares labels by equality only. A node or edge
    without the attribute has the value ``None`` (so it matches another without it).
    """

    def __init__(self, what: str, limit: int) -> None:
        self.what, self.limit = what, limit
        self.codes: dict = {}

    def code(self, value, where: str) -> int:
        try:
            found = self.codes.get(value)
        except TypeError:  # unhashable: a list, a dict, a NumPy array ...
            raise BadInputError(
                f"{self.what} label {value!r} of {where} is not hashable "
                f"({type(value).__name__}); use a str, number or tuple",
                field=self.what,
            ) from None
        if found is None:
            if len(self.codes) >= self.limit:
                raise BadInputError(
                    f"more than {self.limit} distinct {self.what} labels", field=self.what
                )
            found = self.codes[value] = len(self.codes)
        return found


def from_networkx(
    g,
    *,
    node_label: str | None = None,
    edge_label: str | None = None,
    directed: bool | None = None,
    node_table: LabelTable | None = None,
    edge_table: LabelTable | None = None,
) -> tuple[Graph, list]:
    """Convert a NetworkX graph; returns the graph and the node order (index -> node).

    Nodes may be any hashable objects. Label values (the ``node_label`` / ``edge_label``
    attributes) may be any hashable values: they are coded by a :class:`LabelTable`; pass the
    *same* ``node_table`` / ``edge_table`` when converting the two graphs of a pair (as
    :func:`~schedlab.hydra_mcs.api.maximum_common_induced_subgraph` does), or the codes of
    the two graphs will not agree. A multigraph is refused (an induced subgraph of one is not
    McSplit's problem).
    """
    if not hasattr(g, "nodes") or not hasattr(g, "edges") or not hasattr(g, "is_directed"):
        raise BadInputError(f"expected a NetworkX graph, got {type(g).__name__}", field="graph")
    if g.is_multigraph():
        raise BadInputError(
            "multigraphs are not supported; convert with nx.Graph(G) or nx.DiGraph(G) first",
            field="graph",
        )
    nodes = list(g.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    is_directed = g.is_directed() if directed is None else directed
    if node_label is not None and node_table is None:
        node_table = LabelTable("node", (1 << 31) - 1)
    if edge_label is not None and edge_table is None:
        edge_table = LabelTable("edge", (1 << 16) - 2)
    builder = GraphBuilder(len(nodes), directed=is_directed)
    if node_label is not None:
        for node, data in g.nodes(data=True):
            builder.set_label(index[node], node_table.code(data.get(node_label), f"node {node!r}"))
    for u, v, data in g.edges(data=True):
        value = (
            1
            if edge_label is None
            else edge_table.code(data.get(edge_label), f"edge ({u!r}, {v!r})") + 1
        )
        builder.add_edge(index[u], index[v], value)
    return builder.build(), nodes


def to_networkx(graph: Graph):
    """A NetworkX view (used by the ISMAGS cross-check and by users)."""
    import networkx as nx

    g = nx.DiGraph() if graph.directed else nx.Graph()
    for v in range(graph.n):
        g.add_node(v, label=int(graph.labels[v]))
    rows, cols = np.nonzero(graph.adj & np.uint32(0xFFFF) if graph.directed else graph.adj)
    for v, u in zip(rows.tolist(), cols.tolist(), strict=True):
        if graph.directed or v < u:
            g.add_edge(v, u, label=int(graph.adj[v, u] & np.uint32(0xFFFF)))
    return g


def degrees(graph: Graph) -> np.ndarray:
    """McSplit's degree: out- and in-edges counted separately in the directed case."""
    low = (graph.adj & np.uint32(0xFFFF)) != 0
    high = (graph.adj & ~np.uint32(0xFFFF)) != 0
    return low.sum(axis=1) + high.sum(axis=1)


def mcsplit_order(g0: Graph, g1: Graph) -> tuple[np.ndarray, np.ndarray]:
    """McSplit's vertex order: stable sort by descending degree (ascending if the other graph
    is dense), so the search tree is the reference's."""
    d0, d1 = degrees(g0), degrees(g1)
    dense0 = int(d0.sum()) > g0.n * (g0.n - 1)
    dense1 = int(d1.sum()) > g1.n * (g1.n - 1)
    order0 = np.argsort(d0 if dense1 else -d0, kind="stable")
    order1 = np.argsort(d1 if dense0 else -d1, kind="stable")
    return order0.astype(np.int64), order1.astype(np.int64)


def induced(graph: Graph, order: np.ndarray) -> Graph:
    return Graph(graph.adj[np.ix_(order, order)], graph.labels[order], graph.directed, graph.name)


def strip_labels(graph: Graph, vertex: bool, edge: bool) -> Graph:
    """Drop vertex and/or edge labels, keeping loops and directions (McSplit's -x / -a flags)."""
    labels = graph.labels if vertex else graph.labels & LOOP_BIT
    adj = graph.adj
    if not edge:
        if graph.directed:
            adj = ((adj & np.uint32(0xFFFF)) != 0).astype(np.uint32) | (
                ((adj >> np.uint32(16)) != 0).astype(np.uint32) << np.uint32(16)
            )
        else:
            adj = (adj != 0).astype(np.uint32)
    return Graph(adj, labels, graph.directed, graph.name)


@dataclass(frozen=True)
class BitsetPair:
    """Both graphs as neighbourhood bitsets split by edge value (the kernel's input)."""

    nb0: np.ndarray  # (n0, K, W) uint64: u in nb0[v, k] iff adj0[v, u] == values[k]
    nb1: np.ndarray  # (n1, K, W)
    any0: np.ndarray  # (n0, W): any edge
    any1: np.ndarray
    values: np.ndarray  # (K,) the distinct non-zero edge values of both graphs
    init_l: np.ndarray  # (D, W) initial left sets, one per label shared by both graphs
    init_r: np.ndarray  # (D, W)
    words: int


def _bits(mask: np.ndarray, words: int) -> np.ndarray:
    """Pack boolean rows (..., n) into (..., words) little-endian uint64 bitsets."""
    n = mask.shape[-1]
    padded = np.zeros((*mask.shape[:-1], words * WORD), dtype=bool)
    padded[..., :n] = mask
    packed = np.packbits(padded, axis=-1, bitorder="little")
    return packed.view(np.uint64).reshape(*mask.shape[:-1], words).copy()


def to_bitsets(g0: Graph, g1: Graph) -> BitsetPair:
    """Bitset neighbourhoods per edge value and the initial bidomains (one per shared label)."""
    words = max(1, -(-max(g0.n, g1.n) // WORD))
    values = np.union1d(np.unique(g0.adj), np.unique(g1.adj))
    values = values[values != 0].astype(np.uint32)
    if values.size == 0:
        values = np.array([1], dtype=np.uint32)
    nb0 = _bits(g0.adj[:, None, :] == values[None, :, None], words)
    nb1 = _bits(g1.adj[:, None, :] == values[None, :, None], words)
    shared = np.intersect1d(g0.labels, g1.labels)
    init_l = _bits(g0.labels[None, :] == shared[:, None], words)
    init_r = _bits(g1.labels[None, :] == shared[:, None], words)
    return BitsetPair(
        nb0,
        nb1,
        _bits(g0.adj != 0, words),
        _bits(g1.adj != 0, words),
        values,
        init_l.reshape(-1, words),
        init_r.reshape(-1, words),
        words,
    )
