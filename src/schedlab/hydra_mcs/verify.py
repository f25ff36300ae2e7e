"""Independent checks: a mapping verifier and a brute-force solver for tiny graphs.

Deliberately written from the definition (plain Python over the adjacency matrices), sharing
no code with the bitset kernel, so a bug there cannot hide here.
"""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np

from schedlab.hydra_mcs.graph import Graph


def check_mapping(
    g0: Graph, g1: Graph, pairs: list[tuple[int, int]], connected: bool = False
) -> str | None:
    """None when ``pairs`` is a common induced subgraph; else the first violation found."""
    left = [v for v, _ in pairs]
    right = [w for _, w in pairs]
    if len(set(left)) != len(left) or len(set(right)) != len(right):
        return "mapping is not injective"
    for v, w in pairs:
        if not (0 <= v < g0.n and 0 <= w < g1.n):
            return f"pair ({v}, {w}) names a missing vertex"
        if g0.labels[v] != g1.labels[w]:
            return f"labels differ on ({v}, {w})"
    for (v1, w1), (v2, w2) in itertools.combinations(pairs, 2):
        if g0.adj[v1, v2] != g1.adj[w1, w2] or g0.adj[v2, v1] != g1.adj[w2, w1]:
            return f"adjacency differs between ({v1}, {w1}) and ({v2}, {w2})"
    if connected and len(pairs) > 1:
        sub = nx.Graph()
        sub.add_nodes_from(left)
        sub.add_edges_from(
            (a, b) for a, b in itertools.combinations(left, 2) if g0.adj[a, b] or g0.adj[b, a]
        )
        if not nx.is_connected(sub):
            return "mapped subgraph is not connected"
    return None


def brute_force(g0: Graph, g1: Graph, connected: bool = False) -> int:
    """Size of a maximum common induced subgraph by trying every subset (n <= ~8)."""
    for size in range(min(g0.n, g1.n), 0, -1):
        for sub0 in itertools.combinations(range(g0.n), size):
            for sub1 in itertools.permutations(range(g1.n), size):
                if check_mapping(g0, g1, list(zip(sub0, sub1, strict=True)), connected) is None:
                    return size
    return 0


def ismags_size(g0: Graph, g1: Graph) -> int:
    """Maximum common induced subgraph size via NetworkX ISMAGS (undirected, labels equal)."""
    from networkx.algorithms.isomorphism import ISMAGS

    def as_nx(g: Graph) -> nx.Graph:
        h = nx.Graph()
        for v in range(g.n):
            h.add_node(v, label=int(g.labels[v]))
        rows, cols = np.nonzero(g.adj)
        h.add_edges_from((int(a), int(b)) for a, b in zip(rows, cols, strict=True) if a < b)
        return h

    a, b = as_nx(g0), as_nx(g1)
    if a.number_of_nodes() == 0 or b.number_of_nodes() == 0:
        return 0
    ismags = ISMAGS(a, b, node_match=lambda x, y: x["label"] == y["label"])
    best = next(iter(ismags.largest_common_subgraph(symmetry=False)), {})
    return len(best)
