"""Seeded instance generators and the real ARG benchmark pairs.

G(n, p) pairs are the classic McSplit benchmark family (random graphs of equal size and
density); a planted pair hides a known common induced subgraph, so its size is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.hydra_mcs.graph import LOOP_BIT, Graph, GraphBuilder, from_edge_arrays
from schedlab.hydra_mcs.readers import read_arg


@dataclass(frozen=True)
class Instance:
    name: str
    g0: Graph
    g1: Graph
    planted: int = 0  # a known lower bound (0: none)


def gnp(n: int, p: float, rng: np.random.Generator, directed: bool = False) -> Graph:
    """An Erdos-Renyi graph (each ordered/unordered pair independently with probability p)."""
    upper = rng.random((n, n)) < p
    np.fill_diagonal(upper, False)
    if not directed:
        upper = np.triu(upper, 1)
    b = GraphBuilder(n, directed)
    for v, w in zip(*np.nonzero(upper), strict=True):
        b.add_edge(int(v), int(w))
    return b.build(f"gnp-{n}-{p}")


def gnp_pairs(count: int, n: int, p: float, seed: int) -> list[Instance]:
    """``count`` seeded G(n,p) pairs."""
    rng = np.random.default_rng(seed)
    return [
        Instance(f"gnp{n}-p{p:.2f}-s{seed}-{i}", gnp(n, p, rng), gnp(n, p, rng))
        for i in range(count)
    ]


def planted_pair(n: int, k: int, p: float, seed: int) -> Instance:
    """Two G(n,p) graphs that share an induced copy of one k-vertex graph."""
    rng = np.random.default_rng(seed)
    core = gnp(k, p, rng)
    graphs = []
    for _ in range(2):
        g = gnp(n, p, rng)
        where = rng.permutation(n)[:k]
        adj = g.adj.copy()
        adj[np.ix_(where, where)] = core.adj
        graphs.append(Graph(adj, g.labels.copy()))
    return Instance(f"planted{n}-{k}-s{seed}", graphs[0], graphs[1], planted=k)


def arg_pairs(folder: str | Path) -> list[Instance]:
    """The sXX.A0k / sXX.B0k pairs of an ARG folder (read unlabelled, undirected)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadInputError("no such directory", path=folder)
    out = []
    for a in sorted(folder.glob("*.A*")):
        b = a.with_name(a.name.replace(".A", ".B"))
        if b.is_file():
            out.append(Instance(a.name.replace(".A", "."), read_arg(a), read_arg(b)))
    return out


def vertex_labelled(graph: Graph, labels: int, rng: np.random.Generator) -> Graph:
    """The same graph with each vertex given a label drawn uniformly from 0..labels-1."""
    drawn = rng.integers(0, labels, graph.n).astype(np.uint32)
    return Graph(graph.adj.copy(), (graph.labels & LOOP_BIT) | drawn, graph.directed, graph.name)


def write_arg(graph: Graph, path: str | Path) -> Path:
    """Write a graph as ARG/MIVIA binary, so the reference McSplit can read it.

    Vertex and edge labels are stored in the top bits that McSplit's (and :func:`read_arg`'s)
    label reduction keeps (an edge of value x is written with label x - 1). Undirected: each
    edge is written once, from its smaller end. Directed: each arc once, from its tail (both
    McSplit and :func:`read_arg` rebuild the in-halves). Self-loops are refused (the format has
    no loop mark).
    """
    from schedlab.hydra_mcs.readers import _arg_label_shift

    if (graph.labels & LOOP_BIT).any():  # the format has no loop mark: it would be dropped
        raise BadInputError("write_arg cannot keep self-loops", field="loops")
    n = graph.n
    shift = _arg_label_shift(n)
    limit = 1 << (16 - shift)
    labels = (graph.labels & ~LOOP_BIT).astype(np.int64)
    if labels.size and int(labels.max()) >= limit:
        raise BadInputError(f"labels must be below {limit} for n={n} in ARG", field="labels")
    rows, cols, vals = graph.coo()
    if graph.directed:
        out = (vals & np.uint32(0xFFFF)).astype(np.int64)
        keep = out != 0
        rows, cols, elab = rows[keep], cols[keep], out[keep] - 1
    else:
        keep = cols > rows
        rows, cols, elab = rows[keep], cols[keep], vals[keep].astype(np.int64) - 1
    if elab.size and int(elab.max()) >= limit:
        raise BadInputError(f"edge labels must be below {limit} for n={n} in ARG", field="labels")
    counts = np.bincount(rows, minlength=n)
    body = np.empty(n + 2 * rows.size, np.int64)
    # per vertex: its count, then (target, label) pairs; rows are sorted, so runs are in order
    slot = np.arange(n) + 2 * (np.cumsum(counts) - counts)
    body[slot] = counts
    pos = np.repeat(slot + 1, counts) + 2 * (
        np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
    )
    body[pos] = cols
    body[pos + 1] = elab << shift
    words = np.concatenate([[n], labels << shift, body])
    path = Path(path)
    path.write_bytes(words.astype("<u2").tobytes())
    return path


