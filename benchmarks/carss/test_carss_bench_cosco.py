"""COSCO's setting: one decision of COSCO's GOBI, GA, A3C and CARSS with actions on 50 hosts
of COSCO's fleet running Bitbrains containers; and reading one Bitbrains VM trace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from schedlab.carss.bitbrains import (
    bitbrains_dir,
    bitbrains_workload,
    read_vm_trace,
    read_vm_traces,
    sampler_for,
)
from schedlab.carss.hosts import COSCO_FLEET, make_hosts
from schedlab.carss.placement import greedy, least_loaded
from schedlab.carss.schedulers import make_scheduler
from schedlab.carss.simulator import Cluster

pytestmark = pytest.mark.skipif(
    bitbrains_dir() is None, reason="../shared/data/bitbrains is absent"
)
HOSTS = 50


@pytest.fixture(scope="module")
def cosco_cluster():
    """COSCO's 50 hosts after 30 intervals at 5 containers per interval (its rate)."""
    torch.set_num_threads(1)
    traces = read_vm_traces(bitbrains_dir())
    workload = bitbrains_workload(np.full(31, 5), traces, 300.0, seed=1)
    cluster = Cluster(make_hosts(HOSTS, COSCO_FLEET), 300.0, traces=workload.traces)
    for batch in workload.batches[:30]:
        cluster.admit(batch.copy())
        cluster.step(*cluster.apply(greedy(cluster, least_loaded)))
    cluster.admit(workload.batches[30].copy())
    return cluster, sampler_for(workload, traces), workload.batches[30]


@pytest.mark.parametrize("name", ["gobi", "ga", "a3c", "carss"])
def test_one_cosco_decision_50_hosts(benchmark, cosco_cluster, name: str) -> None:
    cluster, sampler, batch = cosco_cluster
    policy = make_scheduler(
        name,
        seed=0,
        season=288,
        task_source=sampler,
        offline=60,
        actions=True,
        samples=2,
        candidates=1,
    )
    policy.prepare(np.full(300, 5.0))
    policy.arrive(batch)
    rng = np.random.default_rng(0)
    policy.decide(cluster.copy(), rng)  # offline training happens at the first decision
    decision = benchmark(lambda: policy.decide(cluster, rng))
    placement = getattr(decision, "placement", decision)
    assert placement.shape == (len(cluster.tasks),)


def test_read_one_bitbrains_trace(benchmark) -> None:
    path = sorted(bitbrains_dir().glob("*.csv.gz"))[0]
    trace = benchmark(lambda: read_vm_trace(path))
    assert len(trace) > 8000
