"""Real kernel resource descriptors, read from a profiler trace where a GPU is available.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md) analyses real CUDA launches. PyTorch's profiler (Kineto)
records, for every kernel launch, ``registers per thread``, ``shared memory`` (bytes, static +
dynamic) and ``block`` dimensions; :func:`kernels_from_trace` turns a Chrome-trace JSON into
:class:`~schedlab.llm.occupancy.KernelDesc` records, replacing the assumed register counts of
``kernels.toml``. :func:`profile_model` produces such a trace for one model layer's prefill and
decode GEMMs on the local GPU (CUDA only; nothing here runs in CI).
"""

from __future__ import annotations

import math
from pathlib import Path

from schedlab.core.errors import BadInputError, MissingServiceError
from schedlab.core.io import read_json
from schedlab.llm.occupancy import KernelDesc


def kernels_from_trace(path: str | Path) -> list[KernelDesc]:
    """Distinct kernels of a Kineto Chrome trace, with their launch resources."""
    path = Path(path)
    data = read_json(path, "profiler trace")
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise BadInputError("has no traceEvents list", path=path, field="traceEvents")
    found: dict[str, KernelDesc] = {}
    for index, event in enumerate(events):
        if not isinstance(event, dict) or event.get("cat") != "kernel":
            continue
        try:
            desc = _kernel(event)
        except BadInputError as exc:
            exc.path, exc.line = path, index + 1  # the event's position stands in for a line
            raise
        found.setdefault(desc.name, desc)
    return list(found.values())


def _kernel(event: dict) -> KernelDesc:
    args = event.get("args")
    if not isinstance(args, dict):
        raise BadInputError("kernel event without args", field="args")
    block = args.get("block")
    if not isinstance(block, list) or not block or not all(_is_count(b) for b in block):
        raise BadInputError(f"{block!r} is not a list of positive integers", field="block")
    regs, smem = args.get("registers per thread"), args.get("shared memory")
    if not _is_count(regs):
        raise BadInputError(f"{regs!r} is not a positive integer", field="registers per thread")
    if not _is_count(smem, allow_zero=True):
        raise BadInputError(f"{smem!r} is not a byte count", field="shared memory")
    name = event.get("name")
    if not isinstance(name, str) or not name:
        raise BadInputError("kernel event without a name", field="name")
    return KernelDesc(name=name, threads=math.prod(int(b) for b in block), regs=int(regs),
                      smem=int(smem), source="profiler trace")


def _is_count(value: object, allow_zero: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value == int(value) and value >= (0 if allow_zero else 1)


def profile_model(model: str, out: str | Path, prefill_tokens: int = 2048,
                  decode_batch: int = 32) -> list[KernelDesc]:
    """Run one layer's GEMMs at prefill and decode shapes on the local GPU under the profiler
    and return the kernels it launched (needs PyTorch with CUDA)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from schedlab.llm.costmodel import get_model

    if not torch.cuda.is_available():
        raise MissingServiceError("no CUDA device: device profiling needs a GPU")
    m = get_model(model)
    weight = torch.randn(m.hidden, m.hidden, device="cuda", dtype=torch.bfloat16)
    shapes = (prefill_tokens, decode_batch)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for rows in shapes:
            x = torch.randn(rows, m.hidden, device="cuda", dtype=torch.bfloat16)
            (x @ weight).sum().item()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out))
    return kernels_from_trace(out)
