"""GPU kernel under the CUDA simulator, RC calibration, CLI and the NetworkX front end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from typer.testing import CliRunner

from schedlab.hydra_mcs import maximum_common_induced_subgraph, solve
from schedlab.hydra_mcs.cli import app
from schedlab.hydra_mcs.graph import induced, mcsplit_order, to_bitsets
from schedlab.hydra_mcs.rc import calibrate, trace_frame
from schedlab.hydra_mcs.state import Searcher
from schedlab.hydra_mcs.workloads import gnp_pairs

_SIM = """
import json, sys
from schedlab.hydra_mcs import solve, check_mapping
from schedlab.hydra_mcs.workloads import gnp_pairs
out = []
for inst in gnp_pairs(3, 9, 0.4, 5):
    cpu = solve(inst.g0, inst.g1)
    gpu = solve(inst.g0, inst.g1, gpu=True, threads=1, band_lo=0.0, band_hi=1e9,
                gpu_kernel="thread")
    ok = check_mapping(inst.g0, inst.g1, list(gpu.mapping.items())) is None
    out.append([cpu.size, gpu.size, gpu.offloaded, ok])
print(json.dumps(out))
"""


def test_gpu_kernel_agrees_with_cpu_under_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run(
        [sys.executable, "-c", _SIM], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    assert any(r[2] > 0 for r in rows)  # something was really offloaded
    for cpu, gpu, _, ok in rows:
        assert cpu == gpu and ok


def test_rc_ranks_subtrees():
    inst = gnp_pairs(1, 18, 0.4, 3)[0]
    o0, o1 = mcsplit_order(inst.g0, inst.g1)
    s0 = induced(inst.g0, o0)
    s = Searcher(to_bitsets(s0, induced(inst.g1, o1)), s0.n, trace_rows=3000, trace_depth=4)
    s.load_root()
    s.run(np.zeros(4, np.int64), 1 << 62)
    frame = trace_frame(s.trace)
    assert frame.height > 20
    assert (frame["subtree_nodes"] >= 1).all()
    assert calibrate(frame)["rc"] > 0.3


def test_networkx_front_end():
    g1, g2 = nx.path_graph(["a", "b", "c", "d", "e"]), nx.cycle_graph(5)
    m = maximum_common_induced_subgraph(g1, g2)
    assert len(m) == 4 and len(set(m.values())) == 4
    assert nx.is_isomorphic(g1.subgraph(m), g2.subgraph(m.values()))


def test_networkx_labels_respected():
    g1, g2 = nx.path_graph(3), nx.path_graph(3)
    nx.set_node_attributes(g1, {0: 1, 1: 0, 2: 0}, "c")
    nx.set_node_attributes(g2, {0: 0, 1: 0, 2: 0}, "c")
    m = maximum_common_induced_subgraph(g1, g2, node_label="c")
    assert len(m) == 2 and 0 not in m


def test_cli_solve_json_and_errors(tmp_path):
    a, b = tmp_path / "a.edges", tmp_path / "b.edges"
    a.write_text("0 1\n1 2\n2 0\n")
    b.write_text("0 1\n1 2\n")
    runner = CliRunner()
    res = runner.invoke(app, ["solve", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["size"] == 2 and doc["optimal"] is True
    bad = tmp_path / "bad.edges"
    bad.write_text("0 1\n1 x\n")
    res = runner.invoke(app, ["solve", str(bad), str(b)])
    assert res.exit_code == 2 and "bad.edges:2" in res.output
    res = runner.invoke(app, ["solve", str(a), str(b), "--policy", "nope"])
    assert res.exit_code == 2


@pytest.mark.parametrize("threads", [1, 2])
def test_interrupt_flag_stops_with_best_so_far(threads):
    inst = gnp_pairs(1, 45, 0.3, 2)[0]
    r = solve(
        inst.g0,
        inst.g1,
        threads=threads,
        timeout=0.3,
        policy="mcsplit" if threads == 1 else "hydra-cpu",
    )
    assert not r.optimal and r.size > 0
