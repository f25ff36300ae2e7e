"""FGD's workload inflation: how full can each policy get the real cluster?

Weng et al. (ATC'23, "Beware of Fragmentation", the paper behind the Alibaba GPU 2023 trace)
evaluate GPU-sharing schedulers without arrival times: pods are drawn at random (with
replacement) from the trace's pod list -- the target workload's distribution -- and submitted
one after another, none departing, until the GPU demand that has arrived passes the cluster's
GPU capacity. At each level of arrived demand (a fraction of capacity) they report the share of
GPU capacity allocated, the fragmentation rate and the demand left unscheduled.

This module does that on the trace's own node list (1,213 heterogeneous nodes, 6,212 GPUs: CPU,
memory, GPU count and model per node, all enforced by :class:`fgd.Cluster`), for every policy
of :mod:`fgd` (gPooling's ``frag-aware``, FGD, FGD's baselines, device-level allocation). The
yardsticks are the engine's books, not any policy's objective:

- ``utilisation``: GPU milli requested by the scheduled pods / capacity (FGD's "GPU allocation
  ratio"); ``granted``: milli handed out (whole GPUs for device-level allocation);
  ``unallocated``: 1 - granted;
- ``unscheduled``: share of the arrived GPU demand that found no room;
- ``fragmentation``: FGD's measure of the free GPU milli against the workload's pod types, as a
  share of the free milli (the fragmentation rate) -- reported, never claimed on (it is FGD's
  objective);
- ``first_failure``: arrived demand when the first GPU pod was refused.

CPU-only pods of the trace are drawn too (they take CPU and memory on GPU nodes, as in FGD) but
do not count as GPU demand. ``until_full=True`` keeps submitting past the last level and stops
exactly when no pod type of the workload fits anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.gpooling.cluster_policies import CLUSTER_POLICIES, make_cluster_policy
from schedlab.gpooling.fgd import Cluster, ClusterPolicy, Typical, cluster_fragmentation
from schedlab.traces.alibaba_gpu2023 import Node, Pod, read_node_list, read_pod_list

LEVELS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3)


def read_nodes(path: str | Path, limit: int | None = None) -> list[Node]:
    """The Alibaba GPU 2023 node list (see :func:`alibaba.read_node_list`)."""
    return read_node_list(path, limit)


def read_pods(path: str | Path) -> list[Pod]:
    """The Alibaba GPU 2023 pod list, CPU-only pods included (they take CPU and memory).

    GPU memory is not booked: it is taken as proportional to the share, so the per-GPU milli
    books imply it."""
    return read_pod_list(path, times=False)


def nothing_fits(cluster: Cluster, pods: Sequence[Pod]) -> bool:
    """Whether no GPU pod type of ``pods`` fits on any node now."""
    kinds = {p.kind: p for p in pods if p.num_gpu}
    return not any(cluster.feasible(p).any() for p in kinds.values())


def inflate(pods: Sequence[Pod], nodes: Sequence[Node] | Cluster,
            policy: str | ClusterPolicy, *, seed: int = 0, levels: Sequence[float] = LEVELS,
            until_full: bool = False, max_load: float = 50.0) -> list[dict]:
    """One row per level of arrived GPU demand (and a last ``load = inf`` row when
    ``until_full``): see the module docstring for the columns.

    Past the last level, ``until_full`` draws only pod types that may still fit (a type that
    did not fit never fits again, nothing departs), so it ends when none does; the last row's
    ``arrived`` then counts only those draws. ``max_load`` bounds the arrived demand.
    """
    if not any(p.num_gpu for p in pods):
        raise BadInputError("no GPU pods to inflate", field="trace")
    levels = sorted(float(x) for x in levels)
    if not levels or levels[0] <= 0 or not all(np.isfinite(levels)):
        raise BadInputError("levels must be positive and finite", field="levels")
    cluster = nodes if isinstance(nodes, Cluster) else Cluster(nodes)
    policy = make_cluster_policy(policy) if isinstance(policy, str) else policy
    rng = np.random.default_rng(seed)
    policy.reset(cluster, pods, np.random.default_rng([seed, 1]))
    typical = getattr(policy, "typical", None) or Typical.from_pods(pods, cluster)
    capacity = cluster.capacity
    arrived = requested = granted = failed = 0
    first_failure = None
    rows: list[dict] = []
    level, limit = 0, max_load * capacity
    # nothing departs, so a pod type that does not fit now never fits again
    dead: set[tuple] = set()
    alive = {p.kind for p in pods if p.num_gpu}

    def row(load: float) -> dict:
        free = capacity - granted
        frag = cluster_fragmentation(cluster, typical)
        return dict(policy=policy.name, load=load, arrived=arrived / capacity,
                    utilisation=requested / capacity, granted=granted / capacity,
                    unallocated=free / capacity, unscheduled=failed / max(arrived, 1),
                    fragmentation=frag / free if free else 0.0, frag_share=frag / capacity,
                    first_failure=(first_failure if first_failure is not None
                                   else float("nan")), gpus=capacity // 1000,
                    nodes=len(cluster), seed=seed)

    draw = np.arange(len(pods))  # past the last level: only pod types that may still fit
    while True:
        pod = pods[int(draw[rng.integers(len(draw))])]
        policy.observe(pod)
        placement = None if pod.kind in dead else policy.place(pod, cluster)
        if placement is not None:
            cluster.book(pod, placement)
        if pod.num_gpu:
            if placement is None and pod.kind not in dead:
                dead.add(pod.kind)
                if level == len(levels):  # how many types are left, exactly
                    dead |= {p.kind for p in pods if p.num_gpu and p.kind not in dead
                             and not cluster.feasible(p).any()}
                    draw = np.array([i for i, p in enumerate(pods) if p.kind not in dead],
                                    dtype=np.int64)
            arrived += pod.gpu_demand
            if placement is None:
                failed += pod.gpu_demand
                if first_failure is None:
                    first_failure = arrived / capacity
            else:
                requested += pod.gpu_demand
                granted += placement.milli * pod.num_gpu
            while level < len(levels) and arrived >= levels[level] * capacity:
                rows.append(row(levels[level]))
                level += 1
            if level == len(levels):
                if not until_full:
                    return rows
                if len(dead) == len(alive) or arrived >= limit:
                    rows.append(row(float("inf")))
                    return rows


def compare_inflation(trace: str | Path, nodes: str | Path, *, policy: str = "all",
                      seeds: int = 1, levels: Sequence[float] | str | None = None,
                      limit: int | None = None):
    """Every policy (or one) inflated on the node list, ``seeds`` draws each: a Polars frame."""
    import polars as pl

    from schedlab.core.registry import lookup

    names = list(CLUSTER_POLICIES) if policy == "all" else [policy]
    for name in names:
        lookup(CLUSTER_POLICIES, "cluster placement policy", name)
    if seeds < 1:
        raise BadInputError(f"must be at least 1, got {seeds}", field="seeds")
    if isinstance(levels, str):
        try:
            levels = [float(x) for x in levels.split(",") if x.strip()]
        except ValueError:
            raise BadInputError(f"not a comma-separated list of numbers: {levels!r}",
                                field="levels") from None
        if not levels or not all(np.isfinite(levels)):
            raise BadInputError("give at least one finite level", field="levels")
    pods = read_pods(trace)
    pool = read_nodes(nodes, limit)
    rows = []
    for name in names:
        for seed in range(seeds):
            kwargs = {} if levels is None else dict(levels=levels)
            rows += inflate(pods, pool, name, seed=seed, **kwargs)
    return pl.DataFrame(rows)
