"""The four X-Bucket allocators and the alternatives they are compared against, one Protocol.

X-Bucket (Phung & Thain; ../shared/papers/15-xbucket.md): PG-, PE-, DG- and DE-Bucket differ
only in how buckets are found (greedy / exhaustive, see ``kernels``) and how one is chosen
(probabilistic / deterministic, see ``state``). Alternatives: Whole Machine, Max Seen, Min
Waste and Max Throughput (Tovar et al., 2017: a first allocation from the observed
distribution, retried at the maximum), Quantized Bucketing (Phung et al., 2021), and the
allocation a user declared when the trace carries one.

Retry semantics follow the reference (cctools ``bucketing_manager.c``): for an exceeded type
the next prediction must lie above the value the monitor reported for it; for the other types
it is predicted above the most that was seen of them. Issue 51 (``Defaults.retry_inclusive``,
every allocator): a report *above* the failed allocation is a measured need, so the retry may
equal it; ``Defaults.sampling_floor`` (X-Bucket): in sampling, never start below the smallest
repeated own record. ``Defaults.cctools()`` is the reference's setting.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from schedlab.core.registry import lookup
from schedlab.xbucket.state import BucketingState, next_step
from schedlab.xbucket.types import RESOURCES, Defaults, Machine, ResourceReport, Resources


@runtime_checkable
class Allocator(Protocol):
    """Predicts a task's resources before it runs and learns from what it really used."""

    name: str

    def allocate(self, category: str, last_failed: ResourceReport | None = None,
                 declared: Resources | None = None) -> Resources:
        """The allocation for the next attempt; ``last_failed`` is the attempt that just failed."""
        ...

    def observe(self, category: str, report: ResourceReport) -> None:
        """Learn from a finished attempt (successful or not)."""
        ...


class XBucket:
    """PG/PE/DG/DE-Bucket (and Quantized, which shares the machinery): one state per type.

    Pooled fallback (``Defaults.pooled_fallback``, on by default): besides one state per
    (category, type), one state per type holds the records of *all* categories. While a
    category's state for a type is still in its sampling phase (fewer than ``sampling``
    completed tasks of that category) and the pooled state is not, that type is predicted (and
    retried) from the pooled state instead of the sampling defaults; once the category has its
    own ``sampling`` records it uses only them. With one category the two states hold the same
    records, so nothing changes. Cold start (``Defaults.cold_quantile`` = q, not None): a new
    category's fresh attempts (while it is in sampling) take the pooled buckets' q upper quantile
    (0.75 by default; ``Defaults.cold_prior`` selects other measured rules), and its retries never
    exceed its own sampling path (at least its default, then doubling) (``_retry_cold``). The
    pooled state re-buckets lazily (on its next use), so workflows whose categories are all past
    sampling pay only a sorted insert per report.
    """

    def __init__(self, mode: str, defaults: Defaults | None = None, seed: int = 0,
                 name: str | None = None, time_weighted: bool = False) -> None:
        self.mode = mode
        self.name = name or f"{mode}-bucket" + ("-tw" if time_weighted else "")
        self.time_weighted = time_weighted
        self.defaults = defaults or Defaults()
        self._rng = random.Random(seed)
        self._states: dict[str, tuple[BucketingState, ...]] = {}
        self._ready: set[str] = set()  # categories whose three states are past sampling
        self._lost: dict[str, float] = {}  # time of failed attempts not yet in a record (-tw)
        d = self.defaults
        self._pooled: tuple[BucketingState, ...] | None = tuple(
            BucketingState(mode, first, d.sampling, d.growth, d.max_buckets, self._rng,
                           lazy=True)
            for first in d.first.as_tuple()) if d.pooled_fallback else None

    def states(self, category: str) -> tuple[BucketingState, ...]:
        found = self._states.get(category)
        if found is None:
            d = self.defaults
            found = tuple(
                BucketingState(self.mode, first, d.sampling, d.growth, d.max_buckets, self._rng)
                for first in d.first.as_tuple()
            )
            self._states[category] = found
        return found

    def effective_states(self, category: str) -> tuple[BucketingState, ...]:
        """The state each type predicts from: the category's own, or the pooled fallback."""
        states = self.states(category)
        if category in self._ready or self._pooled is None:
            return states
        if not any(s.in_sampling for s in states):
            self._ready.add(category)
            return states
        return tuple(p if s.in_sampling and not p.in_sampling else s
                     for s, p in zip(states, self._pooled, strict=True))

    def allocate(self, category: str, last_failed: ResourceReport | None = None,
                 declared: Resources | None = None) -> Resources:
        states = self.effective_states(category)
        d = self.defaults
        if last_failed is None:
            if category in self._ready:
                return Resources(*(s.predict() for s in states))
            own = self.states(category)
            q = d.cold_quantile
            values = []
            for i, s in enumerate(states):
                if q is not None and self._pooled is not None and s is self._pooled[i]:
                    value = _cold_first(s, own[i], q, d.cold_prior)
                else:
                    value = s.predict()
                if d.sampling_floor and own[i].in_sampling:
                    floor = own[i].floor()
                    if floor is not None and floor > value:
                        value = floor
                values.append(value)
            return Resources(*values)
        used = last_failed.usage.as_tuple()
        given = last_failed.allocation.as_tuple()
        exceeded = last_failed.exceeded
        own = self.states(category)
        cold = d.cold_quantile is not None
        return Resources(*(
            _retry_cold(state, own[i], used[i], d.retry_inclusive and used[i] > given[i])
            if cold and state is not own[i] and RESOURCES[i] in exceeded
            else _retry_one(state, used[i], RESOURCES[i] in exceeded,
                            d.retry_inclusive and used[i] > given[i])
            for i, state in enumerate(states)
        ))

    def observe(self, category: str, report: ResourceReport) -> None:
        if report.exceeded:  # a failed attempt teaches through last_failed, not the records
            if self.time_weighted and self.defaults.tw_kill_time:
                self._lost[category] = self._lost.get(category, 0.0) + report.wall_time
            return
        weight = (report.wall_time + self._lost.pop(category, 0.0)) if self.time_weighted \
            else 1.0
        values = report.usage.as_tuple()
        for state, value in zip(self.states(category), values, strict=True):
            state.add(value, weight)
        if self._pooled is not None:  # by count even when time-weighted: the pool stands in
            # for a category whose durations it does not know (a few long tasks of one
            # category must not set every new category's cold start; bioblast disk)
            for state, value in zip(self._pooled, values, strict=True):
                state.add(value)


