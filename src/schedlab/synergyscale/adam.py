"""Vectorised CPU Adam over flat fp32 buffers (SynergyScale, 11-synergyscale.md).

Why a hand-written Adam: the offloaded optimizer step runs chunk by chunk on the host while the
device keeps computing, so it must update any contiguous slice of parameters in place. Every
operation is a plain IEEE element-wise op (no fused ``addcdiv``/``lerp``/``alpha=`` forms that a
vectorised kernel may contract into an FMA while its scalar tail does not), so updating a whole
chunk at once or each parameter separately gives bit-identical results. That property is what
the correctness test relies on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdamConfig:
    lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8


def adam_step(param, grad, exp_avg, exp_avg_sq, step: int, cfg: AdamConfig) -> None:
    """One Adam update of ``param`` in place (``step`` counts from 1); all tensors are fp32."""
    import torch

    with torch.no_grad():
        exp_avg.mul_(cfg.beta1)
        exp_avg.add_(grad * (1.0 - cfg.beta1))
        exp_avg_sq.mul_(cfg.beta2)
        exp_avg_sq.add_(grad * grad * (1.0 - cfg.beta2))
        bias1 = 1.0 - cfg.beta1**step
        bias2 = 1.0 - cfg.beta2**step
        denom = (exp_avg_sq / bias2).sqrt_()
        denom.add_(cfg.eps)
        update = exp_avg / denom
        update.mul_(cfg.lr / bias1)
        param.sub_(update)


def adam_flops_per_param() -> int:
    """Element-wise operations per parameter (for the cost model's CPU optimizer rate)."""
    return 14
