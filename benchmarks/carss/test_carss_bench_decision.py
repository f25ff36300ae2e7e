"""Speed of CARSS's hot paths (paper 07; issue target: one scheduling decision including
co-simulation under 1 s on one core for 50 hosts)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from schedlab.carss.hosts import make_hosts
from schedlab.carss.placement import greedy, least_loaded
from schedlab.carss.schedulers import make_scheduler
from schedlab.carss.simulator import Cluster
from schedlab.carss.workloads import arrival_series, make_workload

HOSTS = 50


@pytest.fixture(scope="module")
def loaded():
    """A 50-host cluster after 20 intervals at 3.2 arrivals/host/interval (overloaded: ~2,100
    tasks in the system, most waiting), plus its history: a stress case for the decision."""
    torch.set_num_threads(1)
    series = arrival_series("mixed", 140, 3.2 * HOSTS, 0)
    workload = make_workload(series.counts[100:], 300.0, 1)
    cluster = Cluster(make_hosts(HOSTS), 300.0)
    for batch in workload.batches[:20]:
        cluster.admit(batch.copy())
        moved, refused = cluster.apply(greedy(cluster, least_loaded))
        cluster.step(moved, refused)
    cluster.admit(workload.batches[20].copy())
    return cluster, series.counts[:120], workload.batches[20]


@pytest.mark.parametrize("name", ["carss", "cosim-static", "gobi-lite", "least-loaded"])
def test_one_decision_50_hosts(benchmark, loaded, name: str) -> None:
    cluster, history, batch = loaded
    policy = make_scheduler(name, seed=0, season=48)
    policy.prepare(history)
    policy.arrive(batch)
    rng = np.random.default_rng(0)
    for _ in range(16):  # past the learned schedulers' warm-up, so their models are used
        twin = cluster.copy()
        twin.interval += _
        moved, refused = twin.apply(policy.decide(twin, rng))
        policy.feedback(twin, twin.step(moved, refused))
    placement = benchmark(lambda: policy.decide(cluster, rng))
    assert placement.shape == (len(cluster.tasks),)


def test_simulator_step_50_hosts(benchmark, loaded) -> None:
    cluster, _, _ = loaded
    placement = greedy(cluster, least_loaded)

    def step() -> None:
        twin = cluster.copy()
        twin.apply(placement)
        twin.step()

    benchmark(step)


def test_adaptive_forecaster_update_and_predict(benchmark) -> None:
    torch.set_num_threads(1)
    series = arrival_series("mixed", 400, 30.0, 0).counts
    model = __import__("schedlab.carss.forecast", fromlist=["x"]).make_forecaster("adaptive")
    model.fit(series[:150])
    values = iter(np.tile(series[150:], 50))

    def one() -> None:
        model.update(float(next(values)))
        model.predict(4)

    benchmark.pedantic(one, rounds=200, iterations=1)
