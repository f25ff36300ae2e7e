"""edge_llm GPU check: real registers per thread of the prefill/decode kernels vs kernels.toml.

    python benchmarks/gpu/edge_llm_registers.py --out trace.json [--model llama-3-8b] [--dry-run]

The joint-residency claims rest on register counts that ``schedlab/llm/kernels.toml`` marks
ASSUMED (no GPU profiled them). On a CUDA machine this profiles one layer's GEMMs
(``schedlab.edge_llm.device.profile_model``) and PyTorch's fused attention at a prefill and a
decode shape, reads each launched kernel's registers, threads and shared memory from the
Kineto trace, and prints one JSON document: the measured kernels, the assumed ones per op, and
the measured/assumed register ratio per op. ``--dry-run`` (CPU) writes a two-kernel trace in
Kineto's format and reads it back through the same parser, so the plumbing is checked without
a GPU; its JSON says ``dry-run`` and carries no measured figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def _profile_attention(out: Path, model: str, prefill_tokens: int = 2048,
                       decode_batch: int = 32) -> None:
    """Fused attention (FlashAttention-2 through SDPA where PyTorch has it) at both shapes."""
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    from schedlab.llm.costmodel import get_model

    m = get_model(model)
    heads, dim = m.hidden // 128, 128
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for batch, q_len, kv_len in ((1, prefill_tokens, prefill_tokens),
                                     (decode_batch, 1, prefill_tokens)):
            q = torch.randn(batch, heads, q_len, dim, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(batch, heads, kv_len, dim, device="cuda", dtype=torch.bfloat16)
            F.scaled_dot_product_attention(q, k, k, is_causal=q_len > 1).sum().item()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out))


def _dry_trace(out: Path) -> None:
    """Two kernel events in Kineto's Chrome-trace shape (values are placeholders)."""
    events = [dict(cat="kernel", name=name, args={"block": [threads, 1, 1],
                                                  "registers per thread": regs,
                                                  "shared memory": smem})
              for name, threads, regs, smem in (("dry_gemm_kernel", 256, 1, 0),
                                                ("dry_flash_fwd_kernel", 128, 1, 0))]
    out.write_text(json.dumps({"traceEvents": events}))


def _op(name: str) -> str:
    lowered = name.lower()
    return "attention" if any(w in lowered for w in ("flash", "fmha", "attention")) else "gemm"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Kineto trace to write.")
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)

    from schedlab.edge_llm.device import kernels_from_trace
    from schedlab.llm.occupancy import kernels

    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        _dry_trace(args.out)
        measured = kernels_from_trace(args.out)
    else:
        from schedlab.edge_llm.device import profile_model

        measured = profile_model(args.model, args.out)
        attention = args.out.with_name(args.out.stem + "-attention.json")
        _profile_attention(attention, args.model)
        measured += kernels_from_trace(attention)
    assumed = kernels()
    per_op: dict[str, dict] = {}
    for op in ("gemm", "attention"):
        mine = [k.regs for k in measured if _op(k.name) == op]
        theirs = [k.regs for k in assumed if k.op == op]
        per_op[op] = dict(measured_kernels=len(mine), assumed_kernels=len(theirs),
                          measured_regs_median=statistics.median(mine) if mine else None,
                          assumed_regs_median=statistics.median(theirs) if theirs else None)
        if mine and theirs and not args.dry_run:
            per_op[op]["measured_over_assumed"] = (per_op[op]["measured_regs_median"]
                                                   / per_op[op]["assumed_regs_median"])
    names = {k.name for k in assumed}
    print(json.dumps(dict(
        mode="dry-run" if args.dry_run else "gpu", model=args.model,
        measured=[dict(name=k.name, op=_op(k.name), threads=k.threads, regs=k.regs,
                       smem=k.smem, in_kernels_toml=k.name in names) for k in measured],
        per_op=per_op), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
