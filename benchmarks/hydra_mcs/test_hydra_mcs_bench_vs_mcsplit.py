"""Speed of the Hydra-MCS search vs the reference C++ McSplit on the ARG pairs.

The reference is built beside the project (never committed): set HYDRA_MCS_REF to its
``mcsp`` binary (e.g. /tmp/ref-mcsplit/mcsp, james-cpp of jamestrimble's
ijcai2017-partitioning-common-subgraph, built with g++ -O3 -march=native). Both run in the same
session; the reference's own "CPU time (ms)" line is recorded as extra_info.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from schedlab.core.data import data_dir
from schedlab.hydra_mcs import solve_files

DATA = data_dir() / "mcs"
PAIRS = ["s20.?00", "s30.?02"]


def _ref_ms(a: Path, b: Path) -> float | None:
    binary = os.environ.get("HYDRA_MCS_REF")
    if not binary or not Path(binary).is_file():
        return None
    out = subprocess.run(
        [binary, "-q", "min_max", str(a), str(b)], capture_output=True, text=True, check=True
    ).stdout
    return float(re.search(r"CPU time \(ms\):\s+(\d+)", out).group(1))


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize(
    "policy,threads", [("mcsplit", 1), ("hydra-cpu", 2), ("naive-parallel", 2)]
)
def test_bench_arg_pair(benchmark, pair, policy, threads):
    if not DATA.is_dir():
        pytest.skip("../shared/data/mcs is not present")
    a, b = DATA / pair.replace("?", "A"), DATA / pair.replace("?", "B")
    solve_files(a, b, policy=policy, threads=threads)  # JIT warm-up (cached on disk anyway)
    result = benchmark.pedantic(
        solve_files,
        args=(a, b),
        kwargs=dict(policy=policy, threads=threads),
        rounds=1,
        iterations=1,
    )
    benchmark.extra_info.update(
        size=result.size,
        nodes=result.nodes,
        reference_ms=_ref_ms(a, b) if policy == "mcsplit" else None,
    )
