"""Hardware the cost model plans for: named GPU servers and this machine, measured at start-up.

SynergyScale (11-synergyscale.md) selects its offloading parameters from bandwidths, FLOP/s and
tier capacities. For hardware we do not have (A100/H100/H200 servers) every figure is an explicit,
documented assumption below; for the machine we run on, :func:`measure_local` measures copy
bandwidth, file (NVMe-tier) read/write bandwidth, matmul FLOP/s and CPU-Adam throughput.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from schedlab.core.errors import BadInputError
from schedlab.core.registry import lookup

GiB = 2**30
TB = 10**12


@dataclass(frozen=True)
class Hardware:
    """Capacities in bytes, bandwidths in B/s, rates in FLOP/s or parameters/s.

    ``device_flops`` is the *sustained* dense rate of the training kernels (not the datasheet
    peak); ``task_overhead`` is the fixed cost of launching or synchronising one task.
    """

    name: str
    device_bytes: int
    host_bytes: int
    nvme_bytes: int
    device_flops: float
    h2d_bw: float
    d2h_bw: float
    nvme_read_bw: float
    nvme_write_bw: float
    cpu_adam_rate: float
    device_adam_rate: float
    task_overhead: float = 20e-6
    mixed_precision: bool = True

    def row(self) -> dict:
        return asdict(self)


# Reference servers (our assumptions; the paper's abstract names only "80 GB A100"):
# * device_flops: 55 % of the bf16 dense peak (A100 312, H100/H200 SXM 989 TFLOP/s), typical of
#   large-model training kernels.
# * PCIe: 25 GB/s (Gen4 x16) / 50 GB/s (Gen5 x16) effective per direction.
# * host DRAM 512 GiB; NVMe one 3.84 TB data-centre drive (PCIe Gen4: 7.0 GB/s read, 3.8 GB/s
#   write; Gen5: 12 / 6.5 GB/s) - the usual single-GPU offloading server.
# * CPU Adam 2e9 params/s (a vectorised AVX-512 Adam on a 32-core host, cf. DeepSpeed CPU-Adam);
#   device Adam memory-bound: ~28 B/param at 80 % of HBM bandwidth.
NAMED_HARDWARE: dict[str, Hardware] = {
    "a100-80g": Hardware("a100-80g", 80 * GiB, 512 * GiB, int(3.84 * TB), 0.55 * 312e12,
                         25e9, 25e9, 7.0e9, 3.8e9, 2e9, 0.8 * 2.0e12 / 28),
    "h100": Hardware("h100", 80 * GiB, 512 * GiB, int(3.84 * TB), 0.55 * 989e12,
                     50e9, 50e9, 12e9, 6.5e9, 2e9, 0.8 * 3.35e12 / 28),
    "h200": Hardware("h200", 141 * GiB, 512 * GiB, int(3.84 * TB), 0.55 * 989e12,
                     50e9, 50e9, 12e9, 6.5e9, 2e9, 0.8 * 4.8e12 / 28),
}


def named_hardware(name: str) -> Hardware:
    return lookup(NAMED_HARDWARE, "gpu", name)


def _best_of(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return max(best, 1e-9)


def _file_bandwidth(directory: Path, nbytes: int) -> tuple[float, float]:
    from schedlab.synergyscale.tiers import NvmeStore, aligned_host_buffer

    with tempfile.TemporaryDirectory(dir=directory, prefix=".ss-bw-") as tmp:
        store = NvmeStore(tmp)
        buffer = aligned_host_buffer(nbytes // 4)
        buffer.fill_(1.0)
        write = _best_of(lambda: store.write("probe", buffer), 2)
        read = _best_of(lambda: store.read("probe", buffer), 2)
        store.cleanup()
    return nbytes / read, nbytes / write


def measure_local(nvme_dir: str | Path | None = None, size_mib: int = 32,
                  device_bytes: int = 2 * GiB, host_bytes: int = 8 * GiB) -> Hardware:
    """Measure this machine (about a second): the 'device' is a CPU arena, so h2d/d2h are
    memcpy; the NVMe tier is files in ``nvme_dir`` (default: the temp directory)."""
    import torch

    from schedlab.synergyscale.adam import AdamConfig, adam_step

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        numel = size_mib * 2**20 // 4
        src, dst = torch.ones(numel), torch.empty(numel)
        copy_bw = numel * 4 / _best_of(lambda: dst.copy_(src))
        a, b = torch.randn(384, 384), torch.randn(384, 384)
        flops = 2 * 384**3 / _best_of(lambda: a @ b, 5)
        n = 2**20
        p, g, m, v = (torch.randn(n) for _ in range(4))
        adam_rate = n / _best_of(lambda: adam_step(p, g, m, v, 1, AdamConfig()))
    finally:
        torch.set_num_threads(threads)
    directory = Path(nvme_dir) if nvme_dir else Path(tempfile.gettempdir())
    if directory.exists() and not directory.is_dir():
        raise BadInputError("NVMe path exists and is not a directory", path=directory,
                            field="nvme")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create NVMe directory: {exc.strerror}", path=directory,
                            field="nvme") from exc
    read_bw, write_bw = _file_bandwidth(directory, size_mib * 2**20)
    free = _disk_free(directory)
    return Hardware("local-cpu", device_bytes, host_bytes, free, flops, copy_bw, copy_bw,
                    read_bw, write_bw, adam_rate, adam_rate, task_overhead=50e-6,
                    mixed_precision=False)


def _disk_free(directory: Path) -> int:
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def with_budgets(hw: Hardware, device: int | None = None, host: int | None = None,
                 nvme: int | None = None) -> Hardware:
    """The same machine with tier capacities overridden (what ``--device-budget`` does)."""
    return replace(hw, device_bytes=device if device is not None else hw.device_bytes,
                   host_bytes=host if host is not None else hw.host_bytes,
                   nvme_bytes=nvme if nvme is not None else hw.nvme_bytes)
