"""An outside bypass suite against the shim: a C program of its own (``bypass.c``, compiled here
with gcc, linked against the stand-in libcuda) tries every route round a 1 GiB quota.

Each memory route holds 600 MiB taken with ``cuMemAlloc_v2`` and asks for 600 MiB more through
the route; the shim must refuse it (``CUDA_ERROR_OUT_OF_MEMORY``) without the driver seeing it.
The limits reach the job as a write-sealed memfd (what ``schedlab gpooling run`` does), so even
a job running as root cannot raise them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from schedlab.gpooling import shm
from schedlab.gpooling.native import NativeBuild, build, shim_environment

MIB = 1 << 20
GIB = 1 << 30
OOM, NOT_PERMITTED = 2, 800
HELD = 600 * MIB


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> NativeBuild:
    return build(root=tmp_path_factory.mktemp("gpooling-build"))


@pytest.fixture(scope="module")
def bypass(native: NativeBuild, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bypass") / "bypass"
    source = Path(__file__).with_name("bypass.c")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(out), str(source), str(native.stub), "-ldl"],
                   check=True, capture_output=True, text=True)
    return out


def _run(bypass: Path, route: str, env: dict[str, str], fds: tuple[int, ...] = (),
         timeout: float = 60, size: int | None = None) -> dict:
    args = [str(bypass), route, *([str(size)] if size else [])]
    done = subprocess.run(args, env=env, capture_output=True, text=True,
                          timeout=timeout, pass_fds=fds, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert lines, done.stderr
    result = lines[-1]
    result["stderr"] = done.stderr
    return result


class Device:
    """A 1 GiB virtual device: usage region + sealed limits, and the job environment for it."""

    def __init__(self, native: NativeBuild, root: Path, memory: int = GIB, share: float = 1.0,
                 **limits: int) -> None:
        self.region = shm.create_region(root / "v.shm", memory, share, **limits)
        self.limits = shm.SealedLimits.from_file(self.region, vdev="vdev-test")
        self.env = shim_environment(native, region=self.region, limits_fd=self.limits.fd,
                                    stand_in=True)

    def run(self, bypass: Path, route: str, **kw) -> dict:
        return _run(bypass, route, self.env, (self.limits.fd,), **kw)

    def usage(self) -> dict[str, int]:
        return shm.read_region(self.region)


@pytest.fixture
def device(native: NativeBuild, tmp_path: Path):
    dev = Device(native, tmp_path)
    yield dev
    dev.limits.close()


MEMORY_ROUTES = [
    "direct", "dlsym:cuMemAlloc_v2", "dlsym:cuMemAlloc", "dlsym:cuMemAllocManaged",
    "dlsym:cuMemAllocAsync", "dlsym:cuMemAllocAsync_ptsz", "dlsym:cuMemAllocPitch_v2",
    "dlsym:cuMemAllocPitch", "dlsym:cuMemAllocFromPoolAsync",
    "dlsym:cuMemAllocFromPoolAsync_ptsz", "dlsym:cuMemCreate", "dlsym:cuArrayCreate_v2",
    "dlsym:cuArrayCreate", "dlsym:cuArray3DCreate_v2", "dlsym:cuArray3DCreate",
    "dlsym:cuMipmappedArrayCreate", "rtld-default", "rtld-next", "dlvsym-dlsym:GLIBC_2.34",
    "dlvsym-dlsym:GLIBC_2.2.5", "dlsym-dlsym", "dlmopen", "gpa-of-gpa", "write-usage",
    "fork-exit",
]


@pytest.mark.parametrize("route", MEMORY_ROUTES)
def test_every_route_is_refused_at_the_quota(device: Device, bypass: Path, native: NativeBuild,
                                             route: str) -> None:
    plain = dict(device.env)
    plain.pop("LD_PRELOAD")
    baseline = _run(bypass, route, plain)  # the route really allocates without the shim
    assert baseline["resolved"] == 1 and baseline["second"] == 0, baseline
    result = device.run(bypass, route)
    assert result["first"] == 0, result
    assert result["second"] == OOM, result
    assert result["driver_used"] == HELD, result  # the refused request never reached the driver
    assert device.usage()["memory_used"] == 0  # the job exited: nothing left behind


def test_every_get_proc_address_version_and_flavour_is_refused(device: Device,
                                                               bypass: Path) -> None:
    plain = dict(device.env)
    plain.pop("LD_PRELOAD")
    assert _run(bypass, "gpa-all", plain)["granted"] > 0  # the routes exist
    result = device.run(bypass, "gpa-all")
    assert result["tried"] == 432 and result["unresolved"] == 0
    assert result["granted"] == 0, result["stderr"]
    assert result["driver_used"] == HELD


def test_limits_cannot_be_raised_by_the_job(device: Device, bypass: Path) -> None:
    result = device.run(bypass, "write-limits")
    assert result["second"] == OOM, result
    # a fresh O_RDWR descriptor exists (/proc/self/fd), but every write path is sealed off
    assert (result["written"], result["mapped_rw"], result["mprotect_rw"]) == (0, 0, 0)
    assert device.limits.read()["memory_limit"] == GIB


def test_child_that_lost_the_descriptor_still_gets_the_sealed_limits(device: Device,
                                                                    bypass: Path) -> None:
    import sys

    code = ("import subprocess, sys; sys.exit(subprocess.run([sys.argv[1], 'dlsym:cuMemAlloc_v2'],"
            " close_fds=True).returncode)")
    done = subprocess.run([sys.executable, "-c", code, str(bypass)], env=device.env,
                          pass_fds=(device.limits.fd,), capture_output=True, text=True,
                          timeout=60, check=False)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["first"], result["second"]) == (0, OOM), done.stderr
    assert device.usage()["attached"] == 1


def test_unsealed_limits_fd_fails_closed(native: NativeBuild, bypass: Path,
                                         tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", GIB, 1.0)
    fd = os.open(shm.limits_path(region), os.O_RDONLY)
    try:
        env = shim_environment(native, region=region, limits_fd=fd, stand_in=True)
        result = _run(bypass, "dlsym:cuMemAlloc_v2", env, (fd,))
    finally:
        os.close(fd)
    assert result["first"] == OOM and result["driver_used"] == 0
    assert "not a write-sealed memfd" in result["stderr"]


@pytest.mark.parametrize("case", ["missing-region", "missing-limits", "garbage-limits",
                                  "nothing-configured"])
def test_no_region_fails_closed(native: NativeBuild, bypass: Path, tmp_path: Path,
                                case: str) -> None:
    region = shm.create_region(tmp_path / "v.shm", GIB, 1.0)
    env = shim_environment(native, region=region, stand_in=True)
    if case == "missing-region":
        env["GPOOLING_SHM"] = str(tmp_path / "absent.shm")
        env.pop("GPOOLING_LIMITS")
    elif case == "missing-limits":
        env["GPOOLING_LIMITS"] = str(tmp_path / "absent.limits")
    elif case == "garbage-limits":
        (tmp_path / "junk").write_bytes(b"x" * 4096)
        env["GPOOLING_LIMITS"] = str(tmp_path / "junk")
    else:
        env.pop("GPOOLING_SHM")
        env.pop("GPOOLING_LIMITS")
    result = _run(bypass, "dlsym:cuMemAlloc_v2", env)
    assert (result["first"], result["second"], result["driver_used"]) == (OOM, OOM, 0)
    assert "fail closed" in result["stderr"]
    launched = _run(bypass, "launch:kernel", env)
    assert launched["rc"] == NOT_PERMITTED


def test_revoked_device_refuses_and_says_so(device: Device, bypass: Path) -> None:
    device.limits.update(revoked=True)
    result = device.run(bypass, "dlsym:cuMemAlloc_v2")
    assert result["first"] == OOM and result["driver_used"] == 0
    assert "vdev-test was released by its owner" in result["stderr"]
    assert device.usage()["denied_calls"] >= 1


def test_fork_child_exit_does_not_give_back_parent_bytes(device: Device, bypass: Path) -> None:
    result = device.run(bypass, "fork-exit")
    assert (result["first"], result["second"]) == (0, OOM)
    usage = device.usage()
    assert usage["memory_used"] == 0 and usage["live"] == 0
    assert usage["memory_peak"] == HELD + 16 * MIB  # the child's own 16 MiB was counted


def test_mass_sigkill_is_reaped_to_zero(native: NativeBuild, bypass: Path,
                                        tmp_path: Path) -> None:
    dev = Device(native, tmp_path, memory=GIB)
    try:
        procs = [subprocess.Popen([str(bypass), "hold", str(40 * MIB)], env=dev.env,
                                  pass_fds=(dev.limits.fd,), stdout=subprocess.PIPE, text=True)
                 for _ in range(24)]
        for p in procs:
            assert json.loads(p.stdout.readline())["first"] == 0
        usage = dev.usage()
        assert usage["live"] == 24 and usage["memory_used"] == 24 * 40 * MIB
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
            p.stdout.close()
        assert shm.reap(dev.region, native.shim) == 24 * 40 * MIB
        usage = dev.usage()
        assert (usage["memory_used"], usage["live"], usage["reaped_procs"]) == (0, 0, 24)
        assert shm.holders(dev.region) == {}
        # and the quota is whole again for a newcomer: 2 x 500 MiB fit in 1 GiB
        again = dev.run(bypass, "dlsym:cuMemAlloc_v2", size=500 * MIB)
        assert (again["first"], again["second"]) == (0, 0)
    finally:
        dev.limits.close()


def test_host_memory_has_its_own_limit(native: NativeBuild, bypass: Path,
                                       tmp_path: Path) -> None:
    dev = Device(native, tmp_path, host_limit=GIB)
    try:
        result = dev.run(bypass, "host")
        assert (result["first"], result["second"], result["third"]) == (0, OOM, OOM)
        assert dev.usage()["host_peak"] == HELD
    finally:
        dev.limits.close()


def test_context_and_module_memory_are_charged(native: NativeBuild, bypass: Path,
                                               tmp_path: Path) -> None:
    dev = Device(native, tmp_path, context_charge=300 * MIB)
    env = dict(dev.env, FAKE_CUDA_CONTEXT_BYTES=str(300 * MIB), FAKE_CUDA_MODULE_BYTES=str(MIB))
    try:
        result = _run(bypass, "context", env, (dev.limits.fd,))
        # 300 MiB context + 1 MiB module + 600 MiB fits 1 GiB; the next 600 MiB does not
        assert (result["ctx"], result["module"], result["first"], result["second"]) == (
            0, 0, 0, OOM)
        assert dev.usage()["memory_peak"] == 901 * MIB
        small = Device(native, tmp_path / "small", memory=200 * MIB, context_charge=300 * MIB)
        try:
            refused = _run(bypass, "context", dict(small.env, FAKE_CUDA_CONTEXT_BYTES="0"),
                           (small.limits.fd,))
            assert refused["ctx"] == OOM  # the context alone is over the quota
        finally:
            small.limits.close()
    finally:
        dev.limits.close()


def test_nvml_reports_the_virtual_device(device: Device, bypass: Path) -> None:
    result = device.run(bypass, "nvml")
    assert (result["rc"], result["rc2"]) == (0, 0)
    assert result["total"] == GIB and result["used"] == HELD and result["free"] == GIB - HELD
    assert (result["total2"], result["used2"], result["free2"]) == (GIB, HELD, GIB - HELD)


LAUNCH_FAMILIES = ["kernel", "ex", "cooperative", "cooperative_ptsz", "multidevice", "graph",
                   "graph_ptsz", "grid", "gpa-cooperative", "gpa-graph"]


@pytest.mark.parametrize("family", LAUNCH_FAMILIES)
def test_every_launch_family_goes_through_the_token_bucket(native: NativeBuild, bypass: Path,
                                                           tmp_path: Path, family: str) -> None:
    dev = Device(native, tmp_path, memory=0, share=0.25, window_ms=10)
    try:
        start = time.perf_counter()
        result = dev.run(bypass, f"launch:{family}")
        wall = time.perf_counter() - start
        usage = dev.usage()
    finally:
        dev.limits.close()
    assert result["rc"] == 0 and usage["launch_calls"] == 20
    assert usage["throttle_ns"] > 0  # 40 ms of kernels at a 0.25 share must wait
    # charged device time never exceeds share x wall + burst + one kernel (+ jitter)
    assert usage["busy_ns"] <= 0.25 * wall * 1e9 + 2.5e6 + 2e6 + 20e6


def test_concurrent_processes_never_exceed_the_quota(native: NativeBuild, tmp_path: Path) -> None:
    dev = Device(native, tmp_path, memory=64 * MIB)
    try:
        ops = [x for _ in range(40) for x in ("alloc", str(MIB))] + ["sleep", "300"]
        procs = [subprocess.Popen([str(native.probe), *ops], env=dev.env,
                                  pass_fds=(dev.limits.fd,), stdout=subprocess.PIPE, text=True)
                 for _ in range(6)]
        granted = sum(out.count('"rc":0') for out in (p.communicate(timeout=60)[0] for p in procs))
        usage = dev.usage()
    finally:
        dev.limits.close()
    assert granted == 64  # 240 asked for, exactly the quota granted
    assert usage["memory_peak"] == 64 * MIB and usage["memory_used"] == 0
    assert usage["oom_rejections"] == 240 - 64


def test_exec_replaces_the_slot_of_the_image_before_it(device: Device, bypass: Path) -> None:
    # sh allocates nothing; the bypass program it execs takes a slot under the same pid
    import shlex

    cmd = f"exec {shlex.quote(str(bypass))} dlsym:cuMemAlloc_v2 {100 * MIB}"
    done = subprocess.run(["sh", "-c", cmd], env=device.env, pass_fds=(device.limits.fd,),
                          capture_output=True, text=True, timeout=60, check=False)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["first"], result["second"]) == (0, 0)
    usage = device.usage()
    assert usage["live"] == 0 and usage["memory_used"] == 0


def test_rtld_next_of_a_later_preloaded_library_is_its_own_next(native: NativeBuild,
                                                                 tmp_path: Path) -> None:
    """dlsym(RTLD_NEXT) is relative to the caller: another LD_PRELOAD library behind the shim
    that wraps puts must reach libc's puts, not itself (which would recurse forever)."""
    (tmp_path / "wrap.c").write_text(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <string.h>\n"
        "int puts(const char *s) { int (*next)(const char *) = "
        "(int (*)(const char *))dlsym(RTLD_NEXT, \"puts\");\n"
        "  return next == puts ? -1 : next(s); }\n")
    (tmp_path / "main.c").write_text(
        "#include <stdio.h>\nint main(void) { return puts(\"wrapped\") < 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libwrap.so"),
                    str(tmp_path / "wrap.c"), "-ldl"], check=True)
    subprocess.run(["gcc", "-o", str(tmp_path / "main"), str(tmp_path / "main.c")], check=True)
    env = shim_environment(native, memory_limit=GIB, stand_in=True)
    env["LD_PRELOAD"] = f"{native.shim}:{tmp_path / 'libwrap.so'}"
    done = subprocess.run([str(tmp_path / "main")], env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "wrapped"


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/usr/bin/setpriv").exists(),
                    reason="needs root and setpriv to run the job as another user")
