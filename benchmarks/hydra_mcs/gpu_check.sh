#!/usr/bin/env bash
# CPU vs CPU+GPU on the GPU machine, in well under 5 minutes. Run from the repository root:
#   bash benchmarks/hydra_mcs/gpu_check.sh
# Prints one JSON line per (instance, policy) with size, nodes, seconds, offloaded.
set -euo pipefail
timeout 280 python - <<'PY'
import json
from schedlab.hydra_mcs import solve, check_mapping
from schedlab.hydra_mcs.gpu import cuda_available
from schedlab.hydra_mcs.workloads import gnp_pairs
print(json.dumps({"cuda": cuda_available()}), flush=True)
for inst in gnp_pairs(4, 24, 0.35, 11):
    for policy, gpu in [("hydra-cpu", False), ("hydra-gpu", True)]:
        if gpu and not cuda_available():
            continue
        solve(inst.g0, inst.g1, policy=policy, threads=4, gpu=gpu, timeout=5)  # JIT warm-up
        r = solve(inst.g0, inst.g1, policy=policy, threads=4, gpu=gpu, timeout=60)
        ok = check_mapping(inst.g0, inst.g1, list(r.mapping.items())) is None
        print(json.dumps(dict(instance=inst.name, policy=policy, size=r.size, nodes=r.nodes,
                              seconds=round(r.seconds, 3), optimal=r.optimal, valid=ok,
                              offloaded=r.offloaded, device_nodes=r.device_nodes)), flush=True)
PY
