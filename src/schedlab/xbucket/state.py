"""One resource type's bucketing state: the sorted records, the buckets, and the prediction.

X-Bucket (../shared/papers/15-xbucket.md) predicts per resource type. This module keeps the
records sorted (binary-search insert), re-buckets after every completed task once the sampling
phase is over, and answers predictions in O(log buckets) with plain Python lists and
``bisect``: NumPy's per-call overhead alone would eat most of the 15 us p99 budget.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from itertools import accumulate

import numpy as np

from schedlab.xbucket import kernels

#: a splitter turns sorted (values, significances) into (bucket values, probabilities)
Splitter = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def next_step(default: float, growth: float, previous: float, inclusive: bool = False) -> float:
    """The first ``default * growth**k`` strictly above ``previous`` (the exponential phase);
    with ``inclusive``, the first one at or above it (``previous`` is a measured need)."""
    if previous <= 0 or default <= 0:
        return default if default > 0 else 1.0
    exponent = math.floor(math.log(previous / default) / math.log(growth)) + 1
    value = default * growth**exponent
    while value <= previous:  # log rounding at exact powers must not return previous itself
        value *= growth
    if inclusive:
        while value / growth >= previous * (1 - 1e-12) and value / growth >= default:
            value /= growth
    return value


def make_splitter(mode: str, max_buckets: int) -> tuple[Splitter, bool]:
    """The splitter of a mode and whether its allocation choice is deterministic."""
    if mode == "pg":
        return (lambda v, s: kernels.greedy_buckets(v, s, False)), False
    if mode == "dg":
        return (lambda v, s: kernels.greedy_buckets(v, s, True)), True
    if mode == "pe":
        return (lambda v, s: kernels.exhaustive_buckets(v, s, max_buckets, False)), False
    if mode == "de":
        return (lambda v, s: kernels.exhaustive_buckets(v, s, max_buckets, True)), True
    if mode == "quantized":
        return (lambda v, s: kernels.quantized_buckets(v, max_buckets)), False
    raise ValueError(f"unknown bucketing mode {mode!r}")


class BucketingState:
    """Records, buckets and predictions for one (category, resource type).

    ``predict(previous)``: ``previous`` is None for a fresh task, or the value that just proved
    too small (or, for a type that was not exceeded, the most that was seen). During sampling the
    answer is the default, grown by ``growth`` past ``previous``; afterwards a bucket above
    ``previous`` (sampled by probability, or the next one up when deterministic), and past the
    top bucket the exponential step again.
    """

    __slots__ = ("default", "sampling", "growth", "deterministic", "_split", "_rng", "_vals",
                 "_sigs", "_next_sig", "values", "cumulative", "rebuckets", "lazy", "_dirty",
                 "_early", "_early_size")

    def __init__(self, mode: str, default: float, sampling: int = 10, growth: float = 2.0,
                 max_buckets: int = 10, rng: random.Random | None = None,
                 lazy: bool = False) -> None:
        self.default, self.sampling, self.growth = float(default), int(sampling), float(growth)
        self._split, self.deterministic = make_splitter(mode, max_buckets)
        self._rng = rng or random.Random(0)
        self._vals = np.empty(0)
        self._sigs = np.empty(0)
        self._next_sig = 1.0
        self.values: list[float] = []
        self.cumulative: list[float] = []
        self.rebuckets = 0
        self.lazy = lazy  # re-bucket on the next prediction instead of after every record
        self._dirty = False
        self._early: float | None = None
        self._early_size = 0

    @property
    def size(self) -> int:
        return int(self._vals.shape[0])

    @property
    def largest(self) -> float | None:
        """The largest record (None before the first)."""
        return float(self._vals[-1]) if self._vals.shape[0] else None

    @property
    def in_sampling(self) -> bool:
        return self._vals.shape[0] < self.sampling

    def add(self, value: float, weight: float = 1.0) -> None:
        """Record a completed task's peak and, past the sampling phase, re-bucket.

        ``weight`` scales the record's significance (its arrival rank): 1 in the paper; a
        time-weighted variant passes the task's wall time, so that a bucket's probability is
        its share of *time*, the measure waste is counted in."""
        # before equal values, as the reference does: within a run of equal values the order
        # of significances decides where greedy can split it
        at = int(np.searchsorted(self._vals, value, side="left"))
        self._vals = np.insert(self._vals, at, float(value))
        self._sigs = np.insert(self._sigs, at, self._next_sig * max(weight, 1e-9))
        self._next_sig += 1.0
        if not self.in_sampling:
            if self.lazy:
                self._dirty = True
            else:
                self.rebucket()

    def rebucket(self) -> None:
        values, probs = self._split(self._vals, self._sigs)
        self.values = values.tolist()
        cumulative = list(accumulate(probs.tolist()))
        cumulative[-1] = 1.0  # rounding must not leave a gap above the last bucket
        self.cumulative = cumulative
        self.rebuckets += 1
        self._dirty = False

    def predict(self, previous: float | None = None, inclusive: bool = False) -> float:
        """``inclusive``: ``previous`` is a measured need (a monitor saw the task use that
        much), so a bucket equal to it fits; otherwise the answer is strictly above it."""
        if self._vals.shape[0] < self.sampling:
            if previous is None or previous <= 0:
                return self.default
            return next_step(self.default, self.growth, previous, inclusive)
        if self._dirty:
            self.rebucket()
        values = self.values
        if previous is None:
            start = 0
        else:
            start = (bisect_left if inclusive else bisect_right)(values, previous)
        if start == len(values):
            return next_step(self.default, self.growth, previous if previous else 0.0,
                             inclusive)
        if self.deterministic:
            return values[start]
        cumulative = self.cumulative
        base = cumulative[start - 1] if start else 0.0
        target = base + self._rng.random() * (1.0 - base)
        chosen = bisect_right(cumulative, target, start)
        return values[chosen] if chosen < len(values) else values[-1]

    def floor(self) -> float | None:
        """The smallest record, once the records hold an exact repeat (a discrete resource,
        e.g. whole cores: a value seen twice is a need the category has, not noise); None
        before. An allocation below the smallest need a category has ever shown is a likely
        kill; with all values distinct the next one may lie anywhere, so no floor."""
        size = int(self._vals.shape[0])
        if self._early_size != size:
            self._early_size = size
            vals = self._vals
            self._early = float(vals[0]) if size > 1 and bool(np.any(vals[1:] == vals[:-1])) \
                else None
        return self._early

    def upper(self, q: float) -> float:
        """The smallest bucket holding at least ``q`` of the probability (past sampling): a
        cautious first guess for a task nothing is known about yet."""
        if self._dirty:
            self.rebucket()
        if not self.values:
            return self.default
        return self.values[min(bisect_left(self.cumulative, q - 1e-12), len(self.values) - 1)]

    def records(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the sorted values and their significances (for inspection and tests)."""
        return self._vals.copy(), self._sigs.copy()
