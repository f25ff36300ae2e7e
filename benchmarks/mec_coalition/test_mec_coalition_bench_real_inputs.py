"""Speed of the real-input paths: reading the GenAI trace into demand, M/G/c waits of a plan."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.core.data import data_dir
from schedlab.mec_coalition import engine, get_policy, synthetic
from schedlab.mec_coalition.alibaba import demand, read_trace
from schedlab.mec_coalition.queueing import sample_service, simulate_fifo

TRACE = (data_dir() / "alibaba"
         / "genai_lora_request_trace.csv")


@pytest.mark.skipif(not TRACE.is_file(), reason="../shared/data/alibaba is absent")
def test_mec_coalition_bench_trace_to_demand(benchmark):
    """26,823 requests -> 816 users' tasks, rates and SCVs."""
    got = benchmark(lambda: demand(read_trace(TRACE), 816, 10))
    assert got.rate.size == 816


def test_mec_coalition_bench_queue_waits_125_800(benchmark):
    """M/G/c waits of every cloudlet for the grand coalition's plan at full scale."""
    inst = synthetic(125, 50, 800, seed=0)
    plan = get_policy("rounding").plan(inst, 0)
    waits = benchmark(engine.queue_waits, inst, plan)
    assert np.isfinite(waits).all()


def test_mec_coalition_bench_fifo_simulation_100k(benchmark):
    """The FIFO simulator the queueing formula is checked against (100k jobs, 2 servers)."""
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1 / 60, 100_000))
    service = sample_service(0.02, 0.3, 100_000, rng)
    benchmark.pedantic(simulate_fifo, args=(arrivals, service, 2), rounds=3, iterations=1)
