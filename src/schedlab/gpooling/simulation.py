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


def compare_cluster(*, nodes: str | Path | None = None, trace: str | Path | None = None,
                    policy: str = "all", loads: tuple[float, ...] = (1.0,),
                    compression: float | None = None, horizon: float = 86_400.0,
                    every: int = 1, seed: int = 0) -> pl.DataFrame:
    """Time-based replay on an Alibaba node list (CPU, memory, model and GPU share checked).

    With ``compression`` the pod list is replayed with its own times, arrivals divided by it;
    otherwise pods are resampled with their lifetimes at each offered ``load`` over ``horizon``
    seconds (``workloads.resampled_pods``). Without files, the seeded generator shaped like
    the Alibaba GPU 2023 cluster stands in. ``every`` keeps every n-th node.
    """
    from schedlab.core.registry import lookup
    from schedlab.gpooling.cluster_policies import CLUSTER_POLICIES
    from schedlab.gpooling.simulator import replay
    from schedlab.gpooling.workloads import resampled_pods
    from schedlab.traces.alibaba_gpu2023 import (
        read_node_list,
        read_pod_list,
        synthetic_nodes,
        synthetic_pods,
    )

    names = list(CLUSTER_POLICIES) if policy == "all" else [policy]
    for name in names:
        lookup(CLUSTER_POLICIES, "cluster placement policy", name)
    pool = read_node_list(nodes) if nodes else synthetic_nodes(1213, seed)
    pool = pool[::max(1, every)]
    pods = read_pod_list(trace) if trace else synthetic_pods(8000, seed)
    gpus = sum(n.gpus for n in pool)
    rows = []
    if compression is not None:
        for name in names:
            rows.append(replay(pods, pool, name, compression=compression, seed=seed))
    else:
        for load in loads:
            drawn = resampled_pods(pods, gpus, load, horizon=horizon, seed=seed)
            rows += [dict(load=load, **replay(drawn, pool, name, seed=seed)) for name in names]
    return pl.DataFrame(rows)
