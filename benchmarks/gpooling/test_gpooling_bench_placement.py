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
