"""Issue 50 section 1, reproduced from a PyG user's side: no relation is lost silently, the loader
takes NeighborLoader's keyword arguments (or refuses each by name), and the memory guard bounds
the whole output of a request, not one frontier."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from schedlab.core.errors import BadInputError
from schedlab.esr_hgnn.graph import from_heterodata
from schedlab.esr_hgnn.policies import MAX_OUTPUT_BYTES, check_frontier
from schedlab.esr_hgnn.typed import TypedGraph, check_metapaths, sample_typed

torch = pytest.importorskip("torch")
pytest.importorskip("torch_geometric", reason="needs the pyg extra: pip install 'schedlab[pyg]'")

import torch_geometric.transforms as T  # noqa: E402
from torch_geometric.data import HeteroData  # noqa: E402

from schedlab.esr_hgnn.pyg import MetapathLoader, MetapathSampler, typed_graph  # noqa: E402

W = ("author", "writes", "paper")
W_REV = ("paper", "rev_writes", "author")
R = ("author", "reviews", "paper")
R_REV = ("paper", "rev_reviews", "author")


def outside_graph(distinct_reverse: bool = True) -> HeteroData:
    """What the outside check built: writes and reviews between authors and papers, and a
    paper->author relation of its own (30 edges) that is no reverse of either."""
    rng = np.random.default_rng(0)
    data = HeteroData()
    data["author"].num_nodes = 40
    data["paper"].num_nodes = 50
    w = np.vstack([rng.integers(0, 40, 80), rng.integers(0, 50, 80)])
    r = np.vstack([rng.integers(0, 10, 20), rng.integers(0, 20, 20)])
    data[W].edge_index, data[R].edge_index = torch.from_numpy(w), torch.from_numpy(r)
    if distinct_reverse:
        data["paper", "cited_by", "author"].edge_index = torch.from_numpy(
            np.vstack([rng.integers(0, 50, 30), rng.integers(30, 40, 30)])
        )
    return data


def test_from_heterodata_refuses_what_letters_cannot_hold_in_one_line():
    data = outside_graph(distinct_reverse=False)
    with pytest.raises(BadInputError, match=r"writes.*reviews.*typed_graph") as err:
        from_heterodata(data)
    assert "\n" not in str(err.value)
    only_cited = HeteroData()
    only_cited["author"].num_nodes, only_cited["paper"].num_nodes = 40, 50
    only_cited[W].edge_index = data[W].edge_index
    only_cited["paper", "cited_by", "author"].edge_index = torch.tensor([[0, 1], [5, 6]])
    with pytest.raises(BadInputError, match=r"cited_by.*is not the reverse of.*writes"):
        from_heterodata(only_cited)
    # a relation and its exact reverse (what ToUndirected adds) is one letter relation: accepted
    both = T.ToUndirected()(HeteroData(author={"num_nodes": 40}, paper={"num_nodes": 50}))
    both[W].edge_index = data[W].edge_index
    both = T.ToUndirected()(both)
    g = from_heterodata(both)
    assert g.relation("A", "P").n_edges == data[W].edge_index.size(1) == 80
    # the typed API keeps every relation, edge for edge
    typed = typed_graph(outside_graph())
    assert {et: typed.csr[et][1].size for et in typed.edge_types} == {
        W: 80, R: 20, ("paper", "cited_by", "author"): 30}


def test_loader_gives_a_short_batch_like_neighborloader():
    data = T.ToUndirected()(outside_graph(distinct_reverse=False))
    loader = MetapathLoader(data, [[W, W_REV], [R, R_REV]], 3, batch_size=1000)
    batches = list(loader)
    assert len(loader) == len(batches) == 1
    assert batches[0]["author"].batch_size == 40
    assert torch.equal(batches[0]["author"].n_id[:40], torch.arange(40))
    assert torch.equal(batches[0]["author"].input_id, torch.arange(40))  # positions, as PyG
    assert len(MetapathLoader(data, [[W, W_REV]], 3, batch_size=1000, drop_last=True)) == 0


def test_loader_takes_neighborloader_arguments_or_refuses_each_by_name():
    data = T.ToUndirected()(outside_graph(distinct_reverse=False))
    mps = [[W, W_REV], [R, R_REV]]
    mask = torch.zeros(40, dtype=torch.bool)
    mask[5:35] = True
    seen = []
    loader = MetapathLoader(
        data, mps, num_neighbors=[4], batch_size=8, input_nodes=("author", mask), shuffle=True,
        num_workers=2, persistent_workers=False, pin_memory=False, replace=True,
        subgraph_type="directional", disjoint=False, is_sorted=False, filter_per_worker=None,
        transform=lambda b: b, directed=True,
    )
    draws = []
    for batch in loader:
        n = batch["author"].batch_size
        seen += batch["author"].n_id[:n].tolist()
        assert torch.equal(batch["author"].n_id[:n], torch.arange(5, 35)[batch["author"].input_id])
        draws.append(batch["author", "metapath_0", "author"].edge_index.shape[1])
    assert sorted(seen) == list(range(5, 35)) and len(draws) == 4
    for kwargs, name in (
        (dict(replace=False), "replace"),
        (dict(input_time=torch.zeros(40)), "input_time"),
        (dict(time_attr="time"), "time_attr"),
        (dict(weight_attr="w"), "weight_attr"),
        (dict(subgraph_type="induced"), "subgraph_type"),
        (dict(subgraph_type="bidirectional"), "subgraph_type"),
        (dict(disjoint=True), "disjoint"),
        (dict(directed=False), "directed"),
        (dict(neighbor_sampler=object()), "neighbor_sampler"),
        (dict(collate_fn=list), "collate_fn"),
        (dict(num_neighbors={W: [4]}), "num_neighbors"),
        (dict(fanciness=3), "fanciness"),
    ):
        args = dict(num_neighbors=4, **kwargs) if "num_neighbors" not in kwargs else kwargs
        with pytest.raises(BadInputError, match=name) as err:
            MetapathLoader(data, mps, **args)
        assert "\n" not in str(err.value)


def test_workers_draw_independent_samples():
    data = T.ToUndirected()(outside_graph(distinct_reverse=False))
    seeds = torch.arange(40).repeat(2)  # the same seeds twice: two workers, one batch each
    loader = MetapathLoader(data, [[W, W_REV]], 50, batch_size=40, num_workers=2,
                            input_nodes=("author", seeds))
    a, b = (batch["author", "metapath_0", "author"].edge_index for batch in loader)
    assert a.shape == b.shape and not torch.equal(a, b)  # forked workers reseeded


def test_memory_guard_bounds_the_total_output():
    # seven metapaths, each frontier under the limit, all of them together over it
    limit = MAX_OUTPUT_BYTES // 8
    per_mp = limit // 5
    with pytest.raises(BadInputError, match=r"7 metapaths .* in all") as err:
        check_frontier([2] * 7, per_mp, (1,))
    assert "400 MB" in str(err.value)
    check_frontier([2] * 4, per_mp, (1,))  # four of them fit
    # what is returned and what is allocated stay within a small multiple of what was predicted
    typed = typed_graph(T.ToUndirected()(outside_graph(distinct_reverse=False)))
    mps = check_metapaths(typed, [[W, W_REV], [W, W_REV, W, W_REV], [R, R_REV]])
    seeds = np.repeat(np.arange(40), 50)
    predicted = 8 * seeds.size * 20 * 3
    sample_typed(typed, mps, seeds, (20,), np.random.default_rng(0))  # warm the JIT
    tracemalloc.start()
    batch = sample_typed(typed, mps, seeds, (20,), np.random.default_rng(0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sum(e.nbytes for e in batch.endpoints.values()) == predicted
    assert peak < 2.5 * predicted, (peak, predicted)
    # the loader's batches hold edge_index as well: its guard counts those bytes too
    sampler = MetapathSampler(T.ToUndirected()(outside_graph(False)), [[W, W_REV]] * 1, 10)
    with pytest.raises(BadInputError, match="edge_index"):
        sampler.subgraph(torch.arange(40).repeat(limit // (40 * 10 * 2)))


def test_typed_graph_is_lossless_for_the_outside_graph():
    data = outside_graph()
    g = typed_graph(data)
    assert isinstance(g, TypedGraph)
    assert g.edge_index(("paper", "cited_by", "author")).shape == (2, 30)


def test_two_pass_kernel_equals_the_traced_kernel():
    from schedlab.esr_hgnn.kernels import expand, expand_untraced

    rng = np.random.default_rng(5)
    indptr = np.concatenate([[0], np.cumsum(rng.integers(0, 6, 300))])
    indices = rng.integers(0, 300, indptr[-1])
    frontier = rng.integers(-1, 300, 500)
    for fanout in (1, 7):
        u = rng.random(frontier.size * fanout)
        trace = np.empty(frontier.size * (1 + fanout), np.int64)
        a, reads_a, _ = expand(indptr, indices, frontier, fanout, u, 0, 0, 4, trace)
        for ptr, ind in ((indptr, indices), (indptr.astype(np.int32), indices.astype(np.int32))):
            b, reads_b = expand_untraced(ptr, ind, frontier, fanout, u)
            np.testing.assert_array_equal(a, b)
            assert reads_a == reads_b


def test_auto_falls_back_to_naive_where_the_trie_saves_little():
    from schedlab.esr_hgnn.typed import auto_method, predicted_saving
    from schedlab.esr_hgnn.workloads import MAG_METAPATHS, mag_like

    graph = mag_like(0.002, 0)
    assert graph.csr[W_MAG][1].dtype == np.int32
    small, large = (check_metapaths(graph, MAG_METAPATHS[k]) for k in ("mag4", "mag7"))
    assert auto_method(small, (10,)) == "naive" and auto_method(large, (10,)) == "trie"
    seeds = np.arange(300)
    for mps in (small, large):
        trie = sample_typed(graph, mps, seeds, (10,), np.random.default_rng(0), "trie")
        naive = sample_typed(graph, mps, seeds, (10,), np.random.default_rng(0), "naive")
        # the shape-based prediction is the measured saving up to dead walks (few here)
        assert abs((1 - trie.reads / naive.reads) - predicted_saving(mps, (10,))) < 0.03
        auto = sample_typed(graph, mps, seeds, (10,), np.random.default_rng(0), "auto")
        chosen = trie if auto_method(mps, (10,)) == "trie" else naive
        assert auto.reads == chosen.reads


W_MAG = ("author", "writes", "paper")
