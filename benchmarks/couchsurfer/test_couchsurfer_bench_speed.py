"""Speeds the CouchSurfer issue names: a placement decision (< 1 ms on 1,000 GPUs) and a
large-scale simulation (1,000 GPUs, 100,000 jobs in < 60 s). Run: pytest benchmarks/couchsurfer"""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.couchsurfer import (
    Thresholds,
    WorkloadSpec,
    generate,
    place_threshold,
    random_instance,
    simulate,
    solve_ilp,
)
from schedlab.couchsurfer.ejpp import best_gang


@pytest.fixture(scope="module")
def big_instance():
    return random_instance(np.random.default_rng(0), nodes=125, gpus_per_node=8, jobs=50,
                           thresholds=Thresholds())


def test_bench_placement_decision_1000_gpus(benchmark, big_instance) -> None:
    """One exploratory job placed among 1,000 GPUs (what CouchSurfer does per arrival)."""
    taken = ~big_instance.slot_free
    gpus, _ = benchmark(best_gang, big_instance, 0, taken)
    assert gpus


def test_bench_threshold_plan_small(benchmark) -> None:
    inst = random_instance(np.random.default_rng(1), nodes=4, gpus_per_node=4, jobs=10)
    benchmark(place_threshold, inst)


def test_bench_ilp_plan_small(benchmark) -> None:
    inst = random_instance(np.random.default_rng(1), nodes=4, gpus_per_node=4, jobs=10)
    benchmark.pedantic(solve_ilp, args=(inst,), rounds=3, iterations=1)


def test_bench_large_scale_simulation(benchmark) -> None:
    """100,000 jobs on 1,000 GPUs under CouchSurfer, end to end (one round: ~30 s)."""
    jobs = generate(WorkloadSpec(jobs=100_000, gpus=1_000), seed=0)
    report = benchmark.pedantic(simulate, args=(jobs, "couchsurfer"), kwargs=dict(nodes=125),
                                rounds=1, iterations=1)
    assert report.summary["finished"] == 100_000


def test_bench_real_trace_1000_gpus(benchmark, shared_data) -> None:
    """All usable pods of the Alibaba GPU 2023 trace on a 1,002-GPU slice of its node list
    (arrivals compressed to load 0.9), CouchSurfer with Lucid's measured pairs."""
    from schedlab.couchsurfer.alibaba import load_alibaba
    from schedlab.couchsurfer.interference import PairTruth, load_measurements

    base = shared_data / "alibaba"
    m = load_measurements(shared_data / "colocation")
    got = load_alibaba(base / "gpu2023_pod_list_default.csv",
                       base / "gpu2023_node_list_gpu_node.csv", gpus=1000, sample=1.0,
                       load=0.9, measurements=m)
    report = benchmark.pedantic(simulate, args=(got.jobs, "couchsurfer"),
                                kwargs=dict(cluster=got.cluster, truth=PairTruth(m)),
                                rounds=1, iterations=1)
    assert report.summary["finished"] == len(got.jobs)
