"""Real-GPU check of the shim with PyTorch: quota (plain and with expandable segments), reported
size (CUDA and NVML), compute share, per-launch overhead.

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

# a training loop with PyTorch's expandable segments (cuMemCreate/cuMemMap underneath): it must
# be stopped by the quota, and what the driver really gave it must stay within the quota
_EXPANDABLE = r"""
import json, torch
model = torch.nn.Linear(4096, 4096).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
kept, refused, steps = [], False, 0
try:
    for steps in range(1, 400):
        x = torch.randn(256, 4096, device="cuda")
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        kept.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))  # grows 64 MiB/step
except torch.cuda.OutOfMemoryError:
    refused = True
print(json.dumps(dict(refused=refused, steps=steps,
                      reserved=torch.cuda.memory_reserved(),
                      free_total=list(torch.cuda.mem_get_info()))))
"""

_NVML = r"""
import ctypes, json
nvml = ctypes.CDLL("libnvidia-ml.so.1")
class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]
handle, memory = ctypes.c_void_p(), Memory()
nvml.nvmlInit_v2()
nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
rc = nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory))
print(json.dumps(dict(rc=rc, total=memory.total, free=memory.free, used=memory.used)))
"""

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
    unlimited = shm.create_region(scratch / "launch.shm", 0, 1.0)
    plain = _run(_LAUNCH, None)
    shimmed = _run(_LAUNCH, shim_environment(native, region=unlimited))
    expandable_region = shm.create_region(scratch / "expandable.shm", 2 * GIB, 1.0)
    expandable_env = shim_environment(native, region=expandable_region)
    expandable_env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    expandable = _run(_EXPANDABLE, expandable_env, timeout=300)
    expandable_peak = shm.read_region(expandable_region)["memory_peak"]
    nvml_region = shm.create_region(scratch / "nvml.shm", GIB, 1.0)
    nvml = _run(_NVML, shim_environment(native, region=nvml_region))
    ratio = (sliced.get("matmuls_per_s", 0) / full["matmuls_per_s"]
             if full.get("matmuls_per_s") else float("nan"))
    return dict(
        memory=memory, full=full, sliced=sliced, share=share, achieved_ratio=ratio,
        sliced_usage=shm.read_region(sliced_region), launch_plain=plain, launch_shim=shimmed,
        expandable=expandable, expandable_peak=expandable_peak, nvml=nvml,
        memory_ok=bool(memory.get("refused_over_quota")) and memory.get("reported_total") == GIB,
        expandable_ok=bool(expandable.get("refused")) and expandable_peak <= 2 * GIB,
        nvml_ok=nvml.get("total") == GIB,
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