def _cold_first(pooled: BucketingState, own: BucketingState, q: float, rule: str) -> float:
    """A cold category's fresh allocation of one type from the pool (``Defaults.cold_prior``)."""
    if rule == "sampling" or own.size == 0:
        return pooled.upper(q)
    if rule == "first":
        return pooled.predict()
    if rule == "own-above":
        # the category's own largest record is a need it has shown: a pooled bucket at it
        # when its records repeat a value (a discrete need, e.g. whole cores), else strictly
        # above it (continuous values creep: the next one likely exceeds the largest so far);
        # past the pool's top, its own sampling path above that record
        largest, repeat = own.largest, own.floor() is not None
        top = pooled.values[-1] if pooled.values else 0.0
        if largest < top or (repeat and largest == top):
            return pooled.predict(largest, repeat)
        return largest if repeat else next_step(own.default, own.growth, largest)
    raise ValueError(f"field 'cold_prior': unknown rule {rule!r} (sampling, first, own-above)")


def _retry_cold(pooled: BucketingState, own: BucketingState, seen: float,
                inclusive: bool = False) -> float:
    """Retry of a new category (still in sampling, predicting from the pool) for an exceeded
    type: never more than its own sampling path would give (its default, then doubling), so a
    sparse pool cannot jump it to another category's far bucket; a pooled bucket below that
    step is tried first. Above the pool's top bucket the pool does not describe the category:
    its own sampling path, instead of doubling from a small pooled value (a kill per doubling).
    ``inclusive``: ``seen`` is a measured need (see ``Defaults.retry_inclusive``).
    """
    own_step = max(own.default, own.predict(seen, inclusive))
    value = pooled.predict(seen, inclusive)
    if pooled.values and (seen > pooled.values[-1]
                          or (seen == pooled.values[-1] and not inclusive)):
        return own_step
    return min(value, own_step)


def _retry_one(state: BucketingState, seen: float, exceeded: bool,
               inclusive: bool = False) -> float:
    """Reference retry rule: above the reported value if exceeded (at or above it when it is
    a measured need, ``inclusive``), else above the most seen."""
    if exceeded:
        return state.predict(seen, inclusive)
    if state.in_sampling:
        return max(state.predict(seen), state.predict())
    return state.predict(seen)


class WholeMachine:
    """Every task gets a whole worker: never fails, wastes the most."""

    name = "whole-machine"

    def __init__(self, machine: Machine | None = None) -> None:
        self.machine = (machine or Machine()).resources

    def allocate(self, category: str, last_failed: ResourceReport | None = None,
                 declared: Resources | None = None) -> Resources:
        return self.machine

    def observe(self, category: str, report: ResourceReport) -> None:
        return None


