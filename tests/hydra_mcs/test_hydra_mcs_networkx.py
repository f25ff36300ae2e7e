"""The NetworkX entry point: any hashable nodes and label values, sizes vs brute force, bad
input refused with one line naming the field."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from schedlab.core.errors import BadInputError
from schedlab.hydra_mcs import maximum_common_induced_subgraph
from schedlab.hydra_mcs.graph import GraphBuilder, LabelTable, from_networkx
from schedlab.hydra_mcs.verify import brute_force

ELEMENTS = ["C", "N", "O"]
BONDS = ["single", "double"]


def _labelled(n, p, rng, directed=False):
    g = nx.DiGraph() if directed else nx.Graph()
    for i in range(n):
        g.add_node(f"v{i}", el=ELEMENTS[rng.integers(3)])
    for i in range(n):
        for j in range(n):
            if i != j and (directed or i < j) and rng.random() < p:
                g.add_edge(f"v{i}", f"v{j}", bond=BONDS[rng.integers(2)])
    return g


def _reference_size(g1, g2, node_label, edge_label):
    """Brute force on an independent integer coding of the same labels."""
    codes_n = {None: 0, **{e: i + 1 for i, e in enumerate(ELEMENTS)}}
    codes_e = {None: 1, **{b: i + 2 for i, b in enumerate(BONDS)}}
    graphs = []
    for g in (g1, g2):
        nodes = list(g.nodes)
        b = GraphBuilder(len(nodes), g.is_directed())
        for i, v in enumerate(nodes):
            if node_label:
                b.set_label(i, codes_n[g.nodes[v].get(node_label)])
        for u, v, d in g.edges(data=True):
            b.add_edge(
                nodes.index(u), nodes.index(v), codes_e[d.get(edge_label)] if edge_label else 1
            )
        graphs.append(b.build())
    return brute_force(*graphs)


def _check(g1, g2, m, node_label, edge_label):
    assert len(set(m.values())) == len(m)
    for a in m:
        if node_label:
            assert g1.nodes[a].get(node_label) == g2.nodes[m[a]].get(node_label)
        for b in m:
            if a != b:
                assert g1.has_edge(a, b) == g2.has_edge(m[a], m[b])
                if edge_label and g1.has_edge(a, b):
                    assert g1.edges[a, b].get(edge_label) == g2.edges[m[a], m[b]].get(edge_label)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("directed", [False, True])
@pytest.mark.parametrize("labels", [("el", None), (None, "bond"), ("el", "bond")])
def test_string_labels_match_brute_force(seed, directed, labels):
    rng = np.random.default_rng(seed)
    g1, g2 = _labelled(6, 0.4, rng, directed), _labelled(7, 0.4, rng, directed)
    node_label, edge_label = labels
    m = maximum_common_induced_subgraph(g1, g2, node_label=node_label, edge_label=edge_label)
    _check(g1, g2, m, node_label, edge_label)
    assert len(m) == _reference_size(g1, g2, node_label, edge_label)


def test_mixed_hashable_nodes_and_labels_and_missing_attribute():
    g1 = nx.Graph([(("t", 1), frozenset({2})), (frozenset({2}), 3.5)])
    g2 = nx.Graph([("x", "y"), ("y", "z")])
    g1.nodes[("t", 1)]["k"] = ("tuple", 1)
    g2.nodes["x"]["k"] = ("tuple", 1)
    g1.nodes[3.5]["k"] = 7
    g2.nodes["z"]["k"] = 7.0  # 7 == 7.0: equal labels match
    m = maximum_common_induced_subgraph(g1, g2, node_label="k")
    assert m == {("t", 1): "x", frozenset({2}): "y", 3.5: "z"}  # the middle ones lack "k"


def test_shared_table_codes_agree_across_graphs():
    table = LabelTable("node", 100)
    g1, g2 = nx.Graph(), nx.Graph()
    g1.add_node(0, c="red")
    g2.add_node(0, c="blue")
    g2.add_node(1, c="red")
    a, _ = from_networkx(g1, node_label="c", node_table=table)
    b, _ = from_networkx(g2, node_label="c", node_table=table)
    assert int(a.labels[0]) == int(b.labels[1]) != int(b.labels[0])


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda g: maximum_common_induced_subgraph(g, [1, 2]), "G2"),
        (lambda g: maximum_common_induced_subgraph(g, nx.DiGraph(g)), "G2"),
        (lambda g: maximum_common_induced_subgraph(g, g, node_label=3), "node_label"),
        (lambda g: maximum_common_induced_subgraph(g, g, threads=0), "threads"),
        (lambda g: maximum_common_induced_subgraph(g, g, timeout=-1), "timeout"),
        (lambda g: maximum_common_induced_subgraph(g, g, heuristic="x"), None),
        (lambda g: maximum_common_induced_subgraph(g, g, bogus=1), "policy"),
        (lambda g: maximum_common_induced_subgraph(g, nx.MultiGraph(g)), "graph"),
    ],
)
def test_bad_arguments_are_one_line_errors(call, field):
    g = nx.path_graph(3)
    with pytest.raises(BadInputError) as info:
        call(g)
    assert "\n" not in str(info.value)
    if field:
        assert info.value.field == field


def test_unhashable_label_names_the_node():
    g1, g2 = nx.path_graph(2), nx.path_graph(2)
    g1.nodes[1]["c"] = ["not", "hashable"]
    with pytest.raises(BadInputError, match=r"node 1 is not hashable \(list\)"):
        maximum_common_induced_subgraph(g1, g2, node_label="c")
