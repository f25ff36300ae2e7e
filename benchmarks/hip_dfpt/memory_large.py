"""Peak memory of a DFPT polarisability on a molecule ~10x benzene, basis values on the fly.

Run once, niced: ``nice python benchmarks/hip_dfpt/memory_large.py [--carbons 40] [--basis sto-3g]
[--devices 2] [--out result.json]``. ``--scf guess --iterations 3`` measures the runtime alone on
molecules whose SCF would take hours here: the core-Hamiltonian ground state (same grid, batches,
screening and task sizes as the SCF's; see ``dft.ground_state``) and 3 response evaluations on
random symmetric densities through the device processes, no Coulomb part (PySCF's). Per process
it reports the peak RSS (VmHWM; the parent's is reset after the set-up, so the runtime phase has
its own peak), the RSS of each device right after start (interpreter + PySCF + mapped arenas) and
each device's proportional set size (PSS: shared pages divided among the processes mapping them,
so the PSS values add up). Builds the ground state with PySCF, composes micro-tasks
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
    return status_mib(pid, "VmHWM")


def status_mib(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def pss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux ``clear_refs`` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


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
    parser.add_argument("--scf", choices=("converged", "guess"), default="converged")
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
        density_fit=(args.aux or True) if args.scf == "converged" else False,
        df_memory=args.df_memory,
        scf=args.scf,
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
    rss_before_runtime = status_mib(os.getpid(), "VmRSS")
    was_reset = reset_peak()
    t0 = time.perf_counter()
    runtime = Runtime(
        store, make_balancer("hip-dfpt"), args.devices, 1, backend="process", replan="measured"
    )
    procs = runtime._backend.procs
    devices_start_mib = [status_mib(p.pid, "VmRSS") for p in procs]
    with_coulomb = args.scf == "converged"
    coulomb = coulomb_response(system) if with_coulomb else (lambda d: 0.0)

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
        devices_mib = [hwm_mib(p.pid) for p in procs]
        devices_pss = [pss_mib(p.pid) for p in procs]
        devices_rss_end = [status_mib(p.pid, "VmRSS") for p in procs]
        parent_runtime_peak = status_mib(os.getpid(), "VmHWM") if was_reset else float("nan")
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
        rss_devices_at_start_mib=devices_start_mib,
        rss_devices_at_end_mib=devices_rss_end,
        pss_devices_at_end_mib=devices_pss,
        rss_parent_before_runtime_mib=rss_before_runtime,
        peak_rss_parent_runtime_phase_mib=parent_runtime_peak,
        scf=args.scf,
        coulomb_in_response=with_coulomb,
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
