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

from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import BadInputError

LOOP_BIT = np.uint32(1 << 31)
WORD = 64


class Graph:
    """A graph in McSplit's encoding: ``adj[v, u]`` is 0 (no edge) or the edge's value.

    Held as edge arrays (the non-zero entries of that matrix: ``rows``, ``cols``, ``vals``,
    sorted row-major, one per ordered pair) so a large sparse graph never costs n*n memory;
    the dense ``adj`` matrix is built on first use only (verifier, certificates, NetworkX
    export, small tests) and cached. ``Graph(adj, labels, directed, name)`` still takes a
    dense matrix (its edge arrays are then derived on demand).
    """

    __slots__ = ("_adj", "_coo", "labels", "directed", "name", "_n")

    def __init__(
        self, adj: np.ndarray | None, labels: np.ndarray, directed: bool = False, name: str = ""
    ) -> None:
        labels = np.asarray(labels)
        if adj is not None:
            if adj.ndim != 2 or adj.shape[0] != adj.shape[1]:
                raise BadInputError("adjacency must be a square matrix", field="adj")
            if labels.shape != (adj.shape[0],):
                raise BadInputError("one label per vertex is needed", field="labels")
            self._n = int(adj.shape[0])
        else:
            self._n = int(labels.shape[0])
        self._adj = adj
        self._coo: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.labels = labels
        self.directed = directed
        self.name = name

    @classmethod
    def from_coo(
        cls,
        n: int,
        rows: np.ndarray,
        cols: np.ndarray,
        vals: np.ndarray,
        labels: np.ndarray,
        directed: bool = False,
        name: str = "",
    ) -> Graph:
        """A graph from its matrix's non-zero entries (sorted row-major, unique, vals > 0)."""
        if labels.shape != (n,):
            raise BadInputError("one label per vertex is needed", field="labels")
        g = cls(None, labels, directed, name)
        g._coo = (
            rows.astype(np.int64, copy=False),
            cols.astype(np.int64, copy=False),
            vals.astype(np.uint32, copy=False),
        )
        return g

    @property
    def n(self) -> int:
        return self._n

    @property
    def sparse(self) -> bool:
        """True while no dense matrix has been built (the solve path never builds one)."""
        return self._adj is None

    @property
    def adj(self) -> np.ndarray:
        if self._adj is None:
            rows, cols, vals = self._coo
            adj = np.zeros((self._n, self._n), dtype=np.uint32)
            adj[rows, cols] = vals
            self._adj = adj
        return self._adj

    def coo(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, cols, vals) of the non-zero entries, row-major."""
        if self._coo is None:
            rows, cols = np.nonzero(self._adj)
            self._coo = (
                rows.astype(np.int64),
                cols.astype(np.int64),
                self._adj[rows, cols].astype(np.uint32),
            )
        return self._coo

    @property
    def edge_entries(self) -> int:
        return int(self.coo()[0].size)

    def __repr__(self) -> str:
        kind = "directed" if self.directed else "undirected"
        return f"Graph({self.name!r}, n={self._n}, {self.edge_entries} entries, {kind})"


def from_edge_arrays(
    n: int,
    src: np.ndarray,
    dst: np.ndarray,
    val: np.ndarray | None = None,
    *,
    directed: bool = False,
    labels: np.ndarray | None = None,
    name: str = "",
) -> Graph:
    """Build a graph from edge arrays with McSplit's ``add_edge`` rules, in NumPy, no n*n.

    Edges are applied in array order: a loop sets the vertex's top label bit; undirected,
    ``adj[v,w] = adj[w,v] = val`` (the last write wins); directed, ``adj[v,w] |= val`` and
    ``adj[w,v] |= val << 16``.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    val = np.ones(src.size, np.uint32) if val is None else np.asarray(val, dtype=np.uint32)
    labels = np.zeros(n, np.uint32) if labels is None else labels.astype(np.uint32, copy=True)
    loop = src == dst
    if loop.any():
        labels[src[loop]] |= LOOP_BIT
        keep = ~loop
        src, dst, val = src[keep], dst[keep], val[keep]
    if directed:
        r = np.concatenate([src, dst])
        c = np.concatenate([dst, src])
        v = np.concatenate([val, val << np.uint32(16)])
        key = r * n + c
        order = np.argsort(key, kind="stable")
        key, v = key[order], v[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if key.size else key
        v = np.bitwise_or.reduceat(v, starts) if key.size else v
        key = key[starts] if key.size else key
        nz = v != 0
        key, v = key[nz], v[nz]
    else:
        # writes interleaved (v,w), (w,v) per edge; the last write of each ordered pair wins
        r = np.stack([src, dst], axis=1).ravel()
        c = np.stack([dst, src], axis=1).ravel()
        v = np.repeat(val, 2)
        key = (r * n + c)[::-1]
        srt = np.argsort(key, kind="stable")  # stable: the last write comes first per key
        key = key[srt]
        first = np.r_[True, key[1:] != key[:-1]] if key.size else np.zeros(0, bool)
        key = key[first]
        v = v[::-1][srt][first]
        nz = v != 0
        key, v = key[nz], v[nz]
    return Graph.from_coo(n, key // n, key % n, v, labels, directed, name)


class GraphBuilder:
    """Accumulates edges with McSplit's ``add_edge`` rules (loops, directions, values)."""

    def __init__(self, n: int, directed: bool = False) -> None:
        if n < 0 or n > 65535:
            raise BadInputError(f"vertex count {n} out of range 0..65535", field="n")
        self.n = n
        self.directed = directed
        self.src: list[int] = []
        self.dst: list[int] = []
        self.val: list[int] = []
        self.labels = np.zeros(n, dtype=np.uint32)

    def add_edge(self, v: int, w: int, value: int = 1) -> None:
        """Add v->w (v-w when undirected); a loop marks the vertex, as McSplit does."""
        if not (0 <= v < self.n and 0 <= w < self.n):
            raise BadInputError(f"edge ({v}, {w}) names a vertex outside 0..{self.n - 1}")
        self.src.append(v)
        self.dst.append(w)
        self.val.append(value)

    def set_label(self, v: int, label: int) -> None:
        if not 0 <= v < self.n:
            raise BadInputError(f"vertex {v} outside 0..{self.n - 1}")
        if label < 0 or label >= (1 << 31):
            raise BadInputError(f"label {label} out of range 0..2^31-1")
        self.labels[v] |= np.uint32(label)

    def build(self, name: str = "") -> Graph:
        return from_edge_arrays(
            self.n,
            np.array(self.src, np.int64),
            np.array(self.dst, np.int64),
            np.array(self.val, np.uint32),
            directed=self.directed,
            labels=self.labels,
            name=name,
        )


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
    rows, cols, vals = graph.coo()
    low = vals & np.uint32(0xFFFF)
    for v, u, x in zip(rows.tolist(), cols.tolist(), low.tolist(), strict=True):
        if graph.directed and x:
            g.add_edge(v, u, label=x)
        elif not graph.directed and v < u:
            g.add_edge(v, u, label=x)
    return g


def degrees(graph: Graph) -> np.ndarray:
    """McSplit's degree: out- and in-edges counted separately in the directed case."""
    rows, _, vals = graph.coo()
    low = (vals & np.uint32(0xFFFF)) != 0
    high = (vals & ~np.uint32(0xFFFF)) != 0
    return np.bincount(rows[low], minlength=graph.n) + np.bincount(rows[high], minlength=graph.n)


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
    """The graph with vertex ``order[i]`` renamed ``i`` (edge arrays only, O(edges))."""
    n = graph.n
    rows, cols, vals = graph.coo()
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n, dtype=np.int64)
    key = inv[rows] * n + inv[cols]
    srt = np.argsort(key, kind="stable")
    key = key[srt]
    return Graph.from_coo(
        n, key // n, key % n, vals[srt], graph.labels[order], graph.directed, graph.name
    )


def strip_labels(graph: Graph, vertex: bool, edge: bool) -> Graph:
    """Drop vertex and/or edge labels, keeping loops and directions (McSplit's -x / -a flags)."""
    labels = graph.labels if vertex else graph.labels & LOOP_BIT
    rows, cols, vals = graph.coo()
    if not edge:
        if graph.directed:
            vals = ((vals & np.uint32(0xFFFF)) != 0).astype(np.uint32) | (
                ((vals >> np.uint32(16)) != 0).astype(np.uint32) << np.uint32(16)
            )
        else:
            vals = np.ones(vals.size, np.uint32)
    return Graph.from_coo(graph.n, rows, cols, vals, labels, graph.directed, graph.name)


@dataclass(frozen=True)
class BitsetPair:
    """Both graphs as neighbourhood bitsets split by edge value (the kernel's input)."""

    nb0: np.ndarray  # (n0, K, W) uint64: u in nb0[v, k] iff adj0[v, u] == values[k]
    nb1: np.ndarray  # (n1, K, W)
    any0: np.ndarray  # (n0, W): any edge (a view of nb0 when K == 1)
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


def _scatter_bits(n: int, k_classes: int, words: int, rows, klass, cols) -> np.ndarray:
    """(n, K, words) bitsets with bit ``cols[i]`` set in row (rows[i], klass[i]), from the
    edge arrays (no n*n intermediate): the memory is n*K*words*8 bytes."""
    out = np.zeros(n * k_classes * words, np.uint64)
    if rows.size:
        idx = (rows * k_classes + klass) * words + (cols >> 6)
        bit = np.left_shift(np.uint64(1), (cols & 63).astype(np.uint64))
        np.bitwise_or.at(out, idx, bit)
    return out.reshape(n, k_classes, words)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique without it (NumPy 2's unique imports numpy.ma: ~0.03 s of every call)."""
    a = np.sort(a)
    return a[np.r_[True, a[1:] != a[:-1]]] if a.size else a


def to_bitsets(g0: Graph, g1: Graph) -> BitsetPair:
    """Bitset neighbourhoods per edge value and the initial bidomains (one per shared label).

    Built from the edge arrays: O(edges + n*K*words) time and memory, never n*n.
    """
    words = max(1, -(-max(g0.n, g1.n) // WORD))
    r0, c0, v0 = g0.coo()
    r1, c1, v1 = g1.coo()
    values = _sorted_unique(np.concatenate([v0, v1])).astype(np.uint32)
    if values.size == 0:
        values = np.array([1], dtype=np.uint32)
    k = int(values.size)
    nb0 = _scatter_bits(g0.n, k, words, r0, np.searchsorted(values, v0), c0)
    nb1 = _scatter_bits(g1.n, k, words, r1, np.searchsorted(values, v1), c1)
    if k == 1:
        any0, any1 = nb0.reshape(g0.n, words), nb1.reshape(g1.n, words)
    else:
        any0 = _scatter_bits(g0.n, 1, words, r0, 0, c0).reshape(g0.n, words)
        any1 = _scatter_bits(g1.n, 1, words, r1, 0, c1).reshape(g1.n, words)
    l0, l1 = _sorted_unique(g0.labels), _sorted_unique(g1.labels)
    at = np.searchsorted(l1, l0)
    inside = at < l1.size
    common = np.zeros(l0.size, bool)
    common[inside] = l1[at[inside]] == l0[inside]
    shared = l0[common]
    init_l = _bits(g0.labels[None, :] == shared[:, None], words)
    init_r = _bits(g1.labels[None, :] == shared[:, None], words)
    return BitsetPair(
        nb0,
        nb1,
        any0,
        any1,
        values,
        init_l.reshape(-1, words),
        init_r.reshape(-1, words),
        words,
    )
