"""Paired cost of the exact fixed-point reduction against float summation (task CPU time).

``nice python benchmarks/hip_dfpt/reduction_cost.py [--molecule ethane] [--rounds 8]``: the two
runtimes alternate on the same input, so machine load hits both alike; prints the median ratio
of summed task CPU time per iteration, with cached and with on-the-fly basis values.
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecule", default="ethane")
    parser.add_argument("--basis", default="6-31g")
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    from schedlab.hip_dfpt.pipeline import prepare
    from schedlab.hip_dfpt.policies import make_balancer
    from schedlab.hip_dfpt.runtime import Runtime
    from schedlab.hip_dfpt.workloads import load_molecule

    for cache in (True, False):
        work = prepare(load_molecule(args.molecule), args.basis, cache_ao=cache)
        nao = work.composed.nao
        dms = np.random.default_rng(0).standard_normal((3, nao, nao))
        dms = dms + dms.transpose(0, 2, 1)
        runtimes = {
            k: Runtime(work.composed, make_balancer("hip-dfpt"), 1, 1, deterministic=k)
            for k in (True, False)
        }
        cpu: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.rounds):
            for k, rt in runtimes.items():
                rt.apply(dms)
                cpu[k].append(float(np.nansum(rt.history[-1].task_cpu)))
        fixed, plain = np.median(cpu[True]), np.median(cpu[False])
        print(
            f"{'cached' if cache else 'on-the-fly'}: fixed-point {fixed * 1e3:.1f} ms, float "
            f"{plain * 1e3:.1f} ms task CPU per iteration, ratio {fixed / plain:.3f}"
        )


if __name__ == "__main__":
    main()
