"""Speed of the CGRA place-and-route back end (``pytest benchmarks/redpanda``)."""

from __future__ import annotations

import pytest

from schedlab.redpanda.backends.arch import load_arch, mesh
from schedlab.redpanda.backends.cgra import compile_config
from schedlab.redpanda.backends.config_sim import run_config
from schedlab.redpanda.backends.router import (
    build_nets,
    pathfinder,
    place_and_route,
    place_and_schedule,
)
from schedlab.redpanda.compiler import middle_end
from schedlab.redpanda.policies import get_flow
from schedlab.redpanda.workloads import load_suite_kernel, random_inputs


@pytest.fixture(scope="module")
def mm2():
    kernel = load_suite_kernel("mm2", 8)
    return kernel, middle_end(kernel, get_flow("redpanda"), "temporal")


def test_bench_pathfinder_mm2_temporal(benchmark, mm2):
    """PathFinder alone on one placement of 2mm (4x4 mesh, 1 word per link-cycle)."""
    _, graph = mm2
    arch = load_arch("mesh4x4")
    ii = place_and_route(graph, arch, "temporal").ii
    place, start = place_and_schedule(graph, arch, "temporal", ii)

    def route():
        nets = build_nets(graph, arch, "temporal", ii, place, start, 1)
        return pathfinder(arch, ii, nets), nets

    iterations, nets = benchmark(route)
    benchmark.extra_info.update(ii=ii, nets=len(nets), iterations=iterations)


def test_bench_place_and_route_mm2_temporal(benchmark, mm2):
    """The whole II search (placement + PathFinder per II) on mesh4x4."""
    _, graph = mm2
    pnr = benchmark.pedantic(
        place_and_route, args=(graph, load_arch("mesh4x4"), "temporal"), rounds=3, iterations=1
    )
    benchmark.extra_info.update(ii=pnr.ii, min_ii=pnr.min_ii)


def test_bench_place_and_route_mm2_spatial(benchmark):
    graph = middle_end(load_suite_kernel("mm2", 8), get_flow("redpanda"), "spatial")
    pnr = benchmark.pedantic(
        place_and_route,
        args=(graph, mesh(10, 10, link_capacity=2), "spatial"),
        rounds=3,
        iterations=1,
    )
    benchmark.extra_info.update(achieved_ii=pnr.achieved_ii)


def test_bench_config_simulator_mm2(benchmark, mm2):
    kernel, graph = mm2
    _, config = compile_config(graph, "mesh4x4", "temporal")
    run = benchmark.pedantic(
        run_config, args=(config, random_inputs(kernel, 0)), rounds=3, iterations=1
    )
    benchmark.extra_info.update(cycles=run.cycles, firings=run.firings)


def test_bench_exact_router_gemm(benchmark):
    """The HiGHS routing program on one gemm placement (4x4 mesh), against PathFinder's time."""
    from schedlab.redpanda.backends.cgra import CGRA, map_graph
    from schedlab.redpanda.backends.exact_route import exact_route

    graph = middle_end(load_suite_kernel("gemm", 4), get_flow("redpanda"), "temporal")
    old = map_graph(graph, CGRA(4, 4, contexts=16), "temporal")
    arch = mesh(4, 4, contexts=16, link_capacity=1)

    def route():
        nets = build_nets(graph, arch, "temporal", old.slot_ii, old.place, old.start, 1)
        return exact_route(arch, old.slot_ii, nets)

    words = benchmark.pedantic(route, rounds=3, iterations=1)
    benchmark.extra_info.update(words=words)
