"""Real-GPU check of the shim with PyTorch: quota, reported size, compute share, overhead.

gPooling (../shared/papers/14-gpooling.md). Run on a machine with an NVIDIA GPU and a CUDA build
of PyTorch (under five minutes):

    python -m schedlab.gpooling.gpu_check [--out result.json]

Each scenario is a fresh Python process started with the shim preloaded, so the CUDA runtime
resolves the driver through the shim exactly as a tenant's job would. Prints one JSON document.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from schedlab.gpooling import shm
from schedlab.gpooling.native import build, shim_environment

GIB = 1 << 30

_MEMORY = r"""
import json, torch
free, total = torch.cuda.mem_get_info()
small = torch.empty(GIB // 2, dtype=torch.uint8, device="cuda")
try:
    big = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
    refused = False
except torch.cuda.OutOfMemoryError:
    refused = True
print(json.dumps(dict(reported_total=total, reported_free=free, refused_over_quota=refused)))
""".replace("GIB", str(GIB))

_COMPUTE = r"""
import json, time, torch
a = torch.randn(4096, 4096, device="cuda")
for _ in range(3):
    a @ a
torch.cuda.synchronize()
start, n = time.perf_counter(), 0
while time.perf_counter() - start < SECONDS:
    a @ a
    torch.cuda.synchronize()
    n += 1
print(json.dumps(dict(matmuls_per_s=n / (time.perf_counter() - start))))
"""

_LAUNCH = r"""
import json, time, torch
x = torch.zeros(1, device="cuda")
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(20000):
    x.add_(1)
torch.cuda.synchronize()
print(json.dumps(dict(us_per_launch=(time.perf_counter() - start) / 20000 * 1e6)))
"""


def _run(code: str, env: dict[str, str] | None, timeout: float = 120) -> dict:
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        return dict(error=done.stderr.strip()[-800:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(seconds: float = 10.0, share: float = 0.3) -> dict:
    """All scenarios; ``*_ok`` flags summarise whether the shim did its job on this GPU."""
    native = build()
    scratch = Path(tempfile.mkdtemp(prefix="gpooling-gpu-"))
    memory_region = shm.create_region(scratch / "mem.shm", 1 * GIB, 1.0)
    memory = _run(_MEMORY, shim_environment(native, region=memory_region))
    compute_code = _COMPUTE.replace("SECONDS", str(seconds))
    full = _run(compute_code, shim_environment(native, region=shm.create_region(
        scratch / "full.shm", 0, 1.0)))
    sliced_region = shm.create_region(scratch / "sliced.shm", 0, share)
    sliced = _run(compute_code, shim_environment(native, region=sliced_region))
    plain, shimmed = _run(_LAUNCH, None), _run(_LAUNCH, shim_environment(native))
    ratio = (sliced.get("matmuls_per_s", 0) / full["matmuls_per_s"]
             if full.get("matmuls_per_s") else float("nan"))
    return dict(
        memory=memory, full=full, sliced=sliced, share=share, achieved_ratio=ratio,
        sliced_usage=shm.read_region(sliced_region), launch_plain=plain, launch_shim=shimmed,
        memory_ok=bool(memory.get("refused_over_quota")) and memory.get("reported_total") == GIB,
        compute_ok=ratio == ratio and ratio <= share * 1.5,
        launch_overhead_us=shimmed.get("us_per_launch", float("nan"))
        - plain.get("us_per_launch", float("nan")),
    )


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    result = check(args.seconds)
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        from schedlab.core.io import write_text

        write_text(args.out, text + "\n")
    print(text)


if __name__ == "__main__":
    main()
