"""KV-cache decoding: a prompt's prefill, then one token at a time over a growing cache.

A decoder that generates text runs its prefill (every prompt token, causal) once and then one
*decode step* per new token: each step multiplies one token's vector by every static weight
(the crossbars), and its attention reads the keys/values of every token so far from a cache
(QK^T and AV over ``context + 1`` keys on the digital units). Weights stay resident, so a step
is a 1-row workload: there are no other token rows for a pipeline to overlap, only the layers'
own chain.

:func:`decode_step` derives the step from the prefill :class:`Workload` (built-in or imported):
a causal op's per-row cost ``macs + macs_growth * (t+1)`` evaluated at ``t = context``. It is
checked in the tests against ``torch.export`` of a Hugging Face decoder run with a real
``DynamicCache`` (:func:`schedlab.harp.transformers.decode_step_from_model`). Only decoder-only
(causal) workloads are accepted: an encoder-decoder's decode step would also have to drop its
encoder, which the op graph does not mark.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from schedlab.core.errors import BadInputError
from schedlab.harp.arch import ArchConfig
from schedlab.harp.opgraph import Op, Workload


def decode_step(work: Workload, context: int) -> Workload:
    """One decode step of the causal ``work`` with ``context`` tokens already in the cache."""
    if context < 0:
        raise BadInputError(f"context must be >= 0, got {context}", field="context")
    grows = [op for op in work.ops if op.macs_growth or op.elems_growth]
    full = [op for op in work.ops if op.kind == "dynamic" and not op.macs_growth]
    if not grows or full:
        what = f"op {full[0].name} attends a fixed key set" if full else "no op is causal"
        raise BadInputError(f"KV-cache decoding needs a causal decoder-only workload; "
                            f"{work.name}: {what}", field="model")
    keys = context + 1  # the cached tokens and the new one
    ops: list[Op] = []
    for op in work.ops:
        ops.append(replace(op, rows=0, macs=op.macs + op.macs_growth * keys, macs_growth=0.0,
                           elems=op.elems + op.elems_growth * keys, elems_growth=0.0))
    meta = {**work.meta, "decode_context": context, "prefill_tokens": work.tokens}
    return Workload(f"{work.name}@decode{context}", 1, tuple(ops), work.causal, meta)


@dataclass
class DecodeReport:
    """A generation run: the prefill, then ``len(step_us)`` decode steps."""

    model: str
    prompt: int
    new_tokens: int
    scheduler: str
    prefill_us: float
    step_us: list[float] = field(default_factory=list)

    @property
    def decode_us(self) -> float:
        return sum(self.step_us)

    @property
    def total_us(self) -> float:
        return self.prefill_us + self.decode_us

    @property
    def decode_tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_us * 1e6 if self.decode_us else 0.0

    def row(self) -> dict[str, float | int | str]:
        return {"model": self.model, "prompt": self.prompt, "new_tokens": self.new_tokens,
                "scheduler": self.scheduler, "prefill_us": self.prefill_us,
                "decode_us": self.decode_us, "first_step_us": self.step_us[0],
                "last_step_us": self.step_us[-1], "total_us": self.total_us,
                "decode_tokens_per_s": self.decode_tokens_per_s}


def evaluate_decoding(work: Workload, arch: ArchConfig, new_tokens: int,
                      scheduler: str = "harp", strategy: str = "latency",
                      method: str = "estimate", every: int = 1) -> DecodeReport:
    """Prefill ``work`` (its ``tokens`` are the prompt), then ``new_tokens`` decode steps.

    The weights are mapped once on the prefill and stay resident for every step. ``every``
    > 1 evaluates every ``every``-th step and holds its latency for the steps in between
    (a step's cost is piecewise linear in the context, so this only saves time).
    """
    from schedlab.harp.engine import evaluate
    from schedlab.harp.mapping import make_mapper

    if new_tokens < 1 or every < 1:
        raise BadInputError("new_tokens and every must be >= 1", field="new_tokens")
    mapping = make_mapper(strategy).map(work, arch)
    prefill = evaluate(work, arch, strategy, scheduler, method, mapping=mapping)
    steps: list[float] = []
    for i in range(new_tokens):
        if i % every == 0:
            step = decode_step(work, work.tokens + i)
            last = evaluate(step, arch, strategy, scheduler, method, mapping=mapping).latency_us
        steps.append(last)
    return DecodeReport(work.name, work.tokens, new_tokens, scheduler, prefill.latency_us,
                        steps)
