"""Runtime estimates a scheduler may use (SJF, backfilling): never the job's true run time.

* ``history`` (default): a causal per-group median. A job's estimate is the median run time of
  the jobs of its group (the user where the trace names one; else qos and GPU request) that
  *finished before it arrived*; with fewer than ``min_history`` of those, the median of every
  job finished so far; before anything finished, ``prior`` seconds. This is the estimator
  Tiresias/Lucid-style schedulers use in place of user requests (Helios and Lucid both report
  that per-user history predicts far better than requested limits).
* ``noisy``: truth x lognormal(0, sigma): an explicit-error yardstick.
* ``oracle``: the truth, for comparison only (labelled as such wherever it is used).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence

import numpy as np

from schedlab.core.errors import ConfigError

PREDICTORS = ("history", "noisy", "oracle")


def estimates(arrival: Sequence[float], runtime: Sequence[float], groups: Sequence[Hashable],
              *, predictor: str = "history", seed: int = 0, sigma: float = 1.0,
              min_history: int = 3, prior: float = 3600.0) -> np.ndarray:
    """One estimate (seconds, > 0) per job; ``arrival``/``runtime`` in seconds."""
    arrival = np.asarray(arrival, float)
    runtime = np.asarray(runtime, float)
    n = arrival.size
    if runtime.size != n or len(groups) != n:
        raise ConfigError("arrival, runtime and groups need the same length", field="groups")
    if predictor == "oracle":
        return runtime.copy()
    if predictor == "noisy":
        if not sigma >= 0:
            raise ConfigError("must be >= 0", field="sigma")
        return runtime * np.random.default_rng(seed).lognormal(0.0, sigma, n)
    if predictor != "history":
        raise ConfigError(f"unknown predictor '{predictor}'; valid: {', '.join(PREDICTORS)}",
                          field="predictor")
    finish = arrival + runtime
    by_finish = np.argsort(finish, kind="stable")
    out = np.empty(n)
    seen: dict[Hashable, list[float]] = {}
    every: list[float] = []
    k = 0
    for i in np.argsort(arrival, kind="stable"):
        while k < n and finish[by_finish[k]] <= arrival[i]:
            j = by_finish[k]
            bisect.insort(seen.setdefault(groups[j], []), float(runtime[j]))
            bisect.insort(every, float(runtime[j]))
            k += 1
        mine = seen.get(groups[i], ())
        pool = mine if len(mine) >= min_history else every
        out[i] = pool[len(pool) // 2] if pool else prior
    return np.maximum(out, 1.0)


def log_error(estimate: np.ndarray, runtime: np.ndarray) -> float:
    """Median |log(estimate / truth)|: 0 is perfect, log(2) = 0.69 is 'off by 2x'."""
    return float(np.median(np.abs(np.log(np.maximum(estimate, 1e-9)
                                         / np.maximum(runtime, 1e-9)))))
