"""The Alibaba GPU 2023 reader, node-level books, FGD's measure and placement, inflation and
the time-based replay (alibaba.py, fgd.py, inflation.py, simulator.replay)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.gpooling.cluster_policies import CLUSTER_POLICIES, make_cluster_policy
from schedlab.gpooling.fgd import FGD, Cluster, Placement, Typical, cluster_fragmentation
from schedlab.gpooling.inflation import inflate, nothing_fits
from schedlab.gpooling.simulator import replay
from schedlab.gpooling.workloads import resampled_pods
from schedlab.traces.alibaba_gpu2023 import (
    FULL,
    Node,
    Pod,
    read_node_list,
    read_pod_list,
    synthetic_nodes,
    synthetic_pods,
    write_node_list,
    write_pod_list,
)

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model\n"
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
              "creation_time,deletion_time,scheduled_time\n")


def _tiny_nodes() -> list[Node]:
    return [Node("a", 8000, 32768, 2, "T4"), Node("b", 32000, 131072, 4, "V100M16"),
            Node("c", 16000, 65536, 1, "T4")]


# --- reader ---------------------------------------------------------------------------------

def test_reader_round_trip(tmp_path: Path) -> None:
    nodes, pods = synthetic_nodes(40, seed=1), synthetic_pods(300, seed=1)
    assert read_node_list(write_node_list(nodes, tmp_path / "n.csv")) == nodes
    back = read_pod_list(write_pod_list(pods, tmp_path / "p.csv"))
    assert [(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec) for p in back] == \
        [(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec) for p in pods]
    assert [p.deletion_time for p in back] == [p.deletion_time for p in pods]


def test_reader_reads_specs_and_blank_schedules(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text(POD_HEADER + "p0,4000,8192,1,500,T4|A10,LS,Running,10,20,\n"
                    "p1,2000,1024,0,0,,BE,Failed,0,5,1\n")
    first, second = read_pod_list(path)
    assert first.gpu_spec == ("A10", "T4") and first.scheduled_time is None
    assert second.num_gpu == 0 and second.gpu_milli == 0 and second.scheduled_time == 1


@pytest.mark.parametrize(("text", "field", "line"), [
    ("p,1,1,1,2000,,,,0,1,0\n", "gpu_milli", 2),
    ("p,1,1,1,0,,,,0,1,0\n", "gpu_milli", 2),
    ("p,x,1,1,100,,,,0,1,0\n", "cpu_milli", 2),
    ("p,1,1,1.5,100,,,,0,1,0\n", "num_gpu", 2),
    ("p,1,1,1,100,,,,5,1,5\n", "deletion_time", 2),
    ("p,1,1,1,100,,,,5,9,1\n", "scheduled_time", 2),
    ("p,1,1,1,100,,,,nan,9,1\n", "creation_time", 2),
    ("p,1,1,1,100,,,,0,1,0\np,1,-1,1,100,,,,0,1,0\n", "memory_mib", 3),
])
def test_pod_reader_errors_name_file_line_field(tmp_path: Path, text: str, field: str,
                                                line: int) -> None:
    path = tmp_path / "pods.csv"
    path.write_text(POD_HEADER + text)
    with pytest.raises(BadInputError) as caught:
        read_pod_list(path)
    message = str(caught.value)
    assert f"pods.csv:{line}" in message and field in message and "\n" not in message


@pytest.mark.parametrize(("text", "field"), [
    ("n0,-1,1,1,T4\n", "cpu_milli"), ("n0,1,1,x,T4\n", "gpu"), ("n0,1,1,2,\n", "model"),
    ("n0,1,1,1,T4\nn0,1,1,1,T4\n", "sn"), ("n0,1,1,0,\n", "gpu"),
])
def test_node_reader_errors(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(NODE_HEADER + text)
    with pytest.raises(BadInputError, match=field):
        read_node_list(path)


def test_reader_file_errors(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no such file"):
        read_node_list(tmp_path / "none.csv")
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(BadInputError, match="empty"):
        read_pod_list(tmp_path / "e.csv")
    (tmp_path / "h.csv").write_text("name,cpu_milli\np,1\n")
    with pytest.raises(BadInputError, match="missing column"):
        read_pod_list(tmp_path / "h.csv")
    (tmp_path / "w.csv").write_text(NODE_HEADER + "n0,1,1\n")
    with pytest.raises(BadInputError, match="w.csv:2"):
        read_node_list(tmp_path / "w.csv")


_cell = st.one_of(st.integers(-5, 3000).map(str), st.sampled_from(["", "x", "1e3", "nan", "inf",
                                                                  "T4", "A10|T4", "0.5"]),
                  st.text(alphabet="0123456789,.-\" |T", max_size=6))


@settings(max_examples=150)
@given(rows=st.lists(st.lists(_cell, min_size=9, max_size=12), min_size=1, max_size=5))
def test_fuzz_pod_reader_parses_or_names_the_line(tmp_path_factory, rows) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "pods.csv"
    path.write_text(POD_HEADER + "".join(",".join(r) + "\n" for r in rows))
    try:
        pods = read_pod_list(path)
    except BadInputError as exc:
        assert "pods.csv" in str(exc) and "\n" not in str(exc)
        return
    for p in pods:
        assert p.num_gpu >= 0 and 0 <= p.gpu_milli <= FULL and p.deletion_time >= 0
        assert (p.num_gpu == 0) == (p.gpu_milli == 0)


@settings(max_examples=100)
@given(rows=st.lists(st.lists(_cell, min_size=4, max_size=6), min_size=1, max_size=5))
def test_fuzz_node_reader(tmp_path_factory, rows) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "nodes.csv"
    path.write_text(NODE_HEADER + "".join(",".join(r) + "\n" for r in rows))
    try:
        nodes = read_node_list(path)
    except BadInputError as exc:
        assert "nodes.csv" in str(exc)
        return
    assert all(n.cpu_milli >= 0 and n.gpus >= 0 for n in nodes)


# --- books never over-commit ----------------------------------------------------------------

_pod = st.builds(
    lambda cpu, mem, gpus, milli, spec: Pod("p", cpu, mem, gpus, milli if gpus else 0, spec),
    st.integers(0, 20000), st.integers(0, 70000), st.integers(0, 4),
    st.sampled_from([100, 250, 300, 500, 700, 1000]), st.sampled_from([(), ("T4",)]))


@settings(max_examples=60)
@given(pods=st.lists(_pod, min_size=1, max_size=40),
       policy=st.sampled_from(sorted(CLUSTER_POLICIES)), seed=st.integers(0, 5))
def test_no_policy_over_commits_cpu_memory_or_gpu(pods, policy, seed) -> None:
    nodes = _tiny_nodes()
    cluster = Cluster(nodes)
    chosen = make_cluster_policy(policy)
    chosen.reset(cluster, pods + [Pod("g", 1, 1, 1, 1000)], np.random.default_rng(seed))
    for pod in pods:
        fits = cluster.feasible(pod).any()
        placement = chosen.place(pod, cluster)
        if placement is None:
            # only device-level allocation may refuse a pod that fits as a slice
            assert not fits or policy == "whole-device"
            continue
        cluster.book(pod, placement)
        assert (cluster.cpu_free >= 0).all() and (cluster.mem_free >= 0).all()
        assert (cluster.gpu_free[cluster.exists] >= 0).all()
        if pod.num_gpu and pod.gpu_spec:
            assert nodes[placement.node].model in pod.gpu_spec


def test_books_refuse_over_commit_and_double_release() -> None:
    cluster = Cluster(_tiny_nodes())
    pod = Pod("p", 6000, 1024, 1, 700)
    cluster.book(pod, Placement(0, (0,), 700))
    with pytest.raises(SchedlabError, match="CPU or memory"):
        cluster.book(pod, Placement(0, (1,), 700))  # 8 cores: a second 6-core pod is too many
    cluster.book(Pod("q", 1, 1, 1, 500), Placement(1, (0,), 500))
    with pytest.raises(SchedlabError, match="GPU 0"):
        cluster.book(Pod("q", 1, 1, 1, 600), Placement(1, (0,), 600))
    with pytest.raises(SchedlabError, match="model"):
        cluster.book(Pod("r", 1, 1, 1, 100, ("A10",)), Placement(2, (0,), 100))
    cluster.release(pod, Placement(0, (0,), 700))
    with pytest.raises(SchedlabError, match="double release"):
        cluster.release(pod, Placement(0, (0,), 700))


# --- FGD's measure against brute force ------------------------------------------------------

def _brute_node_frag(cpu_free: int, gpus: list[int], model: str, kinds, weights) -> float:
    """F_n(M) written straight from the definition, one pod type and one GPU at a time."""
    total = 0.0
    for (cpu, count, milli, spec), weight in zip(kinds, weights, strict=True):
        left = sum(gpus)
        can_run = (cpu_free >= cpu and (not spec or model in spec)
                   and sum(1 for g in gpus if g >= milli) >= count)
        frag = sum(g for g in gpus if g < milli) if can_run else left
        total += weight * frag
    return total


_state = st.tuples(st.integers(0, 16000), st.lists(st.integers(0, 10).map(lambda x: x * 100),
                                                     min_size=1, max_size=4))


@settings(max_examples=80)
@given(states=st.lists(_state, min_size=1, max_size=4),
       kinds=st.lists(st.tuples(st.integers(0, 12000), st.integers(1, 3),
                                st.sampled_from([100, 300, 500, 1000]),
                                st.sampled_from([(), ("T4",), ("A10",)])),
                      min_size=1, max_size=6))
def test_fgd_measure_matches_brute_force(states, kinds) -> None:
    nodes = [Node(f"n{i}", 16000, 65536, len(g), "T4" if i % 2 else "A10")
             for i, (_, g) in enumerate(states)]
    cluster = Cluster(nodes)
    for i, (cpu, gpus) in enumerate(states):
        cluster.cpu_free[i] = cpu
        cluster.gpu_free[i, :len(gpus)] = gpus
    pods = [Pod("p", c, 0, n, m, s) for c, n, m, s in kinds]
    typical = Typical.from_pods(pods, cluster)
    expected = sum(_brute_node_frag(cpu, gpus, nodes[i].model, typical.kinds, typical.weight)
                   for i, (cpu, gpus) in enumerate(states))
    assert cluster_fragmentation(cluster, typical) == pytest.approx(expected)


@settings(max_examples=40)
@given(pods=st.lists(_pod.filter(lambda p: p.num_gpu > 0), min_size=2, max_size=12),
       seed=st.integers(0, 3))
def test_fgd_places_where_fragmentation_rises_least(pods, seed) -> None:
    """Every FGD decision is the brute-force argmin of F(after) - F(before) over all nodes and,
    for a share pod, all GPUs (exclusive pods: the first GPUs with room)."""
    cluster = Cluster(_tiny_nodes())
    policy = FGD()
    policy.reset(cluster, pods, np.random.default_rng(seed))
    typical = policy.typical

    def frag() -> float:
        return cluster_fragmentation(cluster, typical)

    for pod in pods:
        placement = policy.place(pod, cluster)
        if placement is None:
            assert not cluster.feasible(pod).any()
            continue
        base, options = frag(), []
        for n in np.flatnonzero(cluster.feasible(pod)):
            fitting = [g for g in range(cluster.gpu_count[n]) if cluster.gpu_free[n, g] >=
                       pod.gpu_milli]
            choices = ([(g,) for g in fitting] if pod.num_gpu == 1 and pod.gpu_milli < FULL
                       else [tuple(fitting[:pod.num_gpu])])
            for gpus in choices:
                trial = Placement(int(n), gpus, pod.gpu_milli)
                cluster.book(pod, trial)
                options.append(frag() - base)
                cluster.release(pod, trial)
        cluster.book(pod, placement)
        assert frag() - base == pytest.approx(min(options), abs=1e-6)


# --- inflation ------------------------------------------------------------------------------

@pytest.mark.parametrize("policy", sorted(CLUSTER_POLICIES))
def test_inflation_stops_exactly_when_nothing_fits(policy: str) -> None:
    nodes, pods = synthetic_nodes(12, seed=2), synthetic_pods(400, seed=2)
    cluster = Cluster(nodes)
    rows = inflate(pods, cluster, policy, seed=1, levels=(0.5, 1.0), until_full=True)
    assert [r["load"] for r in rows] == [0.5, 1.0, float("inf")]
    assert nothing_fits(cluster, pods)
    for kind in {p.kind: p for p in pods if p.num_gpu}.values():  # brute force, node by node
        for n in range(len(cluster)):
            free = [g for g in cluster.gpu_free[n, :cluster.gpu_count[n]] if g >= kind.gpu_milli]
            assert not (cluster.cpu_free[n] >= kind.cpu_milli
                        and cluster.mem_free[n] >= kind.memory_mib
                        and len(free) >= kind.num_gpu and cluster.access(kind.gpu_spec)[n])
    for r in rows:
        assert 0 <= r["utilisation"] <= r["granted"] <= 1 + 1e-9
        assert r["unallocated"] == pytest.approx(1 - r["granted"])
        assert 0 <= r["fragmentation"] <= 1 + 1e-9
    assert cluster.allocated_milli == pytest.approx(rows[-1]["granted"] * cluster.capacity)


def test_inflation_bad_inputs() -> None:
    nodes, pods = synthetic_nodes(4, seed=0), synthetic_pods(50, seed=0)
    with pytest.raises(BadInputError, match="levels"):
        inflate(pods, nodes, "fgd", levels=(0.0,))
    with pytest.raises(BadInputError, match="GPU pods"):
        inflate([p for p in pods if not p.num_gpu], nodes, "fgd")
    with pytest.raises(BadInputError, match="policy"):
        inflate(pods, nodes, "nope")


def test_pooling_beats_device_level_on_the_generator() -> None:
    nodes, pods = synthetic_nodes(30, seed=3), synthetic_pods(2000, seed=3)
    util = {name: inflate(pods, nodes, name, seed=0, levels=(1.0,))[0]["utilisation"]
            for name in ("frag-aware", "fgd", "whole-device")}
    assert util["frag-aware"] > util["whole-device"] and util["fgd"] > util["whole-device"]


# --- time-based replay ----------------------------------------------------------------------

def test_replay_accounts_and_waits() -> None:
    nodes = synthetic_nodes(6, seed=4)
    gpus = sum(n.gpus for n in nodes)
    trace = resampled_pods(synthetic_pods(500, seed=4), gpus, 1.2, horizon=20_000,
                           max_life=5_000, seed=4)
    got = {name: replay(trace, nodes, name) for name in ("frag-aware", "fgd", "whole-device")}
    for m in got.values():
        assert 0 < m["utilisation"] <= m["allocated"] <= 1 + 1e-9
        assert m["mean_wait"] >= 0 and m["started"] <= m["pods"]
    assert got["whole-device"]["allocated"] >= got["whole-device"]["utilisation"]
    with pytest.raises(BadInputError, match="compression"):
        replay(trace, nodes, "fgd", compression=0)
    with pytest.raises(BadInputError, match="load"):
        resampled_pods(trace, gpus, -1)


def test_compression_scales_arrivals_only() -> None:
    nodes = synthetic_nodes(8, seed=5)
    pods = synthetic_pods(200, seed=5, span=2e5)
    slow, fast = replay(pods, nodes, "best-fit"), replay(pods, nodes, "best-fit", compression=4)
    assert fast["utilisation"] > slow["utilisation"]


# --- the real trace (skips without ../shared/data) ------------------------------------------

def test_real_alibaba_files(shared_data: Path) -> None:
    alibaba = shared_data / "alibaba"
    nodes = read_node_list(alibaba / "gpu2023_node_list_gpu_node.csv")
    pods = read_pod_list(alibaba / "gpu2023_pod_list_default.csv")
    assert len(nodes) == 1213 and sum(n.gpus for n in nodes) == 6212
    assert len(pods) == 8152 and sum(1 for p in pods if p.num_gpu) == 7064
    models = {n.model for n in nodes}
    assert {"T4", "G2", "P100"} <= models
    pairs = itertools.islice(((p.cpu_milli, p.gpu_milli) for p in pods if p.num_gpu), 3)
    assert all(c > 0 and 0 < m <= FULL for c, m in pairs)