def test_file_limits_hold_against_a_job_of_another_user(native: NativeBuild, bypass: Path,
                                                        tmp_path: Path) -> None:
    """Without the agent's sealed memfd, limits are a 0644 file: safe when the job's user does
    not own it. Run the bypass program as nobody against root-owned limits."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="gpooling-nobody-"))
    try:
        root.chmod(0o755)
        shim, stub = root / "libgpooling_shim.so", root / "stub"
        shutil.copy(native.shim, shim)
        shutil.copytree(native.stub_dir, stub)
        program = root / "bypass"
        shutil.copy(bypass, program)
        region = shm.create_region(root / "v.shm", GIB, 1.0)
        region.chmod(0o666)  # the job writes its usage; the limits stay root's, 0644
        env = shim_environment(native, region=region, stand_in=True)
        env.update(LD_PRELOAD=str(shim), LD_LIBRARY_PATH=str(stub),
                   GPOOLING_REAL_LIBCUDA=str(stub / "libcuda.so.1"),
                   GPOOLING_REAL_LIBNVML=str(stub / "libnvidia-ml.so.1"))
        done = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                               "--clear-groups", str(program), "write-limits"], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert (result["first"], result["second"]) == (0, OOM), done.stderr
        assert (result["opened_rw"], result["mprotect_rw"]) == (0, 0)
        assert shm.read_limits(region)["memory_limit"] == GIB
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- routes whose memory outlives one call (bypass_vmm.c, deepbind_plugin.c) -----------------

@pytest.fixture(scope="module")
def bypass_vmm(native: NativeBuild, tmp_path_factory) -> dict[str, Path]:
    """The lifetime routes' program and the two DEEPBIND plugins (one allocates in its
    constructor), linked against the stand-in libcuda."""
    out = tmp_path_factory.mktemp("bypass-vmm")
    here = Path(__file__).parent
    built = dict(program=out / "bypass_vmm", plugin=out / "plugin.so",
                 plugin_ctor=out / "plugin_ctor.so", plugin_now=out / "plugin_now.so")
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(built["program"]),
                    str(here / "bypass_vmm.c"), "-ldl"], check=True, capture_output=True)
    for name, extra in (("plugin", []), ("plugin_ctor", ["-DWITH_CTOR"]),
                        ("plugin_now", ["-Wl,-z,relro,-z,now"])):  # its GOT read-only
        subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", *extra, "-o",
                        str(built[name]), str(here / "deepbind_plugin.c"),
                        "-L", str(native.stub_dir), "-l:libcuda.so.1", "-ldl"],
                       check=True, capture_output=True)
    return built


def _run_vmm(built: dict[str, Path], route: str, env: dict[str, str],
             fds: tuple[int, ...] = (), plugin: str = "plugin") -> dict:
    args = [str(built["program"]), route]
    if route.startswith("deepbind"):
        args.append(str(built["plugin_ctor" if route.endswith(":ctor") else plugin]))
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60,
                          pass_fds=fds, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["stderr"] = done.stderr
    return result


# route -> the one stderr line a refusal must print (None: the quota refuses with OOM)
LIFETIME_ROUTES = {
    "vmm-release-mapped": None, "vmm-retain-release": None, "pool-keeps": None,
    "runtime-module": None,  # libcudart's module loader: charged like cuModuleLoad*
    "vmm-import": "cuMemImportFromShareableHandle refused",
    "ipc-open": "cuIpcOpenMemHandle refused",
    "graph-mem-node": "cuGraphAddMemAllocNode refused",
    "graph-add-node": "cuGraphAddNode of a memory-allocation node refused",
    "export-table": "cuGetExportTable of a table the CUDA runtime does not use refused",
    "deepbind:plugin_alloc": None, "deepbind:plugin_dlsym_alloc": None, "deepbind:ctor": None,
}


@pytest.mark.parametrize("route", list(LIFETIME_ROUTES))
def test_memory_that_outlives_a_call_stays_within_the_quota(device: Device, bypass_vmm,
                                                            route: str) -> None:
    """Without the shim each route has the stand-in driver hold 1,200 MiB; under a 1 GiB quota
    the driver never holds more than the quota, and a refusal says why on one stderr line."""
    plain = dict(device.env)
    plain.pop("LD_PRELOAD")
    baseline = _run_vmm(bypass_vmm, route, plain)
    assert (baseline["first"], baseline["second"]) == (0, 0), baseline
    assert baseline["driver_peak"] == 2 * HELD  # the route really exists
    result = _run_vmm(bypass_vmm, route, device.env, (device.limits.fd,))
    assert result["first"] == 0, result
    assert result["driver_peak"] <= GIB, result  # the yardstick: what the driver holds
    line = LIFETIME_ROUTES[route]
    if line is None:
        assert result["second"] == OOM, result
    else:
        assert result["escape"] == NOT_PERMITTED, result
        refusals = [x for x in result["stderr"].splitlines() if "refused" in x]
        assert len(refusals) == 1 and line in refusals[0] and "fail closed" in refusals[0]
    assert device.usage()["memory_used"] == 0


def test_vmm_memory_is_credited_when_its_last_reference_goes(device: Device,
                                                             bypass_vmm) -> None:
    """create, map, release, unmap: after the unmap the 600 MiB are given back, so 600 MiB more
    fit and a further 600 MiB do not."""
    result = _run_vmm(bypass_vmm, "vmm-cycle", device.env, (device.limits.fd,))
    assert (result["first"], result["escape"], result["second"], result["third"]) == (
        0, 0, 0, OOM)
    assert result["driver_used"] == HELD
    assert device.usage()["memory_peak"] == HELD


def test_a_pools_reserve_is_reused_without_a_new_charge_and_trimmed_back(device: Device,
                                                                         bypass_vmm) -> None:
    """A pool keeping 600 MiB hands them out again under a 1 GiB quota (charging each
    allocation on its own would refuse: 1,200 MiB); after cuMemPoolTrimTo the quota is whole."""
    result = _run_vmm(bypass_vmm, "pool-reuse", device.env, (device.limits.fd,))
    assert (result["first"], result["again"], result["trim"], result["after"]) == (0, 0, 0, 0)
    assert result["driver_peak"] == HELD and result["driver_used"] == HELD
    assert device.usage()["memory_peak"] == HELD


@pytest.mark.parametrize("plugin", ["plugin", "plugin_now"])
def test_a_deepbind_plugin_opened_behind_the_shims_back_is_patched(device: Device, bypass_vmm,
                                                                   plugin: str) -> None:
    """libc's dlopen found by walking libc's symbol table (no interposable route) opens the
    plugin with RTLD_DEEPBIND; the job's next allocation through the shim (1 MiB, 50 ms on: the
    shim looks once per coarse-clock tick) re-patches the new object's GOT, so the plugin's own
    cuMemAlloc_v2 call meets the quota; also when the plugin's GOT is read-only (full RELRO:
    -z relro -z now), which the shim unprotects for the write."""
    plain = dict(device.env)
    plain.pop("LD_PRELOAD")
    baseline = _run_vmm(bypass_vmm, "deepbind-raw", plain, plugin=plugin)
    assert baseline["second"] == 0 and baseline["driver_peak"] == 2 * HELD + MIB
    result = _run_vmm(bypass_vmm, "deepbind-raw", device.env, (device.limits.fd,), plugin)
    assert (result["first"], result["escape"], result["second"]) == (0, 0, OOM), result
    assert result["driver_peak"] == HELD + MIB
