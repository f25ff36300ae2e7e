"""Metrics every scheduling paper reports, with the formula in each docstring.

All functions take array-likes and return plain floats so results drop straight into frames.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import ArrayLike

from schedlab.core.errors import BadInputError


def _vector(values: ArrayLike, name: str = "values", allow_empty: bool = False) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if array.size == 0 and not allow_empty:
        raise BadInputError("needs at least one value", field=name)
    if np.isnan(array).any():
        raise BadInputError("contains NaN", field=name)
    return array


def percentile(values: ArrayLike, q: float | Sequence[float]) -> float | np.ndarray:
    """q-th percentile (0..100) with linear interpolation between closest ranks.

    For sorted x_0..x_{n-1}, position h = (n-1)·q/100 and P = x_⌊h⌋ + (h-⌊h⌋)(x_⌈h⌉ - x_⌊h⌋).
    """
    array = _vector(values)
    result = np.percentile(array, q, method="linear")
    return float(result) if np.ndim(result) == 0 else result


def jain_index(allocations: ArrayLike) -> float:
    """Jain's fairness index J = (Σx)² / (n·Σx²), in [1/n, 1]; 1 means perfectly equal.

    Jain, Chiu & Hawe (1984). An all-zero allocation is treated as equal (J = 1).
    """
    x = _vector(allocations, "allocations")
    if (x < 0).any():
        raise BadInputError("allocations must be non-negative", field="allocations")
    square_sum = float(np.dot(x, x))
    if square_sum == 0.0:
        return 1.0
    return float(x.sum() ** 2 / (x.size * square_sum))


def max_min_ratio(values: ArrayLike) -> float:
    """max(x) / min(x): 1 is perfectly even; infinity when someone gets nothing."""
    x = _vector(values)
    low, high = float(x.min()), float(x.max())
    if low == 0.0:
        return 1.0 if high == 0.0 else float("inf")
    return high / low


def coefficient_of_variation(values: ArrayLike) -> float:
    """CV = σ/μ with the population standard deviation (ddof = 0); 0 when μ = 0 and σ = 0."""
    x = _vector(values)
    mean = float(x.mean())
    std = float(x.std(ddof=0))
    if mean == 0.0:
        return 0.0 if std == 0.0 else float("inf")
    return std / abs(mean)


def slo_attainment(latencies: ArrayLike, slo: float | ArrayLike) -> float:
    """Fraction of requests with latency ≤ SLO: (1/n)·Σ 1[l_i ≤ s_i]. ``slo`` may be per request."""
    lat = _vector(latencies, "latencies")
    target = np.broadcast_to(np.asarray(slo, dtype=float), lat.shape)
    return float(np.mean(lat <= target))


def goodput(latencies: ArrayLike, slo: float | ArrayLike, duration: float) -> float:
    """Requests per unit time that met their SLO: Σ 1[l_i ≤ s_i] / duration."""
    if duration <= 0:
        raise BadInputError("must be positive", field="duration")
    lat = _vector(latencies, "latencies", allow_empty=True)
    if lat.size == 0:
        return 0.0
    target = np.broadcast_to(np.asarray(slo, dtype=float), lat.shape)
    return float(np.sum(lat <= target) / duration)


def relative_waste(allocated: ArrayLike, used: ArrayLike) -> float:
    """Share of allocated resource that went unused: (Σa − Σu) / Σa, in [0, 1] when u ≤ a."""
    a = _vector(allocated, "allocated")
    u = _vector(used, "used")
    if a.shape != u.shape:
        raise BadInputError(f"shape {u.shape} differs from allocated {a.shape}", field="used")
    total = float(a.sum())
    if total == 0.0:
        return 0.0
    return (total - float(u.sum())) / total


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by a set of [start, end] intervals, overlaps counted once.

    Busy time of a resource used by overlapping activities (I/O calls on a tier, copies on a
    stream): sort by start and merge, Σ over merged runs of (end − start).
    """
    total, run_start, run_end = 0.0, None, None
    for start, end in sorted(intervals):
        if run_end is None or start > run_end:
            if run_end is not None:
                total += run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    if run_end is not None:
        total += run_end - run_start
    return float(total)


def mean_ci95(values: ArrayLike) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval (Student's t; 0 for one sample)."""
    from scipy import stats

    x = _vector(values)
    mean = float(x.mean())
    if x.size < 2:
        return mean, 0.0
    sem = float(x.std(ddof=1) / np.sqrt(x.size))
    return mean, float(stats.t.ppf(0.975, x.size - 1) * sem)
