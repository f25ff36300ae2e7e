"""Seeded instance generators and the real ARG benchmark pairs.

G(n, p) pairs are the classic McSplit benchmark family (random graphs of equal size and
density); a planted pair hides a known common induced subgraph, so its size is a lower bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.hydra_mcs.graph import LOOP_BIT, Graph, GraphBuilder
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
    """Write an undirected graph as ARG/MIVIA binary, so the reference McSplit can read it.

    Vertex labels are stored in the top bits that McSplit's (and :func:`read_arg`'s) label
    reduction keeps; edges carry label 0, so ``--labels all`` (McSplit ``-a``) reads the same
    graph as vertex labels only. Each edge is written once, from its smaller end.
    """
    from schedlab.hydra_mcs.readers import _arg_label_shift

    if graph.directed:
        raise BadInputError("write_arg writes undirected graphs only", field="directed")
    if (graph.labels & LOOP_BIT).any():  # the format has no loop mark: it would be dropped
        raise BadInputError("write_arg cannot keep self-loops", field="loops")
    if (graph.adj > 1).any():  # it writes every edge with label 0
        raise BadInputError("write_arg cannot keep edge labels", field="edge labels")
    n = graph.n
    shift = _arg_label_shift(n)
    labels = graph.labels & ~LOOP_BIT
    if labels.size and int(labels.max()) >= (1 << (16 - shift)):
        raise BadInputError(
            f"labels must be below {1 << (16 - shift)} for n={n} in ARG", field="labels"
        )
    words = [n, *[int(x) << shift for x in labels]]
    for v in range(n):
        targets = [int(u) for u in np.nonzero(graph.adj[v])[0] if u > v]
        words.append(len(targets))
        for u in targets:
            words += [u, 0]
    path = Path(path)
    path.write_bytes(np.asarray(words, dtype="<u2").tobytes())
    return path
