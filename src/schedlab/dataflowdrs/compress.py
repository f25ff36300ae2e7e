"""Compressing the DFL graph by its repeated coordination patterns (paper 09, part (b)).

Large workflows repeat the same structure: hundreds of identical task instances, a fan-out from
one stage to many, a fan-in to one merge, one-to-one pipelines. DataFlowDrs analyses one node
per *group* (instances collapsed, edges summed) and reports which pattern each group follows,
so the analysis data shrinks by the number of instances while bytes and time are preserved.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import networkx as nx


@dataclass(frozen=True)
class Pattern:
    """A repeated coordination pattern found between two groups (or within one)."""

    kind: str  # "instances", "fan-out", "fan-in", "pipeline", "all-to-all"
    source: str
    target: str
    count: int


@dataclass
class Compressed:
    """The group-level DFL graph and how much smaller it is than the instance-level one."""

    graph: nx.DiGraph
    patterns: list[Pattern] = field(default_factory=list)
    nodes_before: int = 0
    edges_before: int = 0

    @property
    def reduction(self) -> float:
        """(nodes + edges before) / (nodes + edges after): how much less data to analyse."""
        after = self.graph.number_of_nodes() + self.graph.number_of_edges()
        return (self.nodes_before + self.edges_before) / max(1, after)

    def summary(self) -> dict:
        return dict(nodes_before=self.nodes_before, edges_before=self.edges_before,
                    nodes_after=self.graph.number_of_nodes(),
                    edges_after=self.graph.number_of_edges(), reduction=self.reduction,
                    patterns=[p.__dict__ for p in self.patterns])


def _key(graph: nx.DiGraph, node) -> tuple[str, str]:
    return (graph.nodes[node]["kind"], graph.nodes[node]["group"])


def compress(graph: nx.DiGraph) -> Compressed:
    """Collapse instances into groups, sum edge weights, and name the patterns."""
    out = nx.DiGraph()
    members: dict[tuple[str, str], list] = defaultdict(list)
    for node, data in graph.nodes(data=True):
        key = _key(graph, node)
        members[key].append(node)
        if key not in out:
            out.add_node(key, kind=data["kind"], group=data["group"], instances=0, time=0.0,
                         bytes=0, tier=set())
        agg = out.nodes[key]
        agg["instances"] += 1
        agg["time"] += data.get("time", 0.0) or 0.0
        agg["bytes"] += data.get("bytes", 0) or 0
        if data.get("tier"):
            agg["tier"].add(data["tier"])
    for u, v, data in graph.edges(data=True):
        a, b = _key(graph, u), _key(graph, v)
        if not out.has_edge(a, b):
            out.add_edge(a, b, bytes=0, ops=0, time=0.0, edges=0)
        e = out.edges[a, b]
        for name in ("bytes", "ops", "time"):
            e[name] += data.get(name, 0) or 0
        e["edges"] += 1
    for key in out.nodes:
        out.nodes[key]["tier"] = ",".join(sorted(out.nodes[key]["tier"]))
    patterns = _patterns(graph, out, members)
    return Compressed(out, patterns, graph.number_of_nodes(), graph.number_of_edges())


def _task_flow(graph: nx.DiGraph) -> nx.DiGraph:
    """Task -> task edges through files (the coordination the patterns describe)."""
    flow = nx.DiGraph()
    for node, data in graph.nodes(data=True):
        if data["kind"] == "task":
            flow.add_node(node)
    for node, data in graph.nodes(data=True):
        if data["kind"] != "file":
            continue
        for producer in graph.predecessors(node):
            for consumer in graph.successors(node):
                flow.add_edge(producer, consumer)
    for u, v, data in graph.edges(data=True):
        if data.get("op") == "dep":
            flow.add_edge(u, v)
    return flow


def _patterns(graph: nx.DiGraph, out: nx.DiGraph, members: dict) -> list[Pattern]:
    found = [Pattern("instances", g, g, len(nodes)) for (kind, g), nodes in members.items()
             if kind == "task" and len(nodes) > 1]
    flow = _task_flow(graph)
    links: dict[tuple[str, str], set] = defaultdict(set)
    for u, v in flow.edges:
        links[(graph.nodes[u]["group"], graph.nodes[v]["group"])].add((u, v))
    for (a, b), pairs in sorted(links.items()):
        if a == b:
            continue
        sources = {u for u, _ in pairs}
        targets = {v for _, v in pairs}
        if len(sources) == 1 and len(targets) > 1:
            kind = "fan-out"
        elif len(sources) > 1 and len(targets) == 1:
            kind = "fan-in"
        elif len(pairs) == len(sources) == len(targets):
            kind = "pipeline"
        elif len(pairs) == len(sources) * len(targets):
            kind = "all-to-all"
        else:
            kind = "mixed"
        found.append(Pattern(kind, a, b, len(pairs)))
    return found
