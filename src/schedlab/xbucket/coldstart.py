"""Cold start of new categories: retries of their first tasks, with and without a prior.

X-Bucket (../shared/papers/15-xbucket.md) learns per category; a category with fewer than
``sampling`` completed tasks predicts from the pooled (category-blind) buckets
(``Defaults.pooled_fallback``), and its first attempt per type takes the pooled buckets'
``Defaults.cold_quantile`` upper quantile (None: a bucket chosen as for a known category, the
former rule, often a low one). ``cold_start_table`` replays a workflow one resource at a time
(as ``schedlab xbucket replay --per-resource``) and counts the retries of *cold* tasks (among
the first ``sampling`` of their category) next to all retries and the efficiency.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from schedlab.xbucket.compare import run_one
from schedlab.xbucket.metrics import summarise
from schedlab.xbucket.simulator import ReplayConfig
from schedlab.xbucket.types import RESOURCES, Defaults, Task

MODES = ("pg-bucket", "pe-bucket", "dg-bucket", "de-bucket")


def cold_mask(tasks: list[Task], sampling: int) -> np.ndarray:
    """True for a task among the first ``sampling`` of its category (trace order)."""
    seen: Counter[str] = Counter()
    mask = []
    for task in tasks:
        mask.append(seen[task.category] < sampling)
        seen[task.category] += 1
    return np.asarray(mask)


def cold_start_table(name: str, tasks: list[Task], quantiles: list[float | None],
                     semantics: str = "peak") -> list[dict]:
    """One row per (algorithm, quantile, resource): cold tasks, their retries, all retries,
    efficiency of that resource."""
    rows = []
    cold = cold_mask(tasks, Defaults().sampling)
    for algorithm in MODES:
        for q in quantiles:
            defaults = Defaults(cold_quantile=q)
            for resource in RESOURCES:
                config = ReplayConfig(only=resource, semantics=semantics)
                replay = run_one(tasks, algorithm, config, defaults)
                frame = replay.attempts
                failed = ~frame["success"].to_numpy()
                on_cold = cold[frame["task"].to_numpy()]
                summary = summarise(replay)
                rows.append(dict(trace=name, algorithm=algorithm, resource=resource,
                                 cold_quantile="none" if q is None else q,
                                 cold_tasks=int(cold.sum()),
                                 cold_retries=int((failed & on_cold).sum()),
                                 retries=int(failed.sum()),
                                 efficiency=summary[f"efficiency_{resource}"]))
    return rows
