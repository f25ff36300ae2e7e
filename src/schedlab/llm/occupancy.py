"""A CUDA occupancy calculator and a joint-residency test for pairs of kernels on one SM.

Why: whether a prefill kernel and a decode kernel can run *at the same time* on one GPU (the
"Mix" execution of edge-LLM serving) is decided per SM by four walls: registers, shared memory,
warps and resident blocks. NVIDIA's CUDA Occupancy Calculator gives the rules for one kernel; two
kernels are co-resident on an SM only when one block of each fits in what is left by the other.

Rules (CUDA C++ Programming Guide, compute capabilities 8.0/8.6/9.0; Occupancy Calculator):

* warps per block = ceil(threads / 32);
* registers are allocated per warp in units of 256 (``ceil(regs·32/256)·256``) and per SM
  sub-partition (an SM has 4, each holding regs_per_sm/4); a kernel with more than
  ``max_regs_per_thread`` registers cannot launch;
* shared memory per block = ceil((smem + reserved) / 128)·128, at most ``max_smem_per_block``;
* blocks per SM = min(by registers, by shared memory, by warps, by the block limit).

For a *pair* we count registers on the whole SM (sum of per-warp allocations), which is exact
when warps spread evenly over the four sub-partitions, as the hardware scheduler does.

Data (architecture limits, GPU → architecture, kernel descriptors with their sources) lives in
``kernels.toml`` next to this module.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.core.registry import lookup

WARP = 32
REG_UNIT = 256
SMEM_UNIT = 128
PARTITIONS = 4
WALLS = ("registers", "smem", "warps", "blocks")


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one compute capability."""

    name: str
    max_warps: int
    max_threads: int
    max_blocks: int
    regs_per_sm: int
    max_regs_per_thread: int
    smem_per_sm: int
    max_smem_per_block: int
    reserved_smem_per_block: int


