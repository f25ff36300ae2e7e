"""The data plane for real: the C shim, compiled here, in front of the stand-in driver.

The probe client behaves like the CUDA runtime (dlopen + dlsym, or cuGetProcAddress), so every
test below goes through actual LD_PRELOAD interposition, the shared usage region, the quota
checks and the token bucket. Only the GPU is a stand-in (csrc/fake_libcuda.c).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, MissingServiceError
from schedlab.gpooling import dataplane, shm
from schedlab.gpooling.native import NativeBuild, build, run_probe, shim_environment

OOM = 2
MIB = 1 << 20


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> NativeBuild:
    return build(root=tmp_path_factory.mktemp("gpooling-build"))


def _env(native: NativeBuild, region: Path) -> dict[str, str]:
    return shim_environment(native, region=region, stand_in=True)


@pytest.mark.parametrize("gpa", [False, True], ids=["dlsym", "cuGetProcAddress"])
def test_over_quota_allocation_gets_driver_oom_and_never_reaches_driver(
        native: NativeBuild, tmp_path: Path, gpa: bool) -> None:
    region = shm.create_region(tmp_path / "v.shm", 10 * MIB, 1.0)
    out = run_probe(native, ["alloc", str(6 * MIB), "alloc", str(6 * MIB), "alloc", str(4 * MIB),
                             "info", "total", "stats", "free", "alloc", str(6 * MIB)],
                    _env(native, region), gpa=gpa)
    first, refused, fits, info, total, stats, freed, again = out
    assert (first["rc"], refused["rc"], fits["rc"]) == (0, OOM, 0)
    assert stats["driver_allocs"] == 2 and stats["driver_used"] == 10 * MIB
    assert info["total"] == 10 * MIB and info["free"] == 0 and total["total"] == 10 * MIB
    assert freed["rc"] == 0 and again["rc"] == OOM  # the 4 MiB block was freed, 6 MiB still held
    usage = shm.read_region(region)
    assert usage["oom_rejections"] == 2 and usage["memory_peak"] == 10 * MIB
    assert usage["memory_used"] == 0 and usage["live"] == 0  # the exiting process gave back


def test_every_allocation_path_is_counted(native: NativeBuild, tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", 64 * MIB, 1.0)
    out = run_probe(native, ["managed", str(MIB), "async", str(MIB), "create", str(MIB),
                             "pitch", "1000", "1000", "info", "release", "freeall", "info"],
                    _env(native, region))
    assert [o["rc"] for o in out[:4]] == [0, 0, 0, 0]
    pitch = out[3]["pitch"]
    assert pitch == 1024  # the stand-in pads rows to 512 B, as drivers do
    assert out[4]["free"] == 64 * MIB - 3 * MIB - pitch * 1000
    assert out[7]["free"] == 64 * MIB


def test_pitch_padding_past_quota_is_refused(native: NativeBuild, tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", 1_010_000, 1.0)
    out = run_probe(native, ["pitch", "1000", "1000", "stats"], _env(native, region))
    assert out[0]["rc"] == OOM and out[1]["driver_used"] == 0  # 1024*1000 > quota: undone


def test_quota_is_shared_by_processes_of_one_virtual_device(native: NativeBuild,
                                                            tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", 10 * MIB, 1.0)
    env = _env(native, region)
    holder = subprocess.Popen([str(native.probe), "alloc", str(7 * MIB), "sleep", "3000"], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert '"rc":0' in holder.stdout.readline()
        second = run_probe(native, ["alloc", str(7 * MIB), "alloc", str(3 * MIB)], env)
        assert [o["rc"] for o in second] == [OOM, 0]
    finally:
        holder.kill()
        holder.wait()
    assert shm.read_region(region)["memory_used"] == 7 * MIB  # killed: no destructor ran
    assert shm.reap(region, native.shim) == 7 * MIB  # ... so the control plane reaps it
    usage = shm.read_region(region)
    assert usage["memory_used"] == 0 and usage["reaped_bytes"] == 7 * MIB
    assert shm.holders(region) == {}


def test_new_process_reaps_a_killed_one(native: NativeBuild, tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", 10 * MIB, 1.0)
    env = _env(native, region)
    holder = subprocess.Popen([str(native.probe), "alloc", str(9 * MIB), "sleep", "3000"], env=env,
                              stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    assert shm.holders(region) == {holder.pid: 9 * MIB}
    holder.kill()
    holder.wait()
    assert [o["rc"] for o in run_probe(native, ["alloc", str(9 * MIB)], env)] == [0]


def test_other_virtual_device_on_same_gpu_is_unaffected(native: NativeBuild,
                                                        tmp_path: Path) -> None:
    full = shm.create_region(tmp_path / "a.shm", 4 * MIB, 0.5)
    other = shm.create_region(tmp_path / "b.shm", 8 * MIB, 0.5)
    env_a, env_b = _env(native, full), _env(native, other)
    holder = subprocess.Popen([str(native.probe), "alloc", str(4 * MIB), "sleep", "3000"],
                              env=env_a, stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        assert [o["rc"] for o in run_probe(native, ["alloc", str(MIB)], env_a)] == [OOM]
        assert [o["rc"] for o in run_probe(native, ["alloc", str(8 * MIB)], env_b)] == [0]
    finally:
        holder.kill()
        holder.wait()


def test_resize_applies_to_a_running_process(native: NativeBuild, tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", 4 * MIB, 1.0)
    process = subprocess.Popen([str(native.probe), "alloc", str(3 * MIB), "sleep", "1500",
                                "alloc", str(3 * MIB)], env=_env(native, region),
                               stdout=subprocess.PIPE, text=True)
    assert '"rc":0' in process.stdout.readline()
    shm.update_quota(region, memory_limit=8 * MIB)
    rest, _ = process.communicate(timeout=30)
    assert '"rc":0' in rest  # the second block fits the grown quota


def test_private_mode_reads_limits_from_environment(native: NativeBuild) -> None:
    env = shim_environment(native, memory_limit=MIB, stand_in=True)
    out = run_probe(native, ["alloc", str(MIB), "alloc", "1", "info"], env)
    assert [o["rc"] for o in out[:2]] == [0, OOM] and out[2]["total"] == MIB


def test_token_bucket_bounds_device_time(native: NativeBuild, tmp_path: Path) -> None:
    single = dataplane.compute_enforcement(native, share=0.3, kernels=60, kernel_us=2000,
                                           scratch=tmp_path)
    assert single["excess_ns"] <= 0
    assert single["throttle_ns"] > 0 and single["launches"] == 60
    pair = dataplane.compute_enforcement(native, share=0.3, kernels=40, kernel_us=2000,
                                         processes=2, scratch=tmp_path)
    assert pair["excess_ns"] <= 0 and pair["launches"] == 80


def test_unthrottled_device_is_not_slowed(native: NativeBuild, tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", 0, 1.0)
    start = time.perf_counter()
    run_probe(native, ["launch", "50", "1000"], _env(native, region))
    usage = shm.read_region(region)
    assert usage["throttle_ns"] == 0 and usage["launch_calls"] == 50
    assert time.perf_counter() - start >= 0.05  # the kernels really ran (50 x 1 ms)


def test_launch_ex_and_sync_are_intercepted(native: NativeBuild, tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "v.shm", 0, 0.5)
    out = run_probe(native, ["launchex", "5", "100", "sync", "stats"], _env(native, region))
    usage = shm.read_region(region)
    assert out[0]["rc"] == 0 and usage["launch_calls"] == 5 and usage["sync_calls"] == 1
    assert out[2]["driver_launches"] == 5


def test_probe_without_shim_is_the_plain_driver(native: NativeBuild) -> None:
    out = run_probe(native, ["alloc", str(1 << 40), "info"])
    assert out[0]["rc"] == OOM and out[1]["total"] == 16 << 30  # the stand-in's own 16 GiB


@settings(max_examples=30)
@given(st.binary(max_size=600))
def test_region_reader_rejects_garbage(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("garbage") / "g.shm"
    path.write_bytes(data)
    with pytest.raises(BadInputError):
        shm.read_region(path)


def test_region_round_trip_and_share_validation(tmp_path: Path) -> None:
    region = shm.create_region(tmp_path / "r.shm", 123, 0.25)
    values = shm.read_region(region)
    assert values["memory_limit"] == 123 and values["share_ppm"] == 250_000
    shm.update_quota(region, memory_limit=456, share=1.0)
    assert shm.read_region(region)["share_ppm"] == 1_000_000
    with pytest.raises(BadInputError, match="compute"):
        shm.update_quota(region, share=1.5)


def test_missing_compiler_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(MissingServiceError, match="no C compiler"):
        build(root=tmp_path, compiler="no-such-cc", force=True)


def test_route_check_passes_with_the_shim_and_fails_without(native: NativeBuild, tmp_path: Path,
                                                            monkeypatch) -> None:
    assert dataplane.route_enforcement(native, tmp_path / "with")["all"] == 1.0

    def unshimmed(*args, **kwargs):
        env = shim_environment(*args, **kwargs)
        env.pop("LD_PRELOAD")
        return env

    monkeypatch.setattr(dataplane, "shim_environment", unshimmed)
    flags = dataplane.route_enforcement(native, tmp_path / "without")
    assert all(v == 0.0 for v in flags.values())  # every route really allocates
