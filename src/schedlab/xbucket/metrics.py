"""What a replay measured: waste and efficiency per resource type, retries, makespan.

Definitions (X-Bucket, ../shared/papers/15-xbucket.md, and Tovar et al. 2017):

* waste_r = sum over successful attempts of (alloc_r - peak_r) x wall time
  + sum over failed attempts of alloc_r x time until the kill;
* consumed_r = sum over tasks of peak_r x wall time; allocated_r = consumed_r + waste_r;
* efficiency_r = consumed_r / allocated_r (global), and the mean over tasks of the same ratio
  per task (tasks that allocated nothing of a type, e.g. zero wall time, are left out);
* retries = failed attempts; makespan = when the last attempt ended.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from schedlab.xbucket.simulator import Replay
from schedlab.xbucket.types import RESOURCES


def summarise(result: Replay) -> dict[str, float]:
    """One flat row of metrics for a replay (see the module docstring for the formulas)."""
    frame = result.attempts
    duration = frame["duration"].to_numpy()
    success = frame["success"].to_numpy()
    task = frame["task"].to_numpy()
    n_tasks = int(task.max()) + 1 if task.size else 0
    row: dict[str, float] = {
        "tasks": float(n_tasks),
        "attempts": float(frame.height),
        "retries": float((~success).sum()),
        "makespan": float(result.makespan),
    }
    efficiencies = []
    for name in RESOURCES:
        alloc = frame[f"alloc_{name}"].to_numpy()
        peak = frame[f"peak_{name}"].to_numpy()
        allocated = alloc * duration
        consumed = np.where(success, peak * duration, 0.0)
        waste = allocated - consumed
        total_alloc = float(allocated.sum())
        efficiency = float(consumed.sum() / total_alloc) if total_alloc > 0 else float("nan")
        per_alloc = np.bincount(task, weights=allocated, minlength=n_tasks)
        per_used = np.bincount(task, weights=consumed, minlength=n_tasks)
        valid = per_alloc > 0
        per_task = float(np.mean(per_used[valid] / per_alloc[valid])) if valid.any() else np.nan
        row[f"waste_{name}"] = float(waste.sum())
        row[f"efficiency_{name}"] = efficiency
        row[f"task_efficiency_{name}"] = per_task
        efficiencies.append(efficiency)
    finite = [e for e in efficiencies if e == e]
    row["efficiency_mean"] = float(np.mean(finite)) if finite else float("nan")
    return row


def summary_frame(rows: list[dict[str, object]]) -> pl.DataFrame:
    """Rows of (labels + summarise()) as a frame with a stable column order."""
    return pl.DataFrame(rows)