class Declared:
    """The allocation the user declared for the task; a whole worker when none or after failing."""

    name = "declared"

    def __init__(self, machine: Machine | None = None) -> None:
        self.machine = (machine or Machine()).resources

    def allocate(self, category: str, last_failed: ResourceReport | None = None,
                 declared: Resources | None = None) -> Resources:
        if declared is None or last_failed is not None:
            return self.machine
        return declared

    def observe(self, category: str, report: ResourceReport) -> None:
        return None


class _Observed:
    """Per category: peaks and wall times of completed tasks, per type (for Tovar's policies)."""

    def __init__(self) -> None:
        self.peaks: list[list[float]] = [[], [], []]
        self.times: list[float] = []
        self.first: tuple[float, float, float] | None = None  # cached first allocation

    def add(self, report: ResourceReport) -> None:
        for i, value in enumerate(report.usage.as_tuple()):
            self.peaks[i].append(value)
        self.times.append(report.wall_time)
        self.first = None


class _FirstAllocation:
    """Shared shape of Max Seen, Min Waste and Max Throughput (Tovar et al., 2017).

    The same sampling phase as X-Bucket (default, grown past failures) until ``sampling`` tasks
    have completed; then a first allocation chosen from the observed peaks (``_choose``) and,
    after a failure, the maximum seen for each exceeded type (the whole worker when that is not
    enough); types that were not exceeded keep their allocation.
    """

    name = "first-allocation"

    def __init__(self, machine: Machine | None = None, defaults: Defaults | None = None) -> None:
        self.machine = (machine or Machine()).resources.as_tuple()
        self.defaults = defaults or Defaults()
        self._seen: dict[str, _Observed] = {}

    def _observed(self, category: str) -> _Observed:
        found = self._seen.get(category)
        if found is None:
            found = self._seen[category] = _Observed()
        return found

    def allocate(self, category: str, last_failed: ResourceReport | None = None,
                 declared: Resources | None = None) -> Resources:
        seen = self._observed(category)
        d = self.defaults
        first = d.first.as_tuple()
        if len(seen.times) < d.sampling:
            if last_failed is None:
                return d.first
            used = last_failed.usage.as_tuple()
            given = last_failed.allocation.as_tuple()
            return Resources(*(
                next_step(first[i], d.growth, used[i],
                          d.retry_inclusive and used[i] > given[i])
                if RESOURCES[i] in last_failed.exceeded
                else max(next_step(first[i], d.growth, used[i]), first[i])
                for i in range(3)))
        if last_failed is None:
            if seen.first is None:
                seen.first = tuple(self._choose(np.asarray(seen.peaks[i]),
                                                np.asarray(seen.times), self.machine[i])
                                   for i in range(3))
            return Resources(*seen.first)
        return Resources(*(self._retry(seen, last_failed, i) for i in range(3)))

    def _retry(self, seen: _Observed, failed: ResourceReport, i: int) -> float:
        given = failed.allocation.as_tuple()[i]
        if RESOURCES[i] not in failed.exceeded:
            return given
        top = max(seen.peaks[i])
        used = failed.usage.as_tuple()[i]
        need_met = top >= used if self.defaults.retry_inclusive and used > given else top > used
        return top if top > given and need_met else self.machine[i]

    def _choose(self, peaks: np.ndarray, times: np.ndarray, capacity: float) -> float:
        raise NotImplementedError

    def observe(self, category: str, report: ResourceReport) -> None:
        if report.success:
            self._observed(category).add(report)


class MaxSeen(_FirstAllocation):
    """The largest peak seen so far in the category.

    Retry (``retry="double"``, the default, as in Tovar et al. 2017): an exceeded type gets
    its failed allocation x ``Defaults.growth`` (2), repeated until above what the monitor
    reported, capped at the whole worker. ``retry="max"`` is the former rule (the largest peak
    seen, else the whole worker), registered as ``max-seen-retry-max``.
    """

    name = "max-seen"

    def __init__(self, machine: Machine | None = None, defaults: Defaults | None = None,
                 retry: str = "double") -> None:
        super().__init__(machine, defaults)
        if retry not in ("double", "max"):
            raise ValueError(f"retry must be 'double' or 'max', got {retry!r}")
        self.retry = retry
        if retry == "max":
            self.name = "max-seen-retry-max"

    def _retry(self, seen: _Observed, failed: ResourceReport, i: int) -> float:
        if self.retry == "max":
            return super()._retry(seen, failed, i)
        given = failed.allocation.as_tuple()[i]
        if RESOURCES[i] not in failed.exceeded:
            return given
        used = failed.usage.as_tuple()[i]
        growth = self.defaults.growth
        value = max(given, 1e-9) * growth
        if self.defaults.retry_inclusive and used > given:  # a measured need: may equal it
            while value < used:
                value *= growth
        while value <= used and not (self.defaults.retry_inclusive and used > given):
            value *= growth
        return min(value, self.machine[i]) if used < self.machine[i] else self.machine[i]

    def _choose(self, peaks: np.ndarray, times: np.ndarray, capacity: float) -> float:
        return float(peaks.max())


