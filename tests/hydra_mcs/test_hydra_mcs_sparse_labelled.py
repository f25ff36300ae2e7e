"""Issue 49: the edge-array (sparse) path and the labelled split path, against the reference.

Reference (size, nodes) pairs below came from the reference C++ McSplit (james-cpp, built
unmodified) on the very ARG files these seeded generators write; ``write_arg`` and the readers
are exercised on the way, so a change in any of them shows up here.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from schedlab.hydra_mcs import solve_files
from schedlab.hydra_mcs.api import solve
from schedlab.hydra_mcs.graph import Graph, GraphBuilder, from_edge_arrays, to_bitsets
from schedlab.hydra_mcs.readers import read_arg, read_lad
from schedlab.hydra_mcs.verify import brute_force, check_mapping
from schedlab.hydra_mcs.workloads import (
    edge_labelled,
    gnp,
    sparse_pair,
    vertex_labelled,
    write_arg,
    write_lad,
)

LABELLED = {  # name: (n, p, seed, vertex labels, edge labels, directed)
    "e30": (30, 0.3, 41, 2, 3, False),
    "e24": (24, 0.5, 42, 1, 2, False),
    "d26": (26, 0.4, 43, 1, 2, True),
    "d22": (22, 0.3, 44, 2, 3, True),
}
REFERENCE = {  # (name, flags) -> (size, nodes) of the reference McSplit on the same files
    ("e30", "-a"): (12, 430057),
    ("e24", "-a"): (10, 327026),
    ("d26", "-i -a"): (7, 62848),
    ("d26", "-i"): (8, 309546),
    ("d22", "-i -a"): (6, 3155),
    ("d22", "-i"): (8, 82468),
    ("sp3000", ""): (30, 8894),
    ("sp8000", ""): (40, 8257),
}
SPARSE = {"sp3000": (3000, 30, 4.0, 5, 2), "sp8000": (8000, 40, 4.0, 1, 0)}
FLAGS = {
    "-a": dict(labels="all"),
    "-i -a": dict(labels="all", directed=True),
    "-i": dict(directed=True),
    "": {},
}


def _write(name: str, folder):
    if name in SPARSE:
        n, k, degree, seed, drop = SPARSE[name]
        inst = sparse_pair(n, k, degree, seed, drop)
        g0, g1 = inst.g0, inst.g1
    else:
        n, p, seed, vl, el, directed = LABELLED[name]
        rng = np.random.default_rng(seed)
        g0, g1 = (
            edge_labelled(vertex_labelled(gnp(n, p, rng, directed), vl, rng), el, rng)
            for _ in range(2)
        )
    return write_arg(g0, folder / f"{name}.A"), write_arg(g1, folder / f"{name}.B")


@pytest.mark.parametrize("name,flags", list(REFERENCE))
def test_size_and_nodes_equal_reference_mcsplit(tmp_path, name, flags):
    a, b = _write(name, tmp_path)
    r = solve_files(a, b, **FLAGS[flags])
    assert (r.size, r.nodes) == REFERENCE[(name, flags)]
    g0 = read_arg(a, **_read_flags(FLAGS[flags]))
    g1 = read_arg(b, **_read_flags(FLAGS[flags]))
    assert check_mapping(g0, g1, sorted(r.mapping.items())) is None


def _read_flags(flags: dict) -> dict:
    labelled = flags.get("labels") == "all"
    return dict(directed=flags.get("directed", False), vertex_labels=labelled, edge_labels=labelled)


def test_large_sparse_pair_never_builds_a_dense_matrix(tmp_path):
    inst = sparse_pair(8000, 40, 4.0, 1)
    assert inst.g0.sparse and inst.g1.sparse
    r = solve(inst.g0, inst.g1)
    assert (r.size, r.nodes) == REFERENCE[("sp8000", "")]
    assert inst.g1.sparse  # the solve path used the edge arrays only
    bits = to_bitsets(inst.g0, inst.g1)
    # bitsets: 8000 rows of 125 words (8 MB), the "any edge" set a view of them (one class)
    assert bits.nb1.nbytes == 8000 * 125 * 8 and np.shares_memory(bits.any1, bits.nb1)
    # the ARG and LAD readers keep it sparse too
    a = write_arg(inst.g1, tmp_path / "t.arg")
    lad = write_lad(inst.g1, tmp_path / "t.lad")
    for g in (read_arg(a), read_lad(lad)):
        assert g.sparse and g.edge_entries == inst.g1.edge_entries


@pytest.mark.parametrize("directed", [False, True])
def test_edge_arrays_follow_mcsplit_add_edge(directed):
    """from_edge_arrays == GraphBuilder's rules applied one edge at a time on a dense matrix
    (undirected: last write wins; directed: out | in << 16; loops mark the label)."""
    rng = np.random.default_rng(7)
    n = 9
    src, dst = rng.integers(0, n, 60), rng.integers(0, n, 60)
    val = rng.integers(1, 4, 60).astype(np.uint32)
    adj = np.zeros((n, n), np.uint32)
    labels = np.zeros(n, np.uint32)
    for v, w, x in zip(src.tolist(), dst.tolist(), val.tolist(), strict=True):
        if v == w:
            labels[v] |= np.uint32(1 << 31)
        elif directed:
            adj[v, w] |= x
            adj[w, v] |= x << 16
        else:
            adj[v, w] = adj[w, v] = x
    g = from_edge_arrays(n, src, dst, val, directed=directed)
    assert (g.adj == adj).all() and (g.labels == labels).all()
    b = GraphBuilder(n, directed)
    for v, w, x in zip(src.tolist(), dst.tolist(), val.tolist(), strict=True):
        b.add_edge(v, w, x)
    assert (b.build().adj == adj).all()


def _random_labelled(rng, n, directed):
    adj = np.zeros((n, n), np.uint32)
    for v, w in itertools.permutations(range(n), 2):
        if (directed or v < w) and rng.random() < 0.5:
            x = int(rng.integers(1, 3))
            if directed:
                adj[v, w] |= x
                adj[w, v] |= x << 16
            else:
                adj[v, w] = adj[w, v] = x
    return Graph(adj, rng.integers(0, 2, n).astype(np.uint32), directed)


@pytest.mark.parametrize("seed", range(6))
def test_labelled_split_matches_brute_force(seed):
    """The labelled/directed path (cached left counts per edge class, skipped empty classes)
    finds the maximum on small random graphs, checked by exhaustive search."""
    rng = np.random.default_rng(100 + seed)
    directed = bool(seed % 2)
    g0 = _random_labelled(rng, 6, directed)
    g1 = _random_labelled(rng, 6, directed)
    r = solve(g0, g1)
    assert r.size == brute_force(g0, g1)
    assert check_mapping(g0, g1, sorted(r.mapping.items())) is None
    # with two threads (tasks cut mid-node rebuild the per-class counts) the size is the same
    assert solve(g0, g1, threads=2, policy="naive-parallel").size == r.size


def test_long_instance_sharing_rows_compare_both_policies():
    """The full-mode RC sharing rows: both policies on every instance, alternating order per
    round, sizes equal and mappings valid (run here on two small seeded pairs)."""
    from schedlab.hydra_mcs.experiment import _sharing_runs, long_pairs
    from schedlab.hydra_mcs.workloads import gnp_pairs

    assert long_pairs(0) == []
    rows = _sharing_runs(gnp_pairs(2, 14, 0.4, seed=3), threads=2, rounds=2)
    assert rows.height == 2 * 2 * 2
    assert rows["valid"].all()
    import polars as pl

    assert rows.group_by("instance").agg(pl.col("size").n_unique().alias("k"))["k"].max() == 1
    first = rows.filter(rows["round"] == 0)["policy"].to_list()[0]
    again = rows.filter(rows["round"] == 1)["policy"].to_list()[0]
    assert first != again  # the order alternates between rounds
