"""Live balance on unequal and changing devices: the adaptive runtime against the previous one.

Run: ``python benchmarks/hip_dfpt/adaptive_balance.py [--molecule ethane | --xyz my.xyz]
[--basis 6-31g] [--xc pbe] [--devices 4] [--out result.json]``. For each scenario a real CPHF
polarisability runs on ``--devices`` device processes (1 stream each, basis values on the fly,
micro-task sizes from the tasks per device):

* ``equal``: no throttle;
* ``one-slow``: device 0 is 2x slower from the start (calibration included);
* ``two-speeds``: devices 0 and 1 are 2x slower than devices 2 and 3;
* ``slows-mid-run``: the last device becomes 2x slower in iteration 3, after 40% of its tasks.

Slower means :class:`schedlab.hip_dfpt.devicerun.Throttle`: the device busy-loops after each
task until it has spent 2x the task's CPU, so the yardstick, each device's summed task CPU
time (thread CPU, measured in place), sees it; wall time on this shared 2-core machine
measures the OS scheduler. Each scenario runs ``replan="adaptive"`` (per-device speeds from the
shared 5% sample, speed-aware LPT, refit per iteration, stealing in device time) and the
previous design ``replan="measured"`` (equal devices assumed; re-plans on raw live times, no
stealing). Reported per run: the CPU-time balance of every iteration (max/mean over devices),
backend overhead, steals, and whether the polarisability is bit-identical to a 1 device x 1
stream in-process run. Not a pytest benchmark: it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def scenarios(devices: int, tasks: int) -> dict[str, dict]:
    from schedlab.hip_dfpt.devicerun import Throttle

    return {
        "equal": {},
        "one-slow": {0: Throttle(2.0)},
        "two-speeds": {d: Throttle(2.0) for d in range(devices // 2)},
        "slows-mid-run": {
            devices - 1: Throttle(2.0, from_iteration=3, after_tasks=int(0.4 * tasks / devices))
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecule", default="ethane")
    parser.add_argument("--xyz", default=None, help="an XYZ file instead of --molecule")
    parser.add_argument("--basis", default="6-31g")
    parser.add_argument("--xc", default="pbe")
    parser.add_argument("--grid-level", type=int, default=1)
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--only", default=None, help="comma-separated scenarios")
    parser.add_argument("--modes", default="adaptive,measured")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from schedlab.hip_dfpt.pipeline import prepare, reference_polarizability, run_polarizability
    from schedlab.hip_dfpt.workloads import load_molecule, read_xyz

    molecule = read_xyz(args.xyz) if args.xyz else load_molecule(args.molecule)
    work = prepare(
        molecule, args.basis, args.grid_level, args.xc, cache_ao=False, workers=args.devices
    )
    reference = reference_polarizability(work.system)
    one = run_polarizability(work, "hip-dfpt", reference, 1, 1)
    ntasks = len(work.composed.tasks)
    report: dict = dict(
        molecule=molecule.name,
        basis=args.basis,
        xc=args.xc,
        nao=work.system.nao,
        micro_tasks=ntasks,
        devices=args.devices,
        yardstick="per-process summed task thread-CPU time, max/mean",
        throttle="busy loop after each task to 2x its CPU (devicerun.Throttle)",
        runs=[],
    )
    chosen = scenarios(args.devices, ntasks)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    for name, throttle in chosen.items():
        for mode in args.modes.split(","):
            load0, t0 = os.getloadavg()[0], time.perf_counter()
            run = run_polarizability(
                work,
                "hip-dfpt",
                reference,
                args.devices,
                1,
                backend="process",
                replan=mode,
                throttle=throttle,
            )
            hist = run.runtime.history
            bal = [h.cpu_balance for h in hist]
            row = dict(
                scenario=name,
                mode=mode,
                cpu_balance=bal,
                first=bal[0],
                later_mean=float(np.mean(bal[1:])),
                later_max=float(np.max(bal[1:])),
                overhead=float(np.mean([h.overhead_fraction for h in hist])),
                steals=[h.steals for h in hist],
                mean_task_us=float(np.nanmean([np.nanmean(h.task_cpu) for h in hist]) * 1e6),
                speeds_calibrated=run.runtime.speed_history[0].tolist()
                if run.runtime.speed_history
                else None,
                speeds_last=run.runtime.speeds.tolist(),
                alpha_bit_identical_to_1x1=bool(
                    np.array_equal(run.alpha.view(np.int64), one.alpha.view(np.int64))
                ),
                relative_error=run.relative_error,
                load_average=[load0, os.getloadavg()[0]],
                seconds=time.perf_counter() - t0,
            )
            report["runs"].append(row)
            print(
                f"{name:14s} {mode:9s} first {bal[0]:.3f} later mean {row['later_mean']:.3f} "
                f"max {row['later_max']:.3f} overhead {row['overhead']:.1%} "
                f"steals {sum(row['steals'])} bits {row['alpha_bit_identical_to_1x1']} "
                f"load {load0:.0f}",
                flush=True,
            )
    text = json.dumps(report, indent=1)
    if args.out:
        from schedlab.core.io import write_text

        write_text(args.out, text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
