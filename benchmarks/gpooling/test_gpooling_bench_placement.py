"""Speed of placement decisions and of trace replay (gPooling's control plane and simulator)."""

from __future__ import annotations

import pytest

from schedlab.gpooling.policies import POLICIES, make_policy
from schedlab.gpooling.simulator import simulate
from schedlab.gpooling.state import ClusterState, Grant, Request
from schedlab.gpooling.workloads import heterogeneous_cluster, synthetic_trace


def _busy_pool(devices: int) -> tuple[ClusterState, list]:
    pool = heterogeneous_cluster(devices)
    state = ClusterState(pool)
    trace = synthetic_trace(devices * 3, pool, seed=0)
    for k, job in enumerate(trace):
        d = k % len(pool)
        if job.request.count == 1 and state.fits_now(job.request)[d]:
            state.take(job.request, [Grant(d, job.request.memory, job.request.milli)])
    return state, trace


@pytest.mark.parametrize("name", POLICIES)
def test_place_one_slice_on_1000_devices(benchmark, name: str) -> None:
    state, trace = _busy_pool(1000)
    policy = make_policy(name)
    for job in trace[:500]:
        policy.observe(job.request)
    request = Request(2 << 30, 250)
    benchmark(policy.place, request, state)


def test_replay_1500_jobs_on_40_devices(benchmark) -> None:
    pool = heterogeneous_cluster(40)
    trace = synthetic_trace(1500, pool, seed=0)
    result = benchmark.pedantic(simulate, args=(trace, pool, make_policy("frag-aware")),
                                rounds=3, iterations=1)
    benchmark.extra_info["jobs_per_second"] = 1500 / benchmark.stats.stats.mean
    assert result.metrics["jobs"] == 1500


# --- node-level decisions on the Alibaba GPU 2023 cluster (1,213 nodes, 6,212 GPUs) ---------

def _alibaba_cluster():
    """The real node and pod lists where ../shared/data has them, else the seeded generator."""
    from schedlab.traces.alibaba_gpu2023 import load_cluster

    nodes, pods, real = load_cluster(seed=0)
    return nodes, pods, "real" if real else "seeded"


@pytest.mark.parametrize("name", ["frag-aware", "pooled-fgd", "fgd", "best-fit", "first-fit",
                                  "whole-device"])
def test_place_and_book_200_pods_on_the_alibaba_cluster(benchmark, name: str) -> None:
    """200 decisions (place + book) on the cluster half full: decisions/s per policy."""
    import copy

    import numpy as np

    from schedlab.gpooling.cluster_policies import make_cluster_policy
    from schedlab.gpooling.fgd import Cluster
    from schedlab.gpooling.inflation import inflate

    nodes, pods, source = _alibaba_cluster()
    base = Cluster(nodes)
    inflate(pods, base, "first-fit", seed=0, levels=(0.5,))
    draws = [pods[i] for i in np.random.default_rng(1).integers(len(pods), size=200)]

    def setup():
        cluster = copy.deepcopy(base)
        policy = make_cluster_policy(name)
        policy.reset(cluster, pods, np.random.default_rng(0))
        return (policy, cluster), {}

    def decide(policy, cluster) -> int:
        placed = 0
        for pod in draws:
            policy.observe(pod)
            placement = policy.place(pod, cluster)
            if placement is not None:
                cluster.book(pod, placement)
                placed += 1
        return placed

    placed = benchmark.pedantic(decide, setup=setup, rounds=3, iterations=1)
    benchmark.extra_info["decisions_per_second"] = 200 / benchmark.stats.stats.mean
    benchmark.extra_info["gpus"] = base.capacity // 1000
    benchmark.extra_info["data"] = source
    assert 0 < placed <= 200
