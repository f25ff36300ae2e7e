"""Every sampler through the same invariants, plus naive-vs-trie equivalence in distribution."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.esr_hgnn.graph import HeteroGraph
from schedlab.esr_hgnn.grouping import fanout_hop_cost
from schedlab.esr_hgnn.kernels import expand
from schedlab.esr_hgnn.policies import SAMPLERS, make_sampler
from schedlab.esr_hgnn.stats import compare_samplers, endpoint_counts, homogeneity_pvalue
from schedlab.esr_hgnn.trie import MetapathTrie, naive_weighted_cost
from schedlab.esr_hgnn.workloads import generate, metapath_set

GRAPH = generate("dblp", 0.05, seed=0)
METAPATHS = metapath_set(GRAPH, "dblp", "sym6")


def reachable(graph: HeteroGraph, metapath: str) -> sp.csr_matrix:
    """Boolean metapath adjacency: the reference answer for 'is this endpoint possible'."""
    result = None
    for a, b in zip(metapath, metapath[1:], strict=False):
        rel = graph.relation(a, b)
        data = np.ones(rel.indices.size)
        m = sp.csr_matrix((data, rel.indices, rel.indptr),
                          shape=(graph.node_counts[a], graph.node_counts[b]))
        result = m if result is None else (result @ m)
    return (result > 0).astype(int).tocsr()


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_invariants(name):
    sampler = make_sampler(name)
    seeds = np.arange(40)
    fanouts = (3, 2)
    batch = sampler.sample(GRAPH, METAPATHS, seeds, fanouts, np.random.default_rng(1),
                           trace=True)
    assert list(batch.endpoints) == METAPATHS
    for mp, ends in batch.endpoints.items():
        assert ends.shape == (seeds.size, 6)  # 3 x 2 x 1 x ...
        assert (ends >= -1).all() and (ends < GRAPH.node_counts[mp[-1]]).all()
        reach = reachable(GRAPH, mp)
        rows, cols = np.nonzero(ends >= 0)
        assert reach[seeds[rows], ends[rows, cols]].all()  # every endpoint is a real metapath end
    assert batch.trace is not None and batch.trace.size == batch.reads
    assert batch.reads > 0 and batch.hops == len(batch.frontier_entries)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_is_reproducible_from_seed(name):
    sampler = make_sampler(name)
    a = sampler.sample(GRAPH, METAPATHS, np.arange(10), (4,), np.random.default_rng(7))
    b = sampler.sample(GRAPH, METAPATHS, np.arange(10), (4,), np.random.default_rng(7))
    assert all(np.array_equal(a.endpoints[m], b.endpoints[m]) for m in METAPATHS)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_rejects_bad_seeds(name):
    sampler = make_sampler(name)
    with pytest.raises(BadInputError, match="seed"):
        sampler.sample(GRAPH, METAPATHS, np.array([GRAPH.node_counts["A"]]), (2,),
                       np.random.default_rng(0))
    with pytest.raises(BadInputError):
        sampler.sample(GRAPH, METAPATHS, np.array([], dtype=np.int64), (2,),
                       np.random.default_rng(0))
    with pytest.raises(BadInputError, match="start type"):
        sampler.sample(GRAPH, ["APA", "PAP"], np.arange(2), (2,), np.random.default_rng(0))
    with pytest.raises(BadInputError, match="does not exist"):
        sampler.sample(GRAPH, ["AA"], np.arange(2), (2,), np.random.default_rng(0))


def test_unknown_sampler_lists_valid_names():
    with pytest.raises(UnknownNameError, match="naive, trie"):
        make_sampler("dgl")


@given(st.lists(st.text(alphabet="PAT", min_size=1, max_size=4), min_size=1, max_size=5),
       st.lists(st.integers(1, 3), min_size=1, max_size=3))
@settings(max_examples=40)
def test_reads_match_trie_and_naive_cost_models(tails, fanouts):
    """No node of the generated graph is isolated, so reads are exactly the shape-based costs."""
    mps = []
    for tail in tails:  # build valid DBLP walks A-P-(A|T)-P-...
        mp = "A"
        for t in tail:
            mp += "P" if mp[-1] != "P" else t.replace("P", "A")
        if len(mp) >= 2 and mp not in mps:
            mps.append(mp)
    seeds = np.arange(5)
    cost = fanout_hop_cost(fanouts)
    naive = make_sampler("naive").sample(GRAPH, mps, seeds, fanouts, np.random.default_rng(0))
    trie = make_sampler("trie").sample(GRAPH, mps, seeds, fanouts, np.random.default_rng(0))
    assert naive.reads == pytest.approx(seeds.size * naive_weighted_cost(mps, cost))
    assert trie.reads == pytest.approx(seeds.size * MetapathTrie(mps).weighted_cost(cost))
    assert trie.reads <= naive.reads
    assert trie.hops == MetapathTrie(mps).n_edges


def test_trie_saves_nothing_without_shared_prefix():
    g = generate("acm", 0.05, 0)
    seeds = np.arange(20)
    naive = make_sampler("naive").sample(g, ["PAP", "PSP"], seeds, (5,), np.random.default_rng(0))
    trie = make_sampler("trie").sample(g, ["PAP", "PSP"], seeds, (5,), np.random.default_rng(0))
    assert naive.reads == trie.reads


def test_expand_handles_dead_walks_and_isolated_nodes():
    indptr = np.array([0, 2, 2, 3])  # node 1 has no neighbours
    indices = np.array([5, 6, 7])
    frontier = np.array([0, 1, -1, 2])
    out, reads, used = expand(indptr, indices, frontier, 2, np.full(8, 0.99), 0, 100, 4,
                              np.empty(0, dtype=np.int64))
    assert out.tolist() == [6, 6, -1, -1, -1, -1, 7, 7]
    assert reads == 3 + 4  # three row reads (the dead walk reads nothing) and four samples
    assert used == 0


def test_chi_squared_same_distribution():
    g = generate("dblp", 0.02, seed=1)
    mps = metapath_set(g, "dblp", "sym4")
    pvalues = compare_samplers(g, make_sampler("naive"), make_sampler("trie"), mps,
                               np.arange(12), runs=400, seed=3)
    assert min(pvalues.values()) * len(pvalues) > 0.001


class FirstNeighbourSampler:
    """A deliberately biased sampler: the chi-squared check must catch it."""

    name = "first"

    def sample(self, graph, metapaths, seeds, fanouts, rng, trace=False):
        batch = make_sampler("naive").sample(graph, metapaths, seeds, fanouts, rng)
        for mp in metapaths:
            frontier = np.asarray(seeds)
            for a, b in zip(mp, mp[1:], strict=False):
                rel = graph.relation(a, b)
                frontier = rel.indices[rel.indptr[frontier]]
            batch.endpoints[mp] = frontier.reshape(-1, 1)
        return batch


def test_chi_squared_detects_a_biased_sampler():
    g = generate("dblp", 0.02, seed=1)
    pvalues = compare_samplers(g, make_sampler("naive"), FirstNeighbourSampler(), ["APTPA"],
                               np.arange(12), runs=200, seed=3)
    assert pvalues["APTPA"] < 1e-6


def test_endpoint_counts_total_runs():
    g = generate("imdb", 0.02, seed=1)
    counts = endpoint_counts(g, make_sampler("trie"), ["MAM"], np.arange(5), runs=30, seed=0)
    assert counts["MAM"].sum() == 5 * 30


def test_homogeneity_pvalue_pools_sparse_categories():
    assert homogeneity_pvalue(np.array([100, 100, 1]), np.array([100, 100, 0])) > 0.5
    assert homogeneity_pvalue(np.array([3]), np.array([4])) == 1.0


def test_torch_expand_equals_numba_kernel():
    torch = pytest.importorskip("torch")
    from schedlab.esr_hgnn.torch_sampler import TorchSampling, torch_expand

    rel = GRAPH.relation("P", "T")
    frontier = np.array([0, 5, -1, 17, 3, 3], dtype=np.int64)
    uniforms = np.random.default_rng(0).random(frontier.size * 3)
    ours, _, _ = expand(rel.indptr, rel.indices, frontier, 3, uniforms, 0, 0, 4,
                        np.empty(0, dtype=np.int64))
    theirs = torch_expand(torch.as_tensor(rel.indptr), torch.as_tensor(rel.indices),
                          torch.as_tensor(frontier), 3, torch.as_tensor(uniforms))
    assert np.array_equal(ours, theirs.numpy())
    sampling = TorchSampling(GRAPH, "cpu")
    gen = torch.Generator().manual_seed(0)
    out = sampling.trie(METAPATHS, torch.arange(8), (2,), gen)
    assert set(out) == set(METAPATHS) and out["APA"].numel() == 16
