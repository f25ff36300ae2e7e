"""The embedded I/O generator's own cost: unthrottled 4 KiB random reads and 1 MiB writes."""

from __future__ import annotations

import os

import pytest

from schedlab.iflux import ioload


@pytest.fixture()
def ram(tmp_path):
    base = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path)
    path = os.path.join(base, f"iflux-bench-{os.getpid()}")
    os.makedirs(path, exist_ok=True)
    yield path
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)


@pytest.mark.parametrize("concurrency", ["processes", "threads"])
def test_iflux_bench_ioload_random_reads(benchmark, ram, concurrency):
    out = benchmark(ioload.run_job, "r", ram, "randread", 4096, True, False, 8 << 20, 2, 1000,
                    concurrency=concurrency)
    assert out["ops"] == 1000


def test_iflux_bench_ioload_sequential_writes(benchmark, ram):
    out = benchmark(ioload.run_job, "w", ram, "write", 1 << 20, False, True, 16 << 20, 2)
    assert out["bytes"] == 16 << 20
