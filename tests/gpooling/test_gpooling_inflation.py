"""FGD's workload inflation on a node list with CPU and memory (inflation.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError
from schedlab.gpooling.cluster_policies import CLUSTER_POLICIES as POLICIES
from schedlab.gpooling.inflation import compare_inflation, inflate, read_nodes, read_pods


def _write(tmp_path: Path) -> tuple[Path, Path]:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                     "n0,8000,65536,2,T4\nn1,64000,262144,8,V100M32\nn2,96000,393216,4,A10\n")
    pods = tmp_path / "pods.csv"
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time"]
    for i in range(60):
        gpus, milli = [(1, 1000), (1, 500), (1, 250), (2, 1000), (0, 0)][i % 5]
        rows.append(f"p{i},{4000 + 1000 * (i % 3)},{16384},{gpus},{milli},{i},{i + 100}")
    pods.write_text("\n".join(rows) + "\n")
    return pods, nodes


def test_node_cpu_limits_what_fits(tmp_path: Path) -> None:
    pods, nodes = _write(tmp_path)
    pool = read_nodes(nodes)
    assert sum(n.gpus for n in pool) == 14 and [n.cpu_milli for n in pool] == [8000, 64000, 96000]
    # a node with 8 cores cannot take two 6-core pods, whatever its GPUs say
    rows = inflate(read_pods(pods), pool, "best-fit", levels=(2.0,))
    assert rows[0]["unscheduled"] > 0


@pytest.mark.parametrize("policy", list(POLICIES))
def test_inflation_invariants(tmp_path: Path, policy: str) -> None:
    pods, nodes = _write(tmp_path)
    rows = inflate(read_pods(pods), read_nodes(nodes), policy, seed=3,
                   levels=(0.3, 0.6, 1.0, 1.5))
    assert [r["load"] for r in rows] == [0.3, 0.6, 1.0, 1.5]
    for r in rows:
        assert 0 <= r["utilisation"] <= r["granted"] <= 1.0 + 1e-9
        assert r["load"] <= r["arrived"] and r["utilisation"] <= r["arrived"] + 1e-9
        assert 0 <= r["unscheduled"] <= 1 and 0 <= r["fragmentation"] <= 1
    assert rows[-1]["unscheduled"] > 0  # 150 % of capacity cannot all be scheduled
    if policy == "whole-device":
        assert all(r["granted"] >= r["utilisation"] for r in rows)


def test_bad_inputs_name_the_field(tmp_path: Path) -> None:
    pods, nodes = _write(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,-1,1,1,T4\n")
    with pytest.raises(BadInputError, match="cpu_milli"):
        read_nodes(bad)
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,2000\n")
    with pytest.raises(BadInputError, match="gpu_milli"):
        read_pods(bad)
    with pytest.raises(BadInputError, match="levels"):
        compare_inflation(pods, nodes, levels="0.5,lots")
    with pytest.raises(BadInputError, match="seeds"):
        compare_inflation(pods, nodes, seeds=0)
    with pytest.raises(BadInputError, match="policy"):
        compare_inflation(pods, nodes, policy="nope")


def test_cli_inflate(tmp_path: Path) -> None:
    from schedlab.gpooling.cli import app

    pods, nodes = _write(tmp_path)
    done = CliRunner().invoke(app, ["inflate", "--trace", str(pods), "--nodes", str(nodes),
                                    "--levels", "0.5,1.0", "--json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    assert len(rows) == 2 * len(POLICIES)
    bad = CliRunner().invoke(app, ["inflate", "--trace", str(pods), "--nodes",
                                   str(tmp_path / "none.csv")])
    assert bad.exit_code == 2 and "none.csv" in bad.output
    # the pod list has no GPU memory and inflation books none: no flag pretending otherwise
    dead = CliRunner().invoke(app, ["inflate", "--trace", str(pods), "--nodes", str(nodes),
                                    "--memory-per-gpu", "8GiB"])
    assert dead.exit_code == 2 and "memory-per-gpu" in dead.output
    folder = CliRunner().invoke(app, ["inflate", "--trace", str(pods), "--nodes",
                                      str(tmp_path)])
    assert folder.exit_code == 2 and "is a directory" in folder.output


def test_real_alibaba_node_list(shared_data: Path) -> None:
    alibaba = shared_data / "alibaba"
    result = {}
    for policy in ("frag-aware", "whole-device"):  # the two compared (all 11: ~6x the time)
        frame = compare_inflation(alibaba / "gpu2023_pod_list_default.csv",
                                  alibaba / "gpu2023_node_list_gpu_node.csv",
                                  levels=(1.3,), policy=policy)
        result.update({r["policy"]: r for r in frame.to_dicts()})
    assert result["frag-aware"]["gpus"] == 6212
    # pooling holds more of the demand than device-level allocation once the cluster is full
    assert result["frag-aware"]["utilisation"] > result["whole-device"]["utilisation"]
