"""Metapath trie and channel grouping: exact DP vs brute force, every grouper's invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.esr_hgnn.grouping import (
    GROUPERS,
    brute_force_grouping,
    capacity,
    fanout_hop_cost,
    group_cost,
    make_grouper,
    total_cost,
)
from schedlab.esr_hgnn.trie import MetapathTrie

DBLP7 = ["APA", "APAPA", "APCPA", "APTPA", "APAPAPA", "APCPCPA", "APTPTPA"]
metapath = st.text(alphabet="PQR", min_size=1, max_size=4).map(lambda s: "A" + s)


def test_trie_shares_prefixes():
    trie = MetapathTrie(["APA", "APCPA", "APTPA"])
    assert trie.n_edges == 8 and trie.naive_hops == 10
    assert trie.nodes[trie.node_of("APA")].terminal
    assert [n.prefix for n in trie.nodes][:3] == ["A", "AP", "APA"]


@given(st.lists(metapath, min_size=1, max_size=6, unique=True))
def test_trie_edges_bounded_by_naive_hops(mps):
    trie = MetapathTrie(mps)
    assert trie.n_edges <= trie.naive_hops
    prefixes = {mp[:d] for mp in mps for d in range(2, len(mp) + 1)}
    assert trie.n_edges == len(prefixes)  # one trie edge per distinct prefix
    for node in trie.nodes[1:]:
        assert trie.nodes[node.parent].prefix == node.prefix[:-1]


@pytest.mark.parametrize("name", sorted(GROUPERS))
@pytest.mark.parametrize("channels", [1, 2, 3, 4, 8])
def test_grouper_invariants(name, channels):
    cost = fanout_hop_cost((4, 2))
    groups = make_grouper(name).group(DBLP7, channels, cost, seed=1)
    assert len(groups) == channels
    assert sorted(mp for g in groups for mp in g) == sorted(DBLP7)
    assert max(len(g) for g in groups) <= capacity(len(DBLP7), channels)
    assert total_cost(groups, cost) >= total_cost(
        make_grouper("optimal").group(DBLP7, channels, cost), cost) - 1e-9


@given(st.lists(metapath, min_size=1, max_size=6, unique=True), st.integers(1, 3),
       st.lists(st.integers(1, 4), min_size=1, max_size=3))
@settings(max_examples=40)
def test_optimal_matches_brute_force(mps, channels, fanouts):
    cost = fanout_hop_cost(fanouts)
    dp = total_cost(make_grouper("optimal").group(mps, channels, cost), cost)
    brute, _ = brute_force_grouping(mps, channels, cost)
    assert dp == pytest.approx(brute)


def test_grouping_beats_round_robin_on_dblp():
    cost = fanout_hop_cost((10,))
    rr = total_cost(make_grouper("round-robin").group(DBLP7, 4, cost), cost)
    best = total_cost(make_grouper("optimal").group(DBLP7, 4, cost), cost)
    assert best < rr
    assert total_cost(make_grouper("greedy").group(DBLP7, 4, cost), cost) == best


def test_single_channel_is_one_trie():
    cost = fanout_hop_cost((3,))
    groups = make_grouper("optimal").group(DBLP7, 1, cost)
    assert groups == [DBLP7] or sorted(groups[0]) == sorted(DBLP7)
    assert group_cost(groups[0], cost) == MetapathTrie(DBLP7).weighted_cost(cost)


def test_bad_grouping_inputs():
    cost = fanout_hop_cost((2,))
    with pytest.raises(BadInputError, match="channels"):
        make_grouper("greedy").group(DBLP7, 0, cost)
    with pytest.raises(BadInputError, match="no metapaths"):
        make_grouper("optimal").group([], 2, cost)
    with pytest.raises(BadInputError, match="greedy"):
        make_grouper("optimal").group([f"A{'P' * i}" for i in range(1, 15)], 2, cost)
    with pytest.raises(BadInputError, match="different node types"):
        make_grouper("round-robin").group(["APA", "PAP"], 2, cost)
    with pytest.raises(BadInputError, match="one hop"):
        make_grouper("greedy").group(["A"], 2, cost)
    with pytest.raises(UnknownNameError):
        make_grouper("kmeans")
