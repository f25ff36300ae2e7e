"""The block-per-subproblem CUDA kernel (a warp of 32 threads, bidomains in shared memory),
run under Numba's CUDA simulator: same sizes and node counts as the thread-per-subproblem
kernel and the CPU search, on plain, connected and directed edge-labelled pairs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from schedlab.core.errors import BadInputError
from schedlab.hydra_mcs import solve
from schedlab.hydra_mcs.gpu_kernel import SHARED_LIMIT, block_shared_bytes
from schedlab.hydra_mcs.workloads import gnp_pairs

_SIM = """
import json
import numpy as np
from schedlab.hydra_mcs import solve, check_mapping
from schedlab.hydra_mcs.engine import Options
from schedlab.hydra_mcs.gpu import CudaDevice
from schedlab.hydra_mcs.graph import GraphBuilder, induced, mcsplit_order, to_bitsets
from schedlab.hydra_mcs.state import Searcher
from schedlab.hydra_mcs.verify import brute_force
from schedlab.hydra_mcs.workloads import gnp_pairs

def labelled_directed(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        b = GraphBuilder(n, directed=True)
        for v in range(n):
            for w in range(n):
                if v != w and rng.random() < 0.3:
                    b.add_edge(v, w, int(rng.integers(1, 3)))
        out.append(b.build())
    return out

cases = [(i.g0, i.g1, False) for i in gnp_pairs(1, 6, 0.4, 3)]  # the simulator runs
# 32 Python threads per block: keep the trees small (CI time)
cases.append((*labelled_directed(5, 3), False))
cases.append((*[(i.g0, i.g1) for i in gnp_pairs(1, 5, 0.3, 6)][0], True))  # connected 2 < 4
rows = []
for g0, g1, conn in cases:
    o0, o1 = mcsplit_order(g0, g1)
    s0 = induced(g0, o0)
    bits = to_bitsets(s0, induced(g1, o1))
    task = Searcher(bits, s0.n).root_task()
    got = []
    for kernel in ("thread", "block"):
        dev = CudaDevice(kernel=kernel)
        size, pairs, nodes = dev.solve(bits, [task], Options(connected=conn), 0)
        got.append([size, nodes, dev.last_kernel])
    cpu = solve(g0, g1, connected=conn)
    rows.append(dict(got=got, cpu=[cpu.size, cpu.nodes], brute=brute_force(g0, g1, conn),
                     kclasses=int(bits.nb0.shape[1])))
print(json.dumps(rows))
"""


def test_block_kernel_agrees_with_thread_kernel_and_cpu_under_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    done = subprocess.run(
        [sys.executable, "-c", _SIM], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    direct = rows  # solve(gpu=True) end to end: test_hydra_mcs_gpu_rc_cli (same dispatch)
    assert any(r["kclasses"] > 1 for r in direct)  # the multi-way (labelled) split ran
    for r in direct:
        (ts, tn, tk), (bs, bn, bk) = r["got"]
        assert (tk, bk) == ("thread", "block")
        assert ts == bs == r["cpu"][0] == r["brute"]
        assert tn == bn == r["cpu"][1]  # the same search tree, node for node


def test_block_kernel_shared_memory_budget():
    assert block_shared_bytes(385, 1, 26) <= SHARED_LIMIT  # n = 24: fits
    cap = (80 + 2) * (80 + 3) // 2 + 80 + 10
    assert block_shared_bytes(cap, 2, 82) > SHARED_LIMIT  # n = 80: falls back to the thread kernel


def test_block_shared_bytes_counts_every_shared_array_of_the_kernel():
    """The estimate is the sum of the kernel's cuda.shared.array declarations (the level
    stack and current mapping included: without them n = 54 with 8+ edge classes was
    estimated to fit and would not on a device)."""
    import ast
    import inspect

    from schedlab.hydra_mcs import gpu_kernel

    cap, words, depth, lanes = 1700, 1, 56, gpu_kernel.FULL_BLOCK
    env = dict(CAP=cap, WORDS=words, DEPTH=depth, LANES=lanes)
    sizes = dict(uint64=8, int64=8, int32=4)
    total = 0
    for node in ast.walk(ast.parse(inspect.getsource(gpu_kernel.make_block_kernel))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "cuda.shared.array":
            shape = eval(ast.unparse(node.args[0]), {}, env)  # noqa: S307 - our own source
            count = shape if isinstance(shape, int) else int(np.prod(shape))
            total += count * sizes[node.args[1].attr]
    assert total == block_shared_bytes(cap, words, depth)


def test_unknown_gpu_kernel_is_refused_before_any_device_is_touched():
    inst = gnp_pairs(1, 5, 0.4, 1)[0]
    with pytest.raises(BadInputError, match="GPU kernel"):
        solve(inst.g0, inst.g1, gpu=True, gpu_kernel="warp9")