def _sorted_with_times(peaks: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(peaks, kind="stable")
    return peaks[order], times[order]


class MinWaste(_FirstAllocation):
    """Tovar et al.: the first allocation a minimising expected waste with a retry at the max.

    With peaks p_i, times t_i and a_max the largest peak, W(a) = a*T + a_max*T(p > a) - sum p_i
    t_i, so the argmin over candidate a = p_k needs only prefix sums of the sorted times.
    """

    name = "min-waste"

    def _choose(self, peaks: np.ndarray, times: np.ndarray, capacity: float) -> float:
        p, t = _sorted_with_times(peaks, times)
        t = np.where(t > 0, t, 1e-9)  # zero-length tasks still occupy their allocation
        above = t.sum() - np.cumsum(t)  # time of the tasks above candidate k
        cost = p * t.sum() + p[-1] * above
        return float(p[int(np.argmin(cost))])


class MaxThroughput(_FirstAllocation):
    """Tovar et al.: the first allocation a maximising tasks completed per unit time on a worker.

    A worker of capacity M runs floor(M/a) first attempts at once, and floor(M/a_max) retries,
    so throughput(a) = n / (T / floor(M/a) + T(p > a) / floor(M/a_max)). The floors make it
    prefer allocations that pack whole tasks, which is where it differs from Min Waste.
    """

    name = "max-throughput"

    def _choose(self, peaks: np.ndarray, times: np.ndarray, capacity: float) -> float:
        p, t = _sorted_with_times(peaks, times)
        t = np.where(t > 0, t, 1e-9)
        above = t.sum() - np.cumsum(t)
        safe = np.where(p > 0, p, 1e-9)
        slots = np.maximum(np.floor(capacity / safe), 1.0)
        retry_slots = max(np.floor(capacity / max(p[-1], 1e-9)), 1.0)
        busy = t.sum() / slots + above / retry_slots
        return float(p[int(np.argmin(busy))])


AllocatorFactory = Callable[[Machine, Defaults, int], Allocator]

#: the method and every baseline, by CLI name
ALLOCATORS: dict[str, AllocatorFactory] = {
    "pg-bucket": lambda m, d, s: XBucket("pg", d, s),
    "pe-bucket": lambda m, d, s: XBucket("pe", d, s),
    "dg-bucket": lambda m, d, s: XBucket("dg", d, s),
    "de-bucket": lambda m, d, s: XBucket("de", d, s),
    "quantized": lambda m, d, s: XBucket("quantized", d, s, name="quantized"),
    "pg-bucket-tw": lambda m, d, s: XBucket("pg", d, s, time_weighted=True),
    "pe-bucket-tw": lambda m, d, s: XBucket("pe", d, s, time_weighted=True),
    "dg-bucket-tw": lambda m, d, s: XBucket("dg", d, s, time_weighted=True),
    "de-bucket-tw": lambda m, d, s: XBucket("de", d, s, time_weighted=True),
    "whole-machine": lambda m, d, s: WholeMachine(m),
    "max-seen": lambda m, d, s: MaxSeen(m, d),
    "max-seen-retry-max": lambda m, d, s: MaxSeen(m, d, retry="max"),
    "min-waste": lambda m, d, s: MinWaste(m, d),
    "max-throughput": lambda m, d, s: MaxThroughput(m, d),
    "declared": lambda m, d, s: Declared(m),
}

#: the paper's four algorithms
XBUCKET_FAMILY: tuple[str, ...] = ("pg-bucket", "pe-bucket", "dg-bucket", "de-bucket")
#: ours: the same four with records weighted by wall time (``XBucket(time_weighted=True)``)
TIME_WEIGHTED: tuple[str, ...] = ("pg-bucket-tw", "pe-bucket-tw", "dg-bucket-tw",
                                  "de-bucket-tw")
#: the five alternatives the paper compares against (declared needs a trace that carries it)
ALTERNATIVES: tuple[str, ...] = ("whole-machine", "max-seen", "min-waste", "max-throughput",
                                 "quantized")


def make_allocator(name: str, machine: Machine | None = None, defaults: Defaults | None = None,
                   seed: int = 0) -> Allocator:
    """Build the allocator registered under ``name`` (see :data:`ALLOCATORS`)."""
    return lookup(ALLOCATORS, "algorithm", name)(machine or Machine(), defaults or Defaults(), seed)
