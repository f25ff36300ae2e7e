"""DFL graph, critical path, compression and tier models against reference answers."""

from __future__ import annotations

import networkx as nx
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.dataflowdrs import (
    WORKFLOWS,
    WorkflowConfig,
    analyse,
    build,
    build_dfl,
    compress,
    critical_path,
    group_name,
    make_layout,
)
from schedlab.dataflowdrs.synthetic import simulate_trace
from schedlab.dataflowdrs.tiers import DEFAULT_TIERS


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return make_layout(tmp_path_factory.mktemp("dfd-dfl"), create=False)


def _tasks(rows: list[tuple[str, float, float]]) -> pl.DataFrame:
    return pl.DataFrame({"task": [r[0] for r in rows], "start": [r[1] for r in rows],
                         "end": [r[2] for r in rows]})


@st.composite
def dags(draw):
    """A random DAG with durations, scheduled with unlimited workers (start = gate)."""
    n = draw(st.integers(1, 9))
    deps = {i: {j for j in range(i) if draw(st.booleans())} for i in range(n)}
    dur = [draw(st.integers(1, 20)) / 10 for _ in range(n)]
    start, end = {}, {}
    for i in range(n):
        start[i] = max((end[j] for j in deps[i]), default=0.0)
        end[i] = start[i] + dur[i]
    return deps, dur, start, end


@given(dags())
def test_critical_path_matches_longest_path_without_queueing(dag):
    """With unlimited workers the critical path is the DAG's longest path (networkx)."""
    deps, dur, start, end = dag
    tasks = _tasks([(f"t{i}", start[i], end[i]) for i in deps])
    path = critical_path(tasks, {f"t{i}": {f"t{j}" for j in d} for i, d in deps.items()})
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(dur)))
    graph.add_edges_from((j, i) for i, d in deps.items() for j in d)
    weight = sum(dur[int(t[1:])] for t in path)
    best = max(sum(dur[k] for k in p) for s in graph.nodes for e in graph.nodes
               for p in nx.all_simple_paths(graph, s, e)) if graph.number_of_edges() else max(dur)
    best = max(best, max(dur))
    assert weight == pytest.approx(best)
    for a, b in zip(path, path[1:], strict=False):  # consecutive tasks are real dependencies
        assert int(a[1:]) in deps[int(b[1:])]


def test_critical_path_follows_the_worker_that_freed_a_slot():
    # one worker: b waits for a's slot, c depends on b
    tasks = _tasks([("a", 0.0, 1.0), ("b", 1.0, 3.0), ("c", 3.0, 4.0), ("x", 0.0, 0.5)])
    assert critical_path(tasks, {"a": set(), "b": set(), "c": {"b"}, "x": set()}) == [
        "a", "b", "c"]


def test_group_names_strip_instance_numbers():
    assert group_name("individuals_003") == "individuals"
    assert group_name("/x/y/part_001_1.dat") == "part"
    assert group_name("42") == "42"


@pytest.mark.parametrize("workflow", sorted(WORKFLOWS))
def test_compression_preserves_bytes_and_finds_patterns(workflow, layout):
    trace = simulate_trace(build(WorkflowConfig(workflow=workflow, scale=6), layout), layout, 2)
    dfl = build_dfl(trace)
    small = compress(dfl.graph)
    total = sum(d["bytes"] for *_, d in dfl.graph.edges(data=True))
    assert sum(d["bytes"] for *_, d in small.graph.edges(data=True)) == total
    assert sum(d["instances"] for _, d in small.graph.nodes(data=True)) == \
        dfl.graph.number_of_nodes()
    assert small.reduction > 2
    kinds = {p.kind for p in small.patterns}
    assert "instances" in kinds and "fan-in" in kinds
    if workflow == "mapreduce":
        assert any(p.kind == "all-to-all" and (p.source, p.target) == ("map", "reduce")
                   for p in small.patterns)
    if workflow == "genomes":
        assert any(p.kind == "fan-out" and p.source == "individuals_merge"
                   for p in small.patterns)
    if workflow == "dlreader":
        assert any(p.kind == "pipeline" and (p.source, p.target) == ("train", "train") or
                   p.kind == "fan-in" and p.target == "collate" for p in small.patterns)


def test_tier_models_recover_the_configured_costs(layout):
    cfg = WorkflowConfig(workflow="genomes", scale=4, tiers={"ind": "shared", "merged": "tmpfs"},
                         blocks={"individuals": 65536})
    analysis = analyse(simulate_trace(build(cfg, layout), layout, 2))
    shared, local = analysis.tier_models["shared"], analysis.tier_models["local"]
    assert shared.bandwidth == pytest.approx(DEFAULT_TIERS["shared"].bandwidth, rel=1e-3)
    assert local.bandwidth == pytest.approx(DEFAULT_TIERS["local"].bandwidth, rel=1e-3)
    assert shared.latency == pytest.approx(DEFAULT_TIERS["shared"].latency + 3e-6, rel=1e-2)
    assert analysis.best_tier(1, 1 << 20)[0] == "tmpfs"
    pc = analysis.producer_consumer
    assert set(pc.filter(pl.col("file_group") == "ind")["tier"]) == {"shared"}
    assert (pc["lifetime"] >= 0).all() and (pc["n_consumers"] >= 1).all()
