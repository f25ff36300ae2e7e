#!/usr/bin/env python3
"""CouchSurfer GPU check: two real CUDA processes sharing one GPU (run on a GPU machine).

    python benchmarks/couchsurfer/gpu_check.py --out $OUT/pairs.csv [--steps 300] [--mps]

Measures, for surfer duty cycles 0.25/0.5/1, the host's slowdown at equal priority and with
JFM's stream priorities, writes the rows as CSV and prints the fitted ``priority_residual``
(the share of plain-sharing slowdown priorities leave; the simulator assumes 0.35). With
``--mps`` it starts a CUDA MPS control daemon for the run (needed for cross-process
concurrency and priorities) and stops it afterwards; without, whatever is running is used.
Exit status 2 when no CUDA device is visible.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("couchsurfer_gpu_pairs.csv"))
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--mps", action="store_true")
    args = parser.parse_args()

    import torch

    from schedlab.couchsurfer.fusion import fit_params
    from schedlab.couchsurfer.gpucheck import sweep

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device visible", file=sys.stderr)
        return 2
    started = False
    if args.mps:
        control = shutil.which("nvidia-cuda-mps-control")
        if control is None:
            print("nvidia-cuda-mps-control not found; running without MPS", file=sys.stderr)
        else:
            subprocess.run([control, "-d"], check=False)
            started = True
    try:
        rows = sweep(device=args.device, steps=args.steps)
    finally:
        if started:
            subprocess.run([shutil.which("nvidia-cuda-mps-control") or "true"], input=b"quit\n",
                           check=False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fitted = fit_params(rows)
    summary = dict(rows=len(rows), priority_residual=fitted.priority_residual,
                   device=torch.cuda.get_device_name(0) if args.device.startswith("cuda")
                   else args.device, mps=rows[0]["mps"],
                   equal_slowdown=[r["equal_slowdown"] for r in rows],
                   priority_slowdown=[r["priority_slowdown"] for r in rows])
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
