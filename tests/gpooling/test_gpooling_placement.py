"""gPooling's FGD-based node placement (placement.PooledFGD): what it adds to FGD, shown on
clusters small enough to reason about."""

from __future__ import annotations

import numpy as np

from schedlab.gpooling.cluster_policies import make_cluster_policy
from schedlab.gpooling.fgd import FGD, Cluster, Placement
from schedlab.gpooling.placement import PooledFGD
from schedlab.traces.alibaba_gpu2023 import FULL, Node, Pod


def _two_nodes(memory: int = 32768) -> list[Node]:
    return [Node("a", 8000, memory, 2, "T4"), Node("b", 8000, memory, 2, "T4")]


def test_registered_under_its_cli_name() -> None:
    assert isinstance(make_cluster_policy("pooled-fgd"), PooledFGD)


def test_among_equal_fragmentation_it_packs_where_fgd_draws_at_random() -> None:
    """One whole GPU taken on node a; the next whole-GPU pod strands nothing on either node
    (FGD's delta is 0 on both). FGD draws; pooled-fgd takes a, the node left fullest."""
    pod = Pod("p", 1000, 1024, 1, FULL)
    picks: dict[str, set[int]] = {"fgd": set(), "pooled-fgd": set()}
    for seed in range(20):
        for policy in (FGD(), PooledFGD()):
            cluster = Cluster(_two_nodes())
            cluster.book(pod, Placement(0, (0,), FULL))
            policy.reset(cluster, [pod], np.random.default_rng(seed))
            picks[policy.name].add(policy.place(pod, cluster).node)
    assert picks["pooled-fgd"] == {0}
    assert picks["fgd"] == {0, 1}


def test_a_gpu_whose_node_has_no_memory_left_counts_as_stranded() -> None:
    """Typical pods need 6 GiB of host memory; node a has one GPU free but 4 GiB left. FGD
    (CPU only, as its code) sees that GPU as usable; pooled-fgd sees it stranded, so filling it
    lowers fragmentation by a whole GPU."""
    typical = Pod("t", 1000, 6144, 1, FULL)
    cluster = Cluster(_two_nodes(memory=10240))
    cluster.book(typical, Placement(0, (0,), FULL))
    small = Pod("s", 500, 512, 1, FULL)
    nodes = np.array([0, 1])
    rng = np.random.default_rng(0)
    fgd, pooled = FGD(), PooledFGD()
    fgd.reset(cluster, [typical], rng)
    pooled.reset(cluster, [typical], rng)
    assert list(fgd._score(small, nodes)[0]) == [0.0, 0.0]
    assert list(pooled._score(small, nodes)[0]) == [-FULL, 0.0]
    assert pooled.place(small, cluster).node == 0


def test_the_ablation_switches_give_back_fgd() -> None:
    """With memory-awareness and packing off it is FGD: same placements, same seed."""
    nodes = [Node(f"n{i}", 16000, 65536, 4, "T4") for i in range(6)]
    pods = [Pod(f"p{i}", 1000 * (1 + i % 3), 2048, 1 + (i % 5 == 0), (250, 500, FULL)[i % 3])
            for i in range(40)]
    placed = []
    for policy in (FGD(), PooledFGD(memory_aware=False, packing=False)):
        cluster = Cluster(nodes)
        policy.reset(cluster, pods, np.random.default_rng(3))
        got = []
        for pod in pods:
            where = policy.place(pod, cluster)
            if where is not None:
                cluster.book(pod, where)
            got.append(where)
        placed.append(got)
    assert placed[0] == placed[1]


def test_versus_fgd_reports_every_level_and_full(tmp_path) -> None:
    """The head-to-head on a written node and pod list: every level plus ``full`` per seed, a
    verdict each; with its additions switched off the policy ties FGD everywhere, and the CLI
    gives the same rows as JSON."""
    import json

    from typer.testing import CliRunner

    from schedlab.gpooling.cli import app
    from schedlab.gpooling.inflation import LEVELS
    from schedlab.gpooling.versus import versus_fgd
    from schedlab.traces.alibaba_gpu2023 import (
        synthetic_nodes,
        synthetic_pods,
        write_node_list,
        write_pod_list,
    )

    nodes = write_node_list(synthetic_nodes(30, seed=2), tmp_path / "nodes.csv")
    pods = write_pod_list(synthetic_pods(200, seed=2), tmp_path / "pods.csv")
    plain = PooledFGD(memory_aware=False, packing=False)
    frame = versus_fgd(pods, nodes, policy=plain, seeds=2)
    assert frame.height == 2 * (len(LEVELS) + 1)
    assert set(frame["load"]) == {f"{x:g}" for x in LEVELS} | {"full"}
    assert set(frame["verdict"]) == {"tie"}
    done = CliRunner().invoke(app, ["versus-fgd", "--trace", str(pods), "--nodes", str(nodes),
                                    "--seeds", "1", "--json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert {r["verdict"] for r in rows} <= {"win", "tie", "lose"} and rows[-1]["load"] == "full"
    bad = CliRunner().invoke(app, ["versus-fgd", "--trace", str(pods), "--nodes", str(nodes),
                                   "--policy", "nope"])
    assert bad.exit_code == 2 and "pooled-fgd" in bad.output
