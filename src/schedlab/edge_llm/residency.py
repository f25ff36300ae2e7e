"""Joint-residency analysis of prefill/decode kernel pairs over a model's operator shapes.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md): the dominant Prefill/Decode kernel pair fails the
joint-residency bound on both GPUs, and guarded alternative pairs cover part of the pair weight.

For every (operator, prefill tokens M) shape of a model we pick the kernel a cuBLAS-style
heuristic would launch (the most efficient variant whose tile_m <= M), pair it with the decode
phase's dominant kernel, and test the pair against the SM walls. A *guarded alternative* is
another jointly-resident pair whose combined efficiency stays within ``guard`` of the
dominant pair's. Shapes are weighted by their FLOPs (our stand-in for the paper's profiled
time weights).
"""

from __future__ import annotations

from dataclasses import dataclass

from schedlab.edge_llm.hopper import kernels
from schedlab.llm.costmodel import get_model
from schedlab.llm.occupancy import (
    KernelDesc,
    binding_wall,
    frontier,
    gpu_arch,
    jointly_resident,
)

PREFILL_TOKENS = (128, 256, 512, 1024, 2048, 4096, 8192)
GUARD = 0.85


@dataclass(frozen=True)
class ShapeRow:
    model: str
    gpu: str
    op: str
    tokens: int
    weight: float
    prefill_kernel: str
    decode_kernel: str
    dominant_fits: bool
    wall: str
    alternative: str
    alternative_decode: str
    frontier_points: int


def model_shapes(model: str) -> list[tuple[str, str, int, float]]:
    """(operator name, kernel op, M, FLOPs) for each linear layer and attention of a model."""
    m = get_model(model)
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    inter = int(round(m.params / m.layers - 4 * m.hidden * m.hidden) / (3 * m.hidden))
    inter = max(inter, m.hidden)
    linears = {
        "qkv": (q + 2 * kv, m.hidden),
        "o_proj": (m.hidden, q),
        "gate_up": (2 * inter, m.hidden),
        "down": (m.hidden, inter),
    }
    shapes = []
    for tokens in PREFILL_TOKENS:
        for name, (n, k) in linears.items():
            shapes.append((name, "gemm", tokens, 2.0 * tokens * n * k))
        shapes.append(("attention", "attention", tokens, 2.0 * tokens * tokens * q))
    return shapes


def pick(candidates: list[KernelDesc], tokens: int) -> KernelDesc:
    """The heuristic's launch: the most efficient kernel whose tile fits M (else smallest)."""
    fitting = [k for k in candidates if k.tile_m <= tokens]
    if fitting:
        return fitting[0]
    return min(candidates, key=lambda k: k.tile_m)


def analyse(model: str, gpu: str, guard: float = GUARD) -> list[ShapeRow]:
    """One row per shape: does the dominant pair co-reside, and what guarded pair exists."""
    arch, _ = gpu_arch(gpu)
    rows = []
    for name, op, tokens, flops in model_shapes(model):
        pre = kernels(arch.name, "prefill", op)
        dec = kernels(arch.name, "decode", op)
        pk, dk = pick(pre, tokens), dec[0]
        fits = jointly_resident(pk, dk, arch)
        alt = alt_d = ""
        if not fits:
            need = guard * pk.efficiency * dk.efficiency
            options = [
                (a.efficiency * b.efficiency, a, b)
                for a in pre
                for b in dec
                if a.tile_m <= max(tokens, min(k.tile_m for k in pre))
                and jointly_resident(a, b, arch)
                and a.efficiency * b.efficiency >= need
            ]
            if options:
                _, a, b = max(options, key=lambda o: (o[0], o[1].name))
                alt, alt_d = a.name, b.name
        chosen = (pk, dk) if fits else (None, None)
        points = len(frontier(*chosen, arch)) if chosen[0] else 0
        rows.append(
            ShapeRow(
                model,
                gpu,
                name,
                tokens,
                flops,
                pk.name,
                dk.name,
                fits,
                binding_wall(pk, 1, dk, 1, arch),
                alt,
                alt_d,
                points,
            )
        )
    return rows


def summary(rows: list[ShapeRow]) -> dict[str, float]:
    """Shapes analysed, share where the dominant pair fails, and guarded-alternative weight."""
    total = sum(r.weight for r in rows) or 1.0
    return dict(
        shapes=len(rows),
        dominant_fail_share=sum(not r.dominant_fits for r in rows) / max(len(rows), 1),
        guarded_weight_share=sum(r.weight for r in rows if r.alternative) / total,
        dominant_fail_weight_share=sum(r.weight for r in rows if not r.dominant_fits) / total,
    )
