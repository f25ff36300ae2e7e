"""Speed of FGD's workload inflation (inflation.py) and of the device plugin's Allocate.

On the real Alibaba node list (6,212 GPUs, 7,064 pods, 8 levels up to 1.3x) one policy and seed
takes 0.3-1.7 s on this machine; here a seeded 300-node list keeps the benchmark self-contained.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from schedlab.gpooling.cluster_policies import CLUSTER_POLICIES as POLICIES
from schedlab.gpooling.inflation import inflate, read_nodes, read_pods


def _files(root: Path) -> tuple[Path, Path]:
    models = ["T4", "V100M32", "A10", "G2"]
    nodes = root / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"n{i},{64000 + 32000 * (i % 2)},{262144},{(2, 4, 8)[i % 3]},{models[i % 4]}\n"
        for i in range(300)))
    pods = root / "pods.csv"
    shapes = [(1, 1000), (1, 500), (1, 250), (1, 100), (2, 1000), (1, 750)]
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "".join(
        f"p{i},{4000 + 2000 * (i % 4)},{16384 + 8192 * (i % 3)},{shapes[i % 6][0]},"
        f"{shapes[i % 6][1]}\n" for i in range(3000)))
    return pods, nodes


@pytest.mark.parametrize("name", POLICIES)
def test_inflate_300_nodes(benchmark, tmp_path: Path, name: str) -> None:
    pods_path, nodes_path = _files(tmp_path)
    pods, nodes = read_pods(pods_path), read_nodes(nodes_path)
    rows = benchmark.pedantic(inflate, args=(pods, nodes, name), kwargs=dict(levels=(1.3,)),
                              rounds=3, iterations=1)
    benchmark.extra_info["utilisation_at_1.3"] = rows[-1]["utilisation"]
    benchmark.extra_info["gpus"] = sum(n.gpus for n in nodes)
