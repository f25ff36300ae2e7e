"""Hopper (sm90) kernel descriptors and the kernel lookup every edge_llm site uses.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). schedlab.llm's ``kernels.toml`` lists its Ampere
(``mma.sync``) templates for sm90 as well; on an H100/H200 cuBLAS and FlashAttention-3 launch
TMA warp-specialised ``wgmma`` kernels instead, with 3-warpgroup blocks and far larger shared
memory rings. ``hopper.toml`` describes those (shared memory derived from the tile shapes;
registers, stage counts and relative efficiencies are stated assumptions). For sm90 the
lookups below return only these; for every other architecture schedlab.llm's descriptors.
"""

from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib import resources

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.llm import occupancy as occ
from schedlab.llm.occupancy import KernelDesc

HOPPER = "sm90"
BARRIER_BYTES = 16  # two 8-byte mbarriers (full/empty) per pipeline stage


@lru_cache(maxsize=1)
def hopper_kernels() -> dict[str, KernelDesc]:
    text = resources.files("schedlab.edge_llm").joinpath("hopper.toml").read_text()
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"hopper.toml: {exc}", field="kernels") from exc
    out = {}
    for name, rec in data.get("kernels", {}).items():
        try:
            if rec["op"] == "gemm":
                smem = (
                    rec["stages"] * (rec["tile_m"] + rec["tile_n"]) * rec["tile_k"] * 2
                    + rec["stages"] * BARRIER_BYTES
                )
                source = "sm90 TMA ring: stages*(M+N)*K*2 B + barriers; regs assumed"
            else:
                smem = (rec["tile_m"] + 2 * rec["stages"] * rec["tile_n"]) * rec["head_dim"] * 2
                source = "FlashAttention-3 traits: (kBlockM+2*stages*kBlockN)*d*2 B; regs assumed"
            out[name] = KernelDesc(
                name=name,
                threads=rec["threads"],
                regs=rec["regs"],
                smem=smem,
                phase=rec["phase"],
                op=rec["op"],
                tile_m=rec["tile_m"],
                efficiency=float(rec["efficiency"]),
                archs=(HOPPER,),
                source=source,
            )
        except KeyError as exc:
            raise ConfigError(
                f"hopper.toml [kernels.{name}]: missing {exc.args[0]}", field=str(exc.args[0])
            ) from exc
    return out


def kernels(arch: str, phase: str | None = None, op: str | None = None) -> list[KernelDesc]:
    """Launchable kernels of ``arch`` (Hopper's own for sm90), most efficient first."""
    if arch != HOPPER:
        return occ.kernels(arch, phase, op)
    limits = occ.get_arch(arch)
    found = [
        k
        for k in hopper_kernels().values()
        if (phase is None or k.phase == phase)
        and (op is None or k.op == op)
        and occ.occupancy(k, limits).blocks > 0
    ]
    return sorted(found, key=lambda k: (-k.efficiency, k.name))


def get_kernel(name: str) -> KernelDesc:
    found = hopper_kernels().get(name)
    if found is not None:
        return found
    try:
        return occ.get_kernel(name)
    except UnknownNameError:
        raise UnknownNameError("kernel", name, sorted(hopper_kernels())) from None