def write_lad(graph: Graph, path: str | Path) -> Path:
    """Write an unlabelled graph as LAD text (n, then per vertex its degree and neighbours);
    undirected graphs list each edge at both ends, directed ones each arc at its tail."""
    rows, cols, vals = graph.coo()
    if graph.directed:
        keep = (vals & np.uint32(0xFFFF)) != 0
        rows, cols = rows[keep], cols[keep]
    counts = np.bincount(rows, minlength=graph.n)
    lines = [str(graph.n)]
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for v in range(graph.n):
        nbrs = cols[bounds[v] : bounds[v + 1]]
        lines.append(" ".join([str(int(counts[v])), *map(str, nbrs.tolist())]))
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path


def edge_labelled(graph: Graph, labels: int, rng: np.random.Generator) -> Graph:
    """The same graph with every edge given a label drawn from 0..labels-1 (value label+1);
    directed graphs keep McSplit's out/in halves consistent."""
    rows, cols, vals = graph.coo()
    if graph.directed:
        out = (vals & np.uint32(0xFFFF)) != 0
        src, dst = rows[out], cols[out]
        drawn = rng.integers(0, labels, src.size).astype(np.uint32) + 1
        return from_edge_arrays(
            graph.n, src, dst, drawn, directed=True, labels=graph.labels, name=graph.name
        )
    up = cols > rows
    src, dst = rows[up], cols[up]
    drawn = rng.integers(0, labels, src.size).astype(np.uint32) + 1
    return from_edge_arrays(graph.n, src, dst, drawn, labels=graph.labels, name=graph.name)


def sparse_pair(n: int, k: int, degree: float, seed: int, drop: int = 0) -> Instance:
    """A large sparse target G(n, degree/n) and a k-vertex pattern: the subgraph induced by a
    breadth-first ball of the target, relabelled at random, with ``drop`` of its edges removed
    (so the pattern is not always an induced subgraph). Built from edge arrays: no n*n."""
    rng = np.random.default_rng(seed)
    m = rng.binomial(n * (n - 1) // 2, degree / max(1, n - 1))
    a = rng.integers(0, n, int(m * 1.05) + 16)
    b = rng.integers(0, n, a.size)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = np.unique((lo * n + hi)[lo != hi])[:m]
    target = from_edge_arrays(n, key // n, key % n, name=f"sparse{n}-t")
    rows, cols, _ = target.coo()
    bounds = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    seen, frontier = [int(rng.integers(n))], 0
    chosen = {seen[0]}
    while frontier < len(seen) and len(seen) < k:
        v = seen[frontier]
        frontier += 1
        for u in rng.permutation(cols[bounds[v] : bounds[v + 1]]).tolist():
            if u not in chosen and len(seen) < k:
                chosen.add(u)
                seen.append(u)
    where = np.array(seen, np.int64)
    perm = rng.permutation(where.size)
    index = np.full(n, -1, np.int64)
    index[where[perm]] = np.arange(where.size)
    inside = (index[rows] >= 0) & (index[cols] >= 0) & (rows < cols)
    src, dst = index[rows[inside]], index[cols[inside]]
    if drop and src.size:
        keep = np.ones(src.size, bool)
        keep[rng.choice(src.size, min(drop, src.size), replace=False)] = False
        src, dst = src[keep], dst[keep]
    pattern = from_edge_arrays(where.size, src, dst, name=f"sparse{n}-p")
    return Instance(f"sparse{n}-k{k}-d{degree:g}-s{seed}", pattern, target)
