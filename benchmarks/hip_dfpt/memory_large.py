"""Peak memory of a DFPT polarisability on a molecule ~10x benzene, basis values on the fly.

Run once, niced: ``nice python benchmarks/hip_dfpt/memory_large.py [--carbons 40] [--basis sto-3g]
[--devices 2] [--out result.json]``. Builds the ground state with PySCF, composes micro-tasks
with no cached basis values (each task evaluates its own batch's basis functions), runs the CPHF
cycle through the process backend (PySCF's Coulomb part density-fitted, for the SCF and the
response alike) and reports the peak resident memory of this process and of
the device processes (``getrusage``), next to what caching every basis value would take. PySCF's
own polarisability is computed afterwards (its memory is reported separately) to check the
result. Not a pytest benchmark: it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np


def peak_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024.0


def hwm_mib(pid: int) -> float:
    """A live process's peak RSS (VmHWM). getrusage(RUSAGE_CHILDREN) is no use here: a child
    created by fork starts with its parent's high-water mark."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def progress(**fields: object) -> None:
    """One JSON line on stderr per stage, so a long run's figures survive an interruption."""
    print(json.dumps(dict(fields, load=os.getloadavg()[0])), file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--carbons", type=int, default=40)
    parser.add_argument("--basis", default="sto-3g")
    parser.add_argument("--grid-level", type=int, default=0)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--xc", default="lda,vwn")
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--aux", default=None, help="auxiliary basis (default: PySCF's JK fit)")
    parser.add_argument("--df-memory", type=int, default=None, help="MB for in-core DF")
    parser.add_argument(
        "--iterations",
        type=int,
        default=0,
        help="run N response evaluations on random densities instead of the CPHF cycle",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from schedlab.hip_dfpt.dft import coulomb_response, polarizability
    from schedlab.hip_dfpt.pipeline import prepare, reference_polarizability
    from schedlab.hip_dfpt.policies import make_balancer
    from schedlab.hip_dfpt.runtime import Runtime
    from schedlab.hip_dfpt.workloads import alkane

    mol = alkane(args.carbons)
    t0 = time.perf_counter()
    work = prepare(
        mol,
        args.basis,
        args.grid_level,
        args.xc,
        cache_ao=False,
        raw_store=False,
        density_fit=args.aux or True,
        df_memory=args.df_memory,
    )
    t_prep = time.perf_counter() - t0
    progress(
        stage="prepared",
        seconds=round(t_prep, 1),
        nao=work.system.nao,
        grid_points=len(work.system.weights),
        tasks=len(work.composed.tasks),
        peak_rss_parent_mib=peak_mib(resource.RUSAGE_SELF),
    )
    system, store = work.system, work.composed
    n_grid, nao = len(system.weights), system.nao
    compact_cache = sum(len(t.idx) * t.n_points * 8 for t in store.tasks)
    rss_prepare = peak_mib(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    runtime = Runtime(
        store, make_balancer("hip-dfpt"), args.devices, 1, backend="process", replan="measured"
    )
    coulomb = coulomb_response(system)

    def response(d: np.ndarray) -> np.ndarray:
        out = runtime.apply(d) + coulomb(d)
        h = runtime.history[-1]
        progress(
            stage="iteration",
            n=len(runtime.history),
            wall_s=round(h.wall, 2),
            cpu_balance=round(h.cpu_balance, 4),
            peak_rss_devices_mib=[hwm_mib(p.pid) for p in runtime._backend.procs],
        )
        return out

    try:
        if args.iterations:
            rng = np.random.default_rng(0)
            for _ in range(args.iterations):
                dms = rng.standard_normal((3, nao, nao))
                response(dms + dms.transpose(0, 2, 1))
            alpha, calls = np.full((3, 3), np.nan), args.iterations
        else:
            alpha, calls = polarizability(system, response)
        devices_mib = [hwm_mib(p.pid) for p in runtime._backend.procs]
    finally:
        runtime.close()
    t_run = time.perf_counter() - t0
    hist = runtime.history
    result = dict(
        molecule=mol.name,
        atoms=len(mol.symbols),
        basis=args.basis,
        nao=nao,
        xc=args.xc,
        grid_points=n_grid,
        micro_tasks=len(store.tasks),
        devices=args.devices,
        full_ao_cache_mib=n_grid * nao * 8 / 2**20,
        compact_ao_cache_mib=compact_cache / 2**20,
        task_store_mib=store.nbytes / 2**20,
        vxc_error=work.vxc_error,
        prepare_s=t_prep,
        cphf_s=t_run,
        response_calls=calls,
        alpha_iso=float(np.trace(alpha) / 3),
        peak_rss_parent_after_prepare_mib=rss_prepare,
        peak_rss_parent_after_cphf_mib=peak_mib(resource.RUSAGE_SELF),
        peak_rss_devices_mib=devices_mib,
        live_cpu_balance=[h.cpu_balance for h in hist],
        overhead_fraction=[h.overhead_fraction for h in hist],
        iteration_wall_s=[h.wall for h in hist],
    )
    result["load_average"] = os.getloadavg()
    if args.aux:
        result["auxbasis"] = args.aux
    if not args.no_reference and not args.iterations:
        t0 = time.perf_counter()
        ref = reference_polarizability(system)
        result.update(
            reference_s=time.perf_counter() - t0,
            relative_error=float(np.abs(alpha - ref).max() / np.abs(ref).max()),
            peak_rss_parent_with_pyscf_reference_mib=peak_mib(resource.RUSAGE_SELF),
        )
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        from schedlab.core.io import write_text

        write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
