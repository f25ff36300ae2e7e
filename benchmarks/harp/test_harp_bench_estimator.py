"""Speed of HARP's hot paths. Issue target: one BERT-base estimate under 10 ms."""

from __future__ import annotations

import pytest

from schedlab.harp import ArchConfig, build_workload, estimate, make_mapper, make_scheduler
from schedlab.harp import simulate as run_simulation

ARCH = ArchConfig()
BERT = build_workload("bert-base")
MAPPING = make_mapper("latency", "levels").map(BERT, ARCH)
PLAN = make_scheduler("harp").plan(BERT, MAPPING, ARCH)
estimate(PLAN)  # compile the Numba kernel outside the timed runs


def test_harp_bench_estimate_bert_base(benchmark) -> None:
    """The issue's target: plan + estimate of BERT-base (mapping given) under 10 ms."""
    result = benchmark(lambda: estimate(make_scheduler("harp").plan(BERT, MAPPING, ARCH)))
    assert result.latency_ns > 0


def test_harp_bench_estimate_only_bert_base(benchmark) -> None:
    benchmark(estimate, PLAN)


@pytest.mark.parametrize("solver", ["ilp", "levels", "greedy"])
def test_harp_bench_mapping_bert_base(benchmark, solver: str) -> None:
    benchmark(lambda: make_mapper("balanced", solver).map(BERT, ARCH))


def test_harp_bench_simulate_bert_base(benchmark) -> None:
    benchmark.pedantic(run_simulation, args=(PLAN,), rounds=3, iterations=1)
