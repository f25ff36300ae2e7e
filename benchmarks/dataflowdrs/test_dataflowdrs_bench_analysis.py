"""Speed of DataFlowDrs's analysis path on a large (modelled) trace, and of tracing itself.

The issue names no analysis-speed target; what matters is that diagnosis is fast next to the
workflow it diagnoses and that tracing is cheap (<= 5% of workflow time, measured by the
``tracing_overhead`` experiment). Here: reading, analysing, ranking and compressing a
2,000-task, ~10,000-call genomes trace; fitting the scaling models; and one small real run
with and without dftracer (the per-process start-up cost of LD_PRELOAD).
"""

from __future__ import annotations

import pytest

from schedlab.dataflowdrs import (
    DataFlowDrs,
    WorkflowConfig,
    Workspace,
    analyse,
    build,
    compress,
    fit_all,
    make_layout,
    read_trace,
    run_config,
)
from schedlab.dataflowdrs.synthetic import simulate_trace, write_trace


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    root = tmp_path_factory.mktemp("dfd-bench")
    layout = make_layout(root / "tiers", create=False)
    cfg = WorkflowConfig(workflow="genomes", scale=2000, size_kb=64, parallelism=16)
    trace = simulate_trace(build(cfg, layout), layout, 16)
    return trace, write_trace(trace, root / "trace"), layout


def test_dataflowdrs_bench_read_trace(benchmark, big):
    trace, directory, _ = big
    result = benchmark.pedantic(read_trace, args=(directory,), rounds=3, iterations=1)
    benchmark.extra_info.update(calls=trace.ops.height, tasks=trace.tasks.height)
    assert result.ops.height == trace.ops.height


def test_dataflowdrs_bench_analyse(benchmark, big):
    trace, _, _ = big
    analysis = benchmark.pedantic(analyse, args=(trace,), rounds=3, iterations=1)
    assert analysis.compressed.reduction > 50


def test_dataflowdrs_bench_rank(benchmark, big):
    analysis = analyse(big[0])
    ranked = benchmark.pedantic(DataFlowDrs().rank, args=(analysis,), rounds=3, iterations=1)
    assert ranked


def test_dataflowdrs_bench_compress(benchmark, big):
    graph = analyse(big[0]).dfl.graph
    benchmark.pedantic(compress, args=(graph,), rounds=3, iterations=1)


def test_dataflowdrs_bench_scaling_fit(benchmark, big):
    layout = big[2]
    runs = [(n, analyse(simulate_trace(build(WorkflowConfig(workflow="mapreduce", scale=n),
                                             layout), layout, 4))) for n in (2, 4, 8, 16)]
    models = benchmark(fit_all, runs)
    assert models


@pytest.mark.parametrize("tracer", ["untraced", "dftracer"])
def test_dataflowdrs_bench_real_run(benchmark, tracer):
    pytest.importorskip("dftracer")
    space = Workspace.create()
    cfg = WorkflowConfig(workflow="mapreduce", scale=4, size_kb=512)
    try:
        record = benchmark.pedantic(run_config, args=(cfg, space, tracer), rounds=3,
                                    iterations=1)
    finally:
        space.close()
    benchmark.extra_info.update(tasks=len(record.events), cpu_s=record.cpu)
