"""GPU check, prepared for a session that is lent a GPU (none was lent to the one that wrote it).

Run: ``python benchmarks/hip_dfpt/gpu_check.py [--molecule benzene] [--basis 6-31g] [--out f.json]``
on a CUDA machine with CuPy (``pip install cupy-cuda12x``) and, for the comparison,
GPU4PySCF (``pip install gpu4pyscf-cuda12x``). It

1. runs one response evaluation on the CuPy path (1 device x 1/2/4 streams, pinned task data,
   asynchronous copies, no per-task synchronisation) and checks it is bit-identical to the CPU
   runtime (both reduce in exact fixed point) and within 1e-10 of PySCF's response;
2. times iterations per stream count (CUDA events per task, read once per stream);
3. computes the static polarisability through the runtime on the GPU and with GPU4PySCF's own
   ``gpu4pyscf.properties.polarizability`` on the same molecule, basis, grid and functional,
   and reports the relative difference (target: <= 1e-8).

Every missing piece is a one-line message, not a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecule", default="benzene")
    parser.add_argument("--basis", default="6-31g")
    parser.add_argument("--xc", default="lda,vwn")
    parser.add_argument("--grid-level", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    try:
        import cupy  # noqa: F401
    except ImportError:
        print("error: this check needs CuPy on a CUDA machine (pip install cupy-cuda12x)")
        return 2
    from schedlab.hip_dfpt.dft import coulomb_response, pyscf_response
    from schedlab.hip_dfpt.pipeline import prepare, reference_polarizability, run_polarizability
    from schedlab.hip_dfpt.policies import make_balancer
    from schedlab.hip_dfpt.runtime import Runtime
    from schedlab.hip_dfpt.workloads import load_molecule

    work = prepare(load_molecule(args.molecule), args.basis, args.grid_level, args.xc)
    nao = work.system.nao
    dms = np.random.default_rng(0).standard_normal((3, nao, nao))
    dms = dms + dms.transpose(0, 2, 1)
    cpu = Runtime(work.composed, make_balancer("hip-dfpt"), 1, 1).apply(dms)
    theirs = pyscf_response(work.system)(dms)
    report: dict = dict(
        molecule=args.molecule,
        basis=args.basis,
        xc=args.xc,
        nao=nao,
        tasks=len(work.composed.tasks),
    )
    for streams in (1, 2, 4):
        rt = Runtime(work.composed, make_balancer("hip-dfpt"), 1, streams, gpu=True)
        gpu = rt.apply(dms)
        walls = []
        for _ in range(5):
            start = time.perf_counter()
            rt.apply(dms)
            walls.append(time.perf_counter() - start)
        total = gpu + coulomb_response(work.system)(dms)
        report[f"streams_{streams}"] = dict(
            bit_identical_to_cpu=bool(np.array_equal(gpu, cpu)),
            response_error=float(np.abs(total - theirs).max() / np.abs(theirs).max()),
            iteration_min_s=min(walls),
            iteration_mean_s=float(np.mean(walls)),
            task_kernel_s=float(np.nansum(rt.history[-1].task_seconds)),
        )
    reference = reference_polarizability(work.system)
    run = run_polarizability(work, "hip-dfpt", reference, 1, 4, gpu=True)
    report["runtime_alpha_error_vs_pyscf"] = run.relative_error
    try:
        from gpu4pyscf import dft as gdft
        from gpu4pyscf.properties import polarizability
    except ImportError:
        report["gpu4pyscf"] = "not installed (pip install gpu4pyscf-cuda12x)"
    else:
        mf = gdft.RKS(work.system.mol, xc=args.xc)
        mf.grids.level = args.grid_level
        mf.conv_tol = 1e-11
        mf.kernel()
        start = time.perf_counter()
        alpha_g = np.asarray(polarizability.eval_polarizability(mf))
        report["gpu4pyscf_s"] = time.perf_counter() - start
        report["alpha_error_vs_gpu4pyscf"] = float(
            np.abs(run.alpha - alpha_g).max() / np.abs(alpha_g).max()
        )
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        from schedlab.core.io import write_text

        write_text(args.out, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
