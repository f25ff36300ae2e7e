#!/usr/bin/env bash
# CPU vs CPU+GPU on the GPU machine, in well under 5 minutes. Run from the repository root:
#   bash benchmarks/hydra_mcs/gpu_check.sh
# Prints one JSON line per (instance, policy, GPU kernel) with size, nodes, CPU and wall seconds,
# offloaded subproblems. GPU kernels: "block" (a 32-thread block = one warp per subproblem,
# bidomains in shared memory) and "thread" (one thread per subproblem, global memory).
# Instances: seeded G(24, 0.35) pairs and the benchmark G(n,p) pairs of
# test_hydra_mcs_bench_batch.py (same seeds), so no data folder is needed.
set -euo pipefail
export PYTHONPATH="${PYTHONPATH:-}:$(pwd)/src"
timeout 280 python - <<'PY'
import json, time
import numpy as np
from schedlab.hydra_mcs import solve, check_mapping
from schedlab.hydra_mcs.gpu import cuda_available
from schedlab.hydra_mcs.workloads import gnp, gnp_pairs, Instance

print(json.dumps({"cuda": cuda_available()}), flush=True)
insts = list(gnp_pairs(3, 24, 0.35, 11))
for name, n, p, seed in [("gnp28-p0.3-s1", 28, 0.3, 1), ("gnp26-p0.5-s3", 26, 0.5, 3)]:
    rng = np.random.default_rng(seed)
    insts.append(Instance(name, gnp(n, p, rng), gnp(n, p, rng)))
runs = [("mcsplit", 1, False, "-"), ("hydra-cpu", 4, False, "-"),
        ("hydra-gpu", 4, True, "block"), ("hydra-gpu", 4, True, "thread")]
for inst in insts:
    for policy, threads, gpu, kernel in runs:
        if gpu and not cuda_available():
            continue
        kw = dict(policy=policy, threads=threads, gpu=gpu)
        if gpu:
            kw["gpu_kernel"] = kernel
            solve(inst.g0, inst.g1, timeout=5, **kw)  # CUDA JIT warm-up
        c0, w0 = time.process_time(), time.perf_counter()
        r = solve(inst.g0, inst.g1, timeout=40, **kw)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        ok = check_mapping(inst.g0, inst.g1, list(r.mapping.items())) is None
        print(json.dumps(dict(instance=inst.name, policy=policy, threads=threads, kernel=kernel,
                              size=r.size, nodes=r.nodes, cpu_s=round(cpu, 3),
                              wall_s=round(wall, 3), optimal=r.optimal, valid=ok,
                              offloaded=r.offloaded, device_nodes=r.device_nodes)), flush=True)
PY
