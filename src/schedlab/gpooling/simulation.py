"""One call behind ``schedlab gpooling simulate``: pick a trace and a pool, replay, tabulate.

gPooling (../shared/papers/14-gpooling.md). Kept apart from the engine so a user's notebook can do
exactly what the CLI does: ``compare(trace="pods.csv", inventory="nodes.csv")``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from schedlab.core.errors import UnknownNameError
from schedlab.core.io import write_frame
from schedlab.gpooling.devices import discover, parse_size
from schedlab.gpooling.policies import POLICIES, make_policy
from schedlab.gpooling.simulator import simulate
from schedlab.gpooling.workloads import heterogeneous_cluster, read_pod_trace, synthetic_trace


def compare(*, trace: str | Path | None = None, jobs: int = 1500, seed: int = 0,
            load: float = 0.9, inventory: str | None = None, devices: int = 40,
            policy: str = "all", time_scale: float = 1.0, limit: int | None = None,
            memory_per_gpu: str | int = "16GiB", out: str | Path | None = None) -> pl.DataFrame:
    """Metrics per policy (rows) for a trace file or a generated trace on a pool."""
    names = list(POLICIES) if policy == "all" else [policy]
    for name in names:
        if name not in POLICIES:
            raise UnknownNameError("placement policy", name, [*POLICIES, "all"])
    pool = discover(inventory) if inventory else heterogeneous_cluster(devices)
    if trace is not None:
        jobs_list = read_pod_trace(trace, memory_per_gpu=parse_size(memory_per_gpu,
                                                                    "memory-per-gpu"),
                                   time_scale=time_scale, limit=limit)
    else:
        jobs_list = synthetic_trace(jobs, pool, seed, load=load)
    rows = []
    for name in names:
        result = simulate(jobs_list, pool, make_policy(name))
        rows.append(dict(policy=name, devices=len(pool), **result.metrics))
    frame = pl.DataFrame(rows)
    if out is not None:
        write_frame(frame, out)
    return frame
