"""Analytic extrapolation: largest trainable model and projected throughput on named GPUs.

SynergyScale (11-synergyscale.md) claims a 114.41B-parameter model on one 80 GB A100, 29.5x
larger than prior approaches, and up to 4.5x the throughput of offloading-only methods. Here a
policy "can train" a model when it returns a plan that fits every tier of the named hardware
(device, host DRAM, NVMe capacity; see :mod:`hardware` for the assumed servers); the largest
such model in the GPT family (d_model = 128 x layers) is found by bisection on the layer count.
"""

from __future__ import annotations

from schedlab.core.errors import SchedlabError
from schedlab.synergyscale.costmodel import Estimate, estimate
from schedlab.synergyscale.hardware import Hardware
from schedlab.synergyscale.plan import problem_for
from schedlab.synergyscale.policies import make_policy
from schedlab.synergyscale.workloads import gpt_family


def plan_for_params(params: float, hardware: Hardware, policy: str = "synergyscale",
                    batch: int = 4, seq: int = 2048) -> tuple[int, Estimate]:
    """Plan the family member nearest ``params`` parameters; returns (layers, estimate)."""
    layers = max(1, round((params / (12 * 128**2)) ** (1 / 3)))
    best = min(range(max(1, layers - 2), layers + 3), key=lambda n: abs(
        problem_for(gpt_family(n, batch=batch, seq=seq), hardware).params - params))
    problem = problem_for(gpt_family(best, batch=batch, seq=seq), hardware)
    return best, estimate(problem, make_policy(policy).plan(problem))


def trainable(layers: int, hardware: Hardware, policy: str, batch: int, seq: int,
              min_tokens_per_s: float = 0.0) -> Estimate | None:
    """The plan's estimate if it fits every tier and trains at least ``min_tokens_per_s``."""
    problem = problem_for(gpt_family(layers, batch=batch, seq=seq), hardware)
    try:
        est = estimate(problem, make_policy(policy).plan(problem))
    except SchedlabError:
        return None
    if min_tokens_per_s and batch * seq / est.iteration_s < min_tokens_per_s:
        return None
    return est


def largest_model(hardware: Hardware, policy: str, batch: int = 4, seq: int = 2048,
                  max_layers: int = 512, min_tokens_per_s: float = 0.0
                  ) -> tuple[int, Estimate | None]:
    """Bisection for the most layers ``policy`` can train on ``hardware`` (0 if none); with
    ``min_tokens_per_s``, only plans at least that fast count (the largest model *at a minimum
    throughput*, rather than the one the SSD's capacity allows)."""
    low, best = 0, None
    high = max_layers + 1
    while high - low > 1:
        mid = (low + high) // 2
        result = trainable(mid, hardware, policy, batch, seq, min_tokens_per_s)
        if result is None:
            high = mid
        else:
            low, best = mid, result
    return low, best
