"""Measuring the data plane: interception overhead and quota enforcement, end to end on CPU.

gPooling (../shared/papers/14-gpooling.md) claims driver-level interception costs little. These
functions run the real shim (``csrc/gpooling_shim.c``) in front of the stand-in driver
(``csrc/fake_libcuda.c``) through the probe client and report what they measured; the same code
path a CUDA program takes, minus the GPU. Time-based figures come from the probe's own clock.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from schedlab.gpooling import shm
from schedlab.gpooling.native import NativeBuild, run_probe, shim_environment

CUDA_ERROR_OUT_OF_MEMORY = 2


def _best(native: NativeBuild, op: str, key: str, calls: int, env: dict | None,
          repeats: int) -> float:
    """Fastest of ``repeats`` runs (ns): the least-disturbed figure on a shared machine."""
    return min(run_probe(native, [op, str(calls)], env)[0][key] for _ in range(repeats))


def interception_overhead(native: NativeBuild, calls: int = 200_000,
                          repeats: int = 3) -> dict[str, float]:
    """Nanoseconds per call added by the shim (quota on, unthrottled and throttled paths)."""
    quota = shim_environment(native, memory_limit=1 << 40, stand_in=True)
    throttled = shim_environment(native, memory_limit=1 << 40, share=0.999, stand_in=True)
    alloc_direct = _best(native, "bench-alloc", "ns_per_pair", calls, None, repeats) / 2
    alloc_shim = _best(native, "bench-alloc", "ns_per_pair", calls, quota, repeats) / 2
    launch_direct = _best(native, "bench-launch", "ns_per_call", calls, None, repeats)
    launch_shim = _best(native, "bench-launch", "ns_per_call", calls, quota, repeats)
    launch_sliced = _best(native, "bench-launch", "ns_per_call", calls, throttled, repeats)
    return dict(
        alloc_direct_ns=alloc_direct, alloc_shim_ns=alloc_shim,
        alloc_overhead_ns=max(alloc_shim - alloc_direct, 0.0),
        launch_direct_ns=launch_direct, launch_shim_ns=launch_shim,
        launch_overhead_ns=max(launch_shim - launch_direct, 0.0),
        launch_sliced_overhead_ns=max(launch_sliced - launch_direct, 0.0),
    )


def memory_enforcement(native: NativeBuild, scratch: Path | None = None,
                       limit: int = 1 << 20) -> dict[str, float]:
    """Over-quota allocations get the driver's OOM error and never reach the driver.

    Runs through both lookup paths (dlsym and cuGetProcAddress). Returns 1.0/0.0 flags.
    """
    scratch = Path(scratch or tempfile.mkdtemp(prefix="gpooling-enf-"))
    flags = {}
    for path_name, gpa in (("dlsym", False), ("gpa", True)):
        region = shm.create_region(scratch / f"mem-{path_name}.shm", limit, 1.0)
        env = shim_environment(native, region=region, stand_in=True)
        half = str(limit * 6 // 10)
        out = run_probe(native, ["alloc", half, "alloc", half, "info", "stats"], env, gpa=gpa)
        first, second, info, stats = out
        usage = shm.read_region(region)
        flags[f"{path_name}_oom"] = float(first["rc"] == 0
                                          and second["rc"] == CUDA_ERROR_OUT_OF_MEMORY)
        flags[f"{path_name}_driver_untouched"] = float(stats["driver_allocs"] == 1)
        flags[f"{path_name}_quota_reported"] = float(info["total"] == limit)
        flags[f"{path_name}_accounted"] = float(usage["oom_rejections"] == 1
                                                and usage["memory_used"] == 0)  # freed at exit
    flags["all"] = float(all(v == 1.0 for v in flags.values()))
    return flags


#: (name, lookup, probe operation): allocation routes the ``routes`` check drives
ROUTES = [
    ("cuMemAlloc_v2 (dlsym)", None, "alloc"), ("cuMemAlloc legacy (dlsym)", None, "alloc1"),
    ("cuMemAllocManaged", None, "managed"), ("cuMemAllocAsync", None, "async"),
    ("cuMemAllocFromPoolAsync", None, "pool"), ("cuMemAllocPitch_v2", None, "pitch"),
    ("cuMemCreate (VMM)", None, "create"), ("cuArrayCreate_v2", None, "array"),
    ("cuMipmappedArrayCreate", None, "mipmap"), ("cuMemAlloc @12040 (cuGetProcAddress)", 12040,
                                                 "alloc"),
    ("cuMemAllocFromPoolAsync @12040", 12040, "pool"), ("cuArrayCreate @12040", 12040, "array"),
    ("cuMemAlloc @3010 legacy (cuGetProcAddress)", 3010, "alloc1"),
]


def route_enforcement(native: NativeBuild, scratch: Path | None = None,
                      limit: int = 1 << 30) -> dict[str, float]:
    """With 60 % of a quota held, 60 % more through each allocation route must be refused with
    CUDA_ERROR_OUT_OF_MEMORY, the driver never seeing it. Flags per route, and ``all``."""
    scratch = Path(scratch or tempfile.mkdtemp(prefix="gpooling-routes-"))
    size = limit * 6 // 10 // 65536 * 65536  # a whole number of 16384-float array rows
    flags = {}
    for k, (name, version, op) in enumerate(ROUTES):
        region = shm.create_region(scratch / f"route-{k}.shm", limit, 1.0)
        env = shim_environment(native, region=region, stand_in=True)
        args = ["pitch", "65536", str(size // 65536)] if op == "pitch" else [op, str(size)]
        gpa = [] if version is None else ["--gpa-version", str(version)]
        ops = ["alloc", str(size), *args, "stats"]
        if version is not None:
            out = run_probe(native, gpa + ops, env, gpa=True)
        else:
            out = run_probe(native, ops, env)
        first, second, stats = out
        flags[name] = float(first["rc"] == 0 and second["rc"] == CUDA_ERROR_OUT_OF_MEMORY
                            and stats["driver_used"] == size)
    flags["all"] = float(all(v == 1.0 for v in flags.values()))
    return flags


def compute_enforcement(native: NativeBuild, share: float = 0.25, kernels: int = 200,
                        kernel_us: int = 1000, processes: int = 1,
                        scratch: Path | None = None) -> dict[str, float]:
    """Run ``processes`` probes launching ``kernels`` kernels each on one virtual device.

    Returns the device time charged, the wall time, the achieved share, and ``excess_ns``: how far
    the charged time exceeds what the token bucket allows (share x wall + burst + one kernel per
    process plus 20 ms of scheduling jitter: the most a bucket that lets a launch start on a
    zero balance can overdraw).
    """
    import subprocess
    import time

    scratch = Path(scratch or tempfile.mkdtemp(prefix="gpooling-cpu-"))
    region = shm.create_region(scratch / f"cpu-{processes}.shm", 0, share)
    env = shim_environment(native, region=region, stand_in=True)
    args = [str(native.probe), "launch", str(kernels), str(kernel_us)]
    start = time.perf_counter_ns()
    running = [subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL) for _ in range(processes)]
    for p in running:
        p.wait()
    wall = time.perf_counter_ns() - start
    usage = shm.read_region(region)
    burst = usage["window_ns"] * share
    allowed = share * wall + burst + processes * (kernel_us * 1000 + 20_000_000)
    return dict(share=share, wall_ns=float(wall), busy_ns=float(usage["busy_ns"]),
                throttle_ns=float(usage["throttle_ns"]),
                achieved_share=usage["busy_ns"] / wall,
                excess_ns=float(usage["busy_ns"] - allowed),
                launches=float(usage["launch_calls"]))
