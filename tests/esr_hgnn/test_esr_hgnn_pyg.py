"""ESR-HGNN on real PyG objects: canonical edge types kept, edge_index/HeteroData out, loader,
the same distribution as PyG's own metapath walk sampler, HANConv training, and the guards."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.core.errors import BadInputError
from schedlab.esr_hgnn.policies import check_frontier
from schedlab.esr_hgnn.stats import homogeneity_pvalue
from schedlab.esr_hgnn.typed import TypedGraph, check_metapaths, sample_typed

torch = pytest.importorskip("torch")
pyg = pytest.importorskip(
    "torch_geometric", reason="needs the pyg extra: pip install 'schedlab[pyg]'"
)

from torch_geometric.data import HeteroData  # noqa: E402

from schedlab.esr_hgnn.pyg import MetapathLoader, MetapathSampler, typed_graph  # noqa: E402

W = ("researcher", "writes", "article")
R = ("researcher", "reviews", "article")
W_REV = ("article", "rev_writes", "researcher")
R_REV = ("article", "rev_reviews", "researcher")
V = ("article", "appears_in", "venue")
V_REV = ("venue", "rev_appears_in", "article")


def two_relation_graph(seed: int = 0, n_r: int = 60, n_a: int = 120, n_v: int = 4) -> HeteroData:
    """Researchers write and review articles: two relations between the same node types."""
    rng = np.random.default_rng(seed)
    data = HeteroData()
    data["researcher"].x = torch.randn(n_r, 8)
    data["researcher"].y = torch.from_numpy(rng.integers(0, 3, n_r))
    data["article"].num_nodes = n_a
    data["venue"].num_nodes = n_v
    w = np.unique(np.vstack([rng.integers(0, n_r, 300), rng.integers(0, n_a, 300)]), axis=1)
    # reviews touch a disjoint set of articles (the upper half), so a merged relation shows
    r = np.unique(np.vstack([rng.integers(0, n_r, 200), rng.integers(n_a // 2, n_a, 200)]), axis=1)
    r = r[:, r[0] < n_r - 5]  # the last five researchers review nothing (dead walks)
    v = np.vstack([np.arange(n_a), rng.integers(0, n_v, n_a)])
    for fwd, rev, idx in ((W, W_REV, w), (R, R_REV, r), (V, V_REV, v)):
        t = torch.from_numpy(np.ascontiguousarray(idx))
        data[fwd].edge_index = t
        data[rev].edge_index = t.flip(0)
    return data


MPS = [[W, W_REV], [R, R_REV], [W, V, V_REV, W_REV], [R, W_REV]]


def metapath_adjacency(data: HeteroData, mp) -> np.ndarray:
    """Dense reachability along a metapath (the ground truth of which pairs may be sampled)."""
    adj = None
    for et in mp:
        ei = data[et].edge_index.numpy()
        m = np.zeros((data[et[0]].num_nodes, data[et[2]].num_nodes), dtype=np.int64)
        m[ei[0], ei[1]] = 1
        adj = m if adj is None else (adj @ m > 0).astype(np.int64)
    return adj


def test_relations_between_the_same_types_stay_separate():
    data = two_relation_graph()
    graph = typed_graph(data)
    assert set(graph.edge_types) == set(data.edge_types)
    assert graph.csr[W][1].size == data[W].edge_index.size(1)
    assert graph.csr[R][1].size == data[R].edge_index.size(1)
    sampler = MetapathSampler(data, [[W, W_REV], [R, R_REV]], 5)
    seeds = torch.arange(40)
    out = sampler.sample(seeds)
    batch = sampler.sample_numpy(seeds)
    assert set(out) == {(W, W_REV), (R, R_REV)}
    # every sampled pair is reachable along *its* relation and not only along the other one
    for mp, ei in out.items():
        adj = metapath_adjacency(data, mp)
        assert ei.shape[0] == 2 and ei.dtype == torch.long
        assert adj[ei[1].numpy(), ei[0].numpy()].all()
    # a walk over `reviews` touches only upper-half articles: check one hop directly
    hop = sample_typed(graph, [(R,)], np.arange(40), (7,), np.random.default_rng(0)).endpoints
    alive = hop[(R,)][hop[(R,)] >= 0]
    assert alive.size and alive.min() >= 60
    # the last five researchers review nothing: their `reviews` walks are dead, not merged
    assert (batch[(R, R_REV)][np.arange(40) >= 55] == -1).all()


def test_metapaths_are_checked_by_name():
    data = two_relation_graph()
    graph = typed_graph(data)
    with pytest.raises(BadInputError, match=r"hop 1: edge type \('article', 'cites'"):
        check_metapaths(graph, [[W, ("article", "cites", "article")]])
    with pytest.raises(BadInputError, match="ends at 'article' but"):
        check_metapaths(graph, [[W, W]])
    with pytest.raises(BadInputError, match="different node types"):
        check_metapaths(graph, [[W, W_REV], [V_REV, W_REV]])
    with pytest.raises(BadInputError, match="non-empty list"):
        check_metapaths(graph, "APA")
    with pytest.raises(BadInputError, match="unknown method"):
        MetapathSampler(data, MPS, 5, method="dgl")
    with pytest.raises(BadInputError, match="num_neighbors"):
        MetapathSampler(data, MPS, 0)
    with pytest.raises(BadInputError, match="seed ids must be in"):
        MetapathSampler(data, MPS, 5).sample(torch.tensor([60]))
    with pytest.raises(BadInputError, match=r"src id 9 outside \[0, 3\)"):
        TypedGraph.from_edge_index({"a": 3, "b": 2}, {("a", "x", "b"): np.array([[9], [0]])})


def test_trie_reads_fewer_and_matches_naive_where_nothing_is_shared():
    graph = typed_graph(two_relation_graph())
    mps = check_metapaths(graph, MPS)
    seeds = np.arange(50)
    trie = sample_typed(graph, mps, seeds, (10,), np.random.default_rng(0), "trie")
    naive = sample_typed(graph, mps, seeds, (10,), np.random.default_rng(0), "naive")
    assert trie.reads < naive.reads
    assert trie.hops == 8 and naive.hops == 10  # hop W shared by 2 metapaths, R by 2
    alone = check_metapaths(graph, [[W, W_REV], [R, R_REV]])
    t1 = sample_typed(graph, alone, seeds, (10,), np.random.default_rng(1), "trie")
    n1 = sample_typed(graph, alone, seeds, (10,), np.random.default_rng(1), "naive")
    assert t1.reads == n1.reads
    for mp in alone:
        np.testing.assert_array_equal(t1.endpoints[mp], n1.endpoints[mp])


def test_subgraph_is_a_heterodata_hanconv_runs_on():
    from torch_geometric.nn import HANConv

    data = two_relation_graph()
    sampler = MetapathSampler(data, MPS, 6, seed=3)
    both = np.intersect1d(data[W].edge_index[0].numpy(), data[R].edge_index[0].numpy())
    seeds = torch.from_numpy(both[[3, 0, 7, 12]])
    sub = sampler.subgraph(seeds)
    store = sub["researcher"]
    assert store.batch_size == 4
    assert torch.equal(store.n_id[:4], seeds)
    assert torch.equal(store.x, data["researcher"].x[store.n_id])
    assert torch.equal(store.y, data["researcher"].y[store.n_id])
    assert len(set(store.n_id.tolist())) == store.num_nodes
    assert sampler.metapath_edge_types == [
        ("researcher", f"metapath_{i}", "researcher") for i in range(4)
    ]
    full = sampler.sample_numpy(seeds.numpy())  # a fresh draw: check semantics, not values
    assert set(full) == set(sampler.metapaths)
    for et, mp in zip(sampler.metapath_edge_types, sampler.metapaths, strict=True):
        ei = sub[et].edge_index
        assert ei.size(1) > 0
        assert ei[1].max() < 4 and ei[0].max() < store.num_nodes
        adj = metapath_adjacency(data, mp)
        assert adj[store.n_id[ei[1]].numpy(), store.n_id[ei[0]].numpy()].all()
    conv = HANConv(8, 16, (["researcher"], sampler.metapath_edge_types), heads=2)
    out = conv(sub.x_dict, sub.edge_index_dict)["researcher"]
    assert out.shape == (store.num_nodes, 16)


def test_loader_iterates_seed_batches_like_neighborloader():
    data = two_relation_graph()
    mask = torch.zeros(60, dtype=torch.bool)
    mask[10:47] = True
    loader = MetapathLoader(
        data, MPS, 4, batch_size=8, input_nodes=("researcher", mask), shuffle=True, seed=1
    )
    assert len(loader) == 5
    seen = []
    for batch in loader:
        n = batch["researcher"].batch_size
        seen += batch["researcher"].n_id[:n].tolist()
        pos = batch["researcher"].input_id  # positions in input_nodes, as NeighborLoader
        assert torch.equal(torch.arange(10, 47)[pos], batch["researcher"].n_id[:n])
    assert sorted(seen) == list(range(10, 47))
    assert (
        len(
            MetapathLoader(
                data, MPS, 4, batch_size=8, drop_last=True, input_nodes=("researcher", mask)
            )
        )
        == 4
    )
    with pytest.raises(BadInputError, match="batch_size 0 must be a positive integer"):
        MetapathLoader(data, MPS, 4, batch_size=0)
    with pytest.raises(BadInputError, match="input_nodes are of type 'article'"):
        MetapathLoader(data, MPS, 4, input_nodes="article")
    with pytest.raises(BadInputError, match="mask of 3 entries"):
        MetapathLoader(data, MPS, 4, input_nodes=("researcher", torch.ones(3, dtype=bool)))


@pytest.mark.parametrize("method", ["trie", "naive"])
def test_same_distribution_as_pygs_metapath_walks(method):
    """Stratified chi-squared per metapath vs PyG's MetaPath2Vec hop sampler; a wrong relation
    (reviews walked where writes was asked) and a walker that skips every last neighbour are
    rejected, so the test can fail."""
    data = two_relation_graph(seed=2)
    seeds = np.arange(0, 60, 3)
    ours = MetapathSampler(data, MPS, 400, method=method, seed=0).sample_numpy(seeds)
    theirs = MetapathSampler(data, MPS, 400, method="pyg-walk", seed=1).sample_numpy(seeds)

    def counts(ends, n_end):
        m = np.zeros((ends.shape[0], n_end + 1), dtype=np.int64)
        for i, row in enumerate(ends):
            m[i] = np.bincount(row + 1, minlength=n_end + 1)
        return m

    pvalues = {}
    for mp in ours:
        n_end = data[mp[-1][2]].num_nodes
        pvalues[mp] = homogeneity_pvalue(counts(ours[mp], n_end), counts(theirs[mp], n_end))
    assert min(pvalues.values()) * len(pvalues) > 0.001, pvalues
    wrong = MetapathSampler(data, [[R, W_REV]], 400, method="pyg-walk", seed=1)
    bad = wrong.sample_numpy(seeds)[(R, W_REV)]
    n_end = data["researcher"].num_nodes
    assert homogeneity_pvalue(counts(ours[(W, W_REV)], n_end), counts(bad, n_end)) < 1e-6
    # a subtle bias is rejected as well: a walker that never draws a node's last neighbour
    graph, rng = typed_graph(data), np.random.default_rng(3)
    biased = np.full((seeds.size, 400), -1, dtype=np.int64)
    for i, s in enumerate(seeds):
        v = np.full(400, s, dtype=np.int64)
        for et in (W, W_REV):
            ptr, ind = graph.csr[et]
            alive = v >= 0
            deg = np.zeros_like(v)
            deg[alive] = ptr[v[alive] + 1] - ptr[v[alive]]
            alive &= deg > 0
            pick = (rng.random(v.size) * np.maximum(deg - 1, 1)).astype(np.int64)
            v = np.where(alive, ind[np.where(alive, ptr[np.maximum(v, 0)] + pick, 0)], -1)
        biased[i] = v
    assert homogeneity_pvalue(counts(theirs[(W, W_REV)], n_end), counts(biased, n_end)) < 1e-6


def test_hanconv_trained_with_our_sampler_matches_pyg_sampling():
    from schedlab.esr_hgnn.han_pyg import synthetic_dblp, train_han

    data = synthetic_dblp(scale=0.1, seed=0)
    acc = {
        m: train_han(data, m, fanout=10, batch=64, epochs=8, seed=0)["test_accuracy"]
        for m in ("trie", "pyg-walk", "features")
    }
    assert acc["trie"] > acc["features"] + 0.15, acc
    assert abs(acc["trie"] - acc["pyg-walk"]) < 0.1, acc


def test_guards_name_the_batch_and_the_fanouts():
    from schedlab.esr_hgnn.workloads import generate, seed_batches

    graph = generate("acm", 0.05, 0)
    n = graph.node_counts["P"]
    with pytest.raises(BadInputError, match=f"batch {n + 1} is larger than the {n} seed"):
        seed_batches(graph, "P", n + 1, 1, 0)
    assert seed_batches(graph, "P", n, 1, 0)[0].size == n
    with pytest.raises(
        BadInputError, match=r"fanouts 100,100,100,100 with 256 seeds over 2 metapaths make 2.56e"
    ):
        check_frontier([4, 2], 256, (100, 100, 100, 100))
    check_frontier([4], 256, (10, 10))  # 25,600 entries: fine
    typed = typed_graph(two_relation_graph())
    with pytest.raises(BadInputError, match="field 'fanouts'|fanouts 1000,1000,1000"):
        sample_typed(
            typed,
            check_metapaths(typed, MPS),
            np.arange(60),
            (1000, 1000, 1000),
            np.random.default_rng(0),
        )


def test_typed_trie_is_the_letter_trie_on_a_converted_graph():
    """The edge-type sampler on to_heterodata(graph) draws exactly what the letter-coded
    sampler draws on graph (same reads, same endpoints from the same generator)."""
    from schedlab.esr_hgnn.policies import make_sampler
    from schedlab.esr_hgnn.pyg import letters_to_metapath, to_heterodata
    from schedlab.esr_hgnn.workloads import generate, metapath_set

    g = generate("dblp", 0.1, 0)
    letters = metapath_set(g, "dblp", "sym6")
    typed = typed_graph(to_heterodata(g))
    mps = check_metapaths(typed, [letters_to_metapath(g, m) for m in letters])
    seeds = np.arange(64)
    for method in ("trie", "naive"):
        a = sample_typed(typed, mps, seeds, (5, 2), np.random.default_rng(3), method)
        b = make_sampler(method).sample(g, letters, seeds, (5, 2), np.random.default_rng(3))
        assert a.reads == b.reads and a.hops == b.hops
        for t, m in zip(mps, letters, strict=True):
            np.testing.assert_array_equal(a.endpoints[t], b.endpoints[m])


def test_gpu_bench_path_includes_pygs_sampler_on_cpu():
    from schedlab.esr_hgnn.torch_sampler import benchmark
    from schedlab.esr_hgnn.workloads import generate, metapath_set

    g = generate("acm", 0.05, 0)
    rows = benchmark(g, metapath_set(g, "acm", "han"), [np.arange(16)], (4,), "cpu", repeats=1)
    assert [r["sampler"] for r in rows] == ["naive", "trie", "pyg-metapath2vec-hop"]
    assert all(r["seconds"] > 0 for r in rows)


def test_compare_with_pyg_reports_pvalues_and_times():
    from schedlab.esr_hgnn.pyg import compare_with_pyg

    rows = compare_with_pyg(
        two_relation_graph(seed=4), MPS, np.arange(0, 60, 4), walks=200, repeats=2
    )
    assert [r["metapath"] for r in rows][:2] == [
        "researcher-writes-article-rev_writes-researcher",
        "researcher-reviews-article-rev_reviews-researcher",
    ]
    assert min(r["pvalue"] for r in rows) * len(rows) > 0.001
    assert all(r["ours_cpu_s"] > 0 and r["pyg_cpu_s"] > 0 for r in rows)
