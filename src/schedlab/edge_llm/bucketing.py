"""delta-similar prompt bucketing with its three bounds (padding waste, spread, bucket count).

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md), stage 2 of the scheduling loop. Static-shape prefill kernels
pad every prompt of a batch to the batch's longest one; grouping prompts whose lengths are
within a factor (1 + delta) bounds what that padding can waste.

Greedy rule: sort lengths ascending; a bucket opened at length L_min takes every following
length <= (1 + delta)·L_min (and at most ``max_tokens`` padded tokens). Then, per bucket,

* padding waste  (L_max - L_i) / L_max <= delta / (1 + delta) for every member, so the total
  waste sum(L_max - L_i) / sum(L_max) is bounded by delta / (1 + delta) as well;
* prefill-latency spread: members' unpadded prefill work differs by at most a factor
  (1 + delta) (padded, it is identical), so the standard deviation of their own work is at most
  delta/(1 + delta)·L_max/2 tokens;
* bucket count (ignoring the size cap): openings grow by more than (1 + delta) each time, so
  k <= floor(log(L_max / L_min) / log(1 + delta)) + 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from schedlab.core.errors import BadInputError


def delta_buckets(lengths: Sequence[int], delta: float, max_tokens: int | None = None
                  ) -> list[list[int]]:
    """Indices of ``lengths`` grouped into delta-similar buckets (each sorted by length)."""
    if delta < 0 or not math.isfinite(delta):
        raise BadInputError(f"delta must be a finite number >= 0, got {delta}", field="delta")
    if any(length < 1 for length in lengths):
        raise BadInputError("prompt lengths must be >= 1", field="input_len")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    buckets: list[list[int]] = []
    opened = 0.0
    for i in order:
        length = lengths[i]
        if buckets and length <= (1.0 + delta) * opened and (
            max_tokens is None or (len(buckets[-1]) + 1) * length <= max_tokens
        ):
            buckets[-1].append(i)
        else:
            buckets.append([i])
            opened = length
    return buckets


def padding_waste(lengths: Sequence[int], buckets: Sequence[Sequence[int]]) -> float:
    """Share of padded prefill tokens that are padding: sum(L_max - L_i) / sum(L_max)."""
    padded = used = 0
    for bucket in buckets:
        top = max(lengths[i] for i in bucket)
        padded += top * len(bucket)
        used += sum(lengths[i] for i in bucket)
    return 0.0 if padded == 0 else (padded - used) / padded


def waste_bound(delta: float) -> float:
    """delta / (1 + delta): the most any delta-similar bucket can waste."""
    return delta / (1.0 + delta)


def bucket_count_bound(lengths: Sequence[int], delta: float) -> int:
    """floor(log(L_max/L_min)/log(1+delta)) + 1 buckets at most (no size cap); for delta = 0,
    the number of distinct lengths, which also caps it."""
    if not lengths:
        return 0
    distinct = len(set(lengths))  # greedy never opens two buckets at one length
    if delta == 0:
        return distinct
    ratio = max(lengths) / min(lengths)
    # a tiny epsilon keeps exact powers of (1 + delta) from rounding the wrong way
    steps = math.log(ratio) / math.log1p(delta) + 1e-9
    return distinct if steps >= distinct else min(distinct, math.floor(steps) + 1)


def spread_bound(lengths: Sequence[int], bucket: Sequence[int], delta: float) -> float:
    """Upper bound on the standard deviation of members' own prefill tokens in a bucket."""
    top = max(lengths[i] for i in bucket)
    return waste_bound(delta) * top / 2.0
