"""Fairness measures over a simulation's time series and per-tenant totals.

``max_service_difference`` is VTC's measure (Sheng et al., OSDI'24, §5.1): for two tenants that
are both backlogged over an interval, the difference of the service they received in it. We
take, for every pair, the longest runs during which both stayed backlogged (sample to sample),
and report the largest difference seen; ``avg`` is its mean over all such sample points.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from schedlab.core.metrics import jain_index


def _matrices(samples: pl.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    tenants = samples["tenant"].unique(maintain_order=True).to_list()
    n = len(tenants)
    values = samples[column].to_numpy().reshape(-1, n)
    backlogged = samples["backlogged"].to_numpy().reshape(-1, n)
    return values, backlogged


def service_difference(
    samples: pl.DataFrame, column: str = "compute_service"
) -> tuple[float, float]:
    """(max, mean) service difference between pairs of continuously backlogged tenants."""
    values, back = _matrices(samples, column)
    steps, n = values.shape
    worst, total, count = 0.0, 0.0, 0
    for i in range(n):
        for j in range(i + 1, n):
            both = back[:, i] & back[:, j]
            start = -1
            for k in range(steps):
                if not both[k]:
                    start = -1
                    continue
                if start < 0:
                    start = k
                    continue
                diff = abs((values[k, i] - values[start, i]) - (values[k, j] - values[start, j]))
                worst = max(worst, diff)
                total += diff
                count += 1
    return worst, (total / count if count else 0.0)


def vtc_bound(max_input: int, kv_tokens: int, w_in: float = 1.0, w_out: float = 2.0) -> float:
    """VTC's Theorem bound 2U with U = max(w_in · L_input, w_out · M), M = batch token capacity."""
    return 2.0 * max(w_in * max_input, w_out * kv_tokens)


def jain(values: np.ndarray | list[float]) -> float:
    return jain_index(np.maximum(np.asarray(values, dtype=float), 0.0))


def backlogged_window(samples: pl.DataFrame, column: str) -> np.ndarray:
    """Service each tenant received while *all* tenants were backlogged (first to last such)."""
    values, back = _matrices(samples, column)
    all_back = np.flatnonzero(back.all(axis=1))
    if all_back.size < 2:
        return values[-1] - values[0]
    return values[all_back[-1]] - values[all_back[0]]
