"""Speed of the RedPanda pipeline stages (run with ``pytest benchmarks/redpanda``)."""

from __future__ import annotations

import pytest

from schedlab.redpanda.backends.cgra import CGRA, map_graph
from schedlab.redpanda.backends.modulo import map_graph_milp
from schedlab.redpanda.compiler import middle_end
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.reference import run_reference
from schedlab.redpanda.simulator import simulate
from schedlab.redpanda.workloads import load_suite_kernel, random_inputs


@pytest.fixture(scope="module")
def mm2():
    kernel = load_suite_kernel("mm2", 8)
    return kernel, middle_end(kernel, get_flow("redpanda")), random_inputs(kernel, 0)


def test_bench_middle_end_mm2(benchmark, mm2):
    kernel, _, _ = mm2
    graph = benchmark(middle_end, kernel, get_flow("redpanda"))
    assert graph.instruction_count() > 0


def test_bench_list_mapper_temporal(benchmark, mm2):
    _, graph, _ = mm2
    mapping = benchmark(map_graph, graph, CGRA(4, 4, contexts=16), "temporal")
    assert mapping.ii >= mapping.min_ii


def test_bench_milp_mapper_temporal(benchmark, mm2):
    _, graph, _ = mm2
    mapping = benchmark.pedantic(map_graph_milp, args=(graph, CGRA(4, 4, contexts=16),
                                                       "temporal"), rounds=3, iterations=1)
    assert mapping.ii >= mapping.min_ii


def test_bench_simulator_mm2(benchmark, mm2):
    _, graph, inputs = mm2
    result = benchmark.pedantic(simulate, args=(graph, inputs), rounds=3, iterations=1)
    benchmark.extra_info["firings"] = result.firings
    benchmark.extra_info["cycles"] = result.cycles


def test_bench_reference_interpreter_mm2(benchmark, mm2):
    kernel, _, inputs = mm2
    benchmark.pedantic(run_reference, args=(kernel, inputs), rounds=3, iterations=1)