@dataclass(frozen=True)
class KernelDesc:
    """What one kernel asks of an SM per block; ``smem`` in bytes (static + dynamic)."""

    name: str
    threads: int
    regs: int
    smem: int
    phase: str = "prefill"
    op: str = "gemm"
    tile_m: int = 64
    efficiency: float = 1.0
    archs: tuple[str, ...] = field(default_factory=tuple)
    source: str = "kernels.toml"

    def __post_init__(self) -> None:
        if self.threads < 1 or self.regs < 1 or self.smem < 0:
            raise ConfigError(
                f"kernel {self.name}: threads/regs must be >= 1, smem >= 0", field="kernel"
            )

    @property
    def warps(self) -> int:
        return math.ceil(self.threads / WARP)

    def regs_per_warp(self) -> int:
        return math.ceil(self.regs * WARP / REG_UNIT) * REG_UNIT

    def smem_per_block(self, arch: ArchLimits) -> int:
        raw = self.smem + arch.reserved_smem_per_block
        return math.ceil(raw / SMEM_UNIT) * SMEM_UNIT


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM for one kernel, what limits it, and the warp occupancy."""

    blocks: int
    limiter: str
    occupancy: float
    by_wall: dict[str, int]


def occupancy(kernel: KernelDesc, arch: ArchLimits) -> Occupancy:
    """The Occupancy Calculator for one kernel: blocks per SM and the binding wall."""
    if (
        kernel.regs > arch.max_regs_per_thread
        or kernel.smem > arch.max_smem_per_block
        or kernel.threads > 1024
    ):
        return Occupancy(0, "launch", 0.0, dict.fromkeys(WALLS, 0))
    warps = kernel.warps
    per_partition = arch.regs_per_sm // PARTITIONS
    warps_by_regs = (per_partition // kernel.regs_per_warp()) * PARTITIONS
    by_wall = {
        "registers": warps_by_regs // warps,
        "smem": arch.smem_per_sm // kernel.smem_per_block(arch),
        "warps": min(arch.max_warps // warps, arch.max_threads // kernel.threads),
        "blocks": arch.max_blocks,
    }
    limiter = min(WALLS, key=lambda w: by_wall[w])
    blocks = by_wall[limiter]
    return Occupancy(blocks, limiter, blocks * warps / arch.max_warps, by_wall)


def pair_usage(
    a: KernelDesc, na: int, b: KernelDesc, nb: int, arch: ArchLimits
) -> dict[str, float]:
    """Fraction of each SM wall used by ``na`` blocks of ``a`` and ``nb`` blocks of ``b``."""
    return {
        "registers": (na * a.warps * a.regs_per_warp() + nb * b.warps * b.regs_per_warp())
        / arch.regs_per_sm,
        "smem": (na * a.smem_per_block(arch) + nb * b.smem_per_block(arch)) / arch.smem_per_sm,
        "warps": max(
            (na * a.warps + nb * b.warps) / arch.max_warps,
            (na * a.threads + nb * b.threads) / arch.max_threads,
        ),
        "blocks": (na + nb) / arch.max_blocks,
    }


def co_resident(a: KernelDesc, na: int, b: KernelDesc, nb: int, arch: ArchLimits) -> bool:
    """True when ``na`` blocks of ``a`` and ``nb`` of ``b`` fit on one SM together."""
    if occupancy(a, arch).blocks == 0 or occupancy(b, arch).blocks == 0:
        return False
    return all(v <= 1.0 + 1e-12 for v in pair_usage(a, na, b, nb, arch).values())


def jointly_resident(prefill: KernelDesc, decode: KernelDesc, arch: ArchLimits) -> bool:
    """The joint-residency bound: one block of each kernel fits on an SM at once."""
    return co_resident(prefill, 1, decode, 1, arch)


def binding_wall(a: KernelDesc, na: int, b: KernelDesc, nb: int, arch: ArchLimits) -> str:
    """The wall with the highest usage (the first one to break as blocks are added)."""
    usage = pair_usage(a, na, b, nb, arch)
    return max(WALLS, key=lambda w: usage[w])


def frontier(
    prefill: KernelDesc, decode: KernelDesc, arch: ArchLimits
) -> list[tuple[int, int, str]]:
    """The feasible allocation frontier: for each n_p >= 1, the most decode blocks n_d >= 1
    that fit beside it, and the wall that stops one more decode block. Empty when the pair is
    not jointly resident."""
    points = []
    for n_p in range(1, max(occupancy(prefill, arch).blocks, 0) + 1):
        n_d = 0
        while co_resident(prefill, n_p, decode, n_d + 1, arch):
            n_d += 1
        if n_d == 0:
            break
        points.append((n_p, n_d, _breaking_wall(prefill, n_p, decode, n_d + 1, arch)))
    return points


def _breaking_wall(a: KernelDesc, na: int, b: KernelDesc, nb: int, arch: ArchLimits) -> str:
    usage = pair_usage(a, na, b, nb, arch)
    over = [w for w in WALLS if usage[w] > 1.0 + 1e-12]
    return max(over, key=lambda w: usage[w]) if over else "none"


# --- data -------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, ArchLimits], dict[str, tuple[str, int]], dict[str, KernelDesc]]:
    data = tomllib.loads(resources.files("schedlab.llm").joinpath("kernels.toml").read_text())
    archs = {k: ArchLimits(name=k, **v) for k, v in data["arch"].items()}
    gpus = {k: (v["arch"], int(v["sms"])) for k, v in data["gpus"].items()}
    kernels = {k: _kernel_from_record(k, v) for k, v in data["kernels"].items()}
    return archs, gpus, kernels


def _kernel_from_record(name: str, rec: dict) -> KernelDesc:
    """Shared memory is derived from the tile shape, so the data cannot contradict the name."""
    if rec["op"] == "gemm":
        smem = rec["stages"] * (rec["tile_m"] + rec["tile_n"]) * rec["tile_k"] * 2
        source = "cuBLAS name: stages*(M+N)*K*2 B; regs assumed"
    else:
        smem = (rec["tile_m"] + 2 * rec["tile_n"]) * rec["head_dim"] * 2
        source = "FlashAttention-2 traits: (kBlockM+2*kBlockN)*d*2 B; regs assumed"
    return KernelDesc(
        name=name,
        threads=rec["threads"],
        regs=rec["regs"],
        smem=smem,
        phase=rec["phase"],
        op=rec["op"],
        tile_m=rec["tile_m"],
        efficiency=float(rec["efficiency"]),
        archs=tuple(rec["archs"]),
        source=source,
    )


def arch_names() -> list[str]:
    return sorted(_load()[0])


def get_arch(name: str) -> ArchLimits:
    archs = _load()[0]
    return lookup(archs, "architecture", name)


def gpu_arch(gpu: str) -> tuple[ArchLimits, int]:
    """(architecture limits, SM count) of a GPU by its schedlab.llm name."""
    gpus = _load()[1]
    if gpu.lower() not in gpus:
        raise UnknownNameError("gpu", gpu, sorted(gpus))
    arch, sms = gpus[gpu.lower()]
    return get_arch(arch), sms


def kernels(
    arch: str | None = None, phase: str | None = None, op: str | None = None
) -> list[KernelDesc]:
    """Kernel descriptors compiled for ``arch`` that fit its per-block limits, largest first."""
    found = []
    for k in _load()[2].values():
        if arch is not None and arch not in k.archs:
            continue
        if arch is not None and occupancy(k, get_arch(arch)).blocks == 0:
            continue
        if (phase is None or k.phase == phase) and (op is None or k.op == op):
            found.append(k)
    return sorted(found, key=lambda k: (-k.efficiency, k.name))


def get_kernel(name: str) -> KernelDesc:
    table = _load()[2]
    return lookup(table, "kernel", name)
