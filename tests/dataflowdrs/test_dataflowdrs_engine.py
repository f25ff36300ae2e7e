"""Real runs: task processes traced by dftracer on the (throttled) tiers, end to end."""

from __future__ import annotations

import sys

import polars as pl
import pytest

from schedlab.dataflowdrs import (
    DEFAULT_TIERS,
    WorkflowConfig,
    Workspace,
    analyse,
    build,
    diagnose,
    inject,
    make_tracer,
    optimize_loop,
    read_trace,
    run_command,
    run_config,
    write_report,
)

pytest.importorskip("dftracer", reason="tracing needs the dftracer package")


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    ws = Workspace.create(tmp_path_factory.mktemp("dfd-engine"))
    yield ws
    ws.close()


def test_real_run_traces_every_byte_each_task_moves(space, tmp_path):
    cfg = WorkflowConfig(workflow="genomes", scale=3, size_kb=128,
                         tiers={"ind": "shared", "merged": "tmpfs"})
    record = run_config(cfg, space, out_dir=tmp_path / "t")
    trace = read_trace(record.trace_dir, strict=True)
    workflow = build(cfg, space.layout)
    assert trace.tasks.height == len(workflow.tasks)
    written = dict(trace.ops.filter(pl.col("op") == "write").group_by("path")
                   .agg(pl.col("bytes").sum()).iter_rows())
    declared = {p: s for t in workflow.tasks for p, s in t.outputs}
    assert written == declared
    reads = trace.ops.filter(pl.col("op") == "read").group_by("path").agg(pl.col("bytes").sum())
    consumers = {}
    for task in workflow.tasks:
        for path in task.inputs:
            consumers[path] = consumers.get(path, 0) + 1
    sizes = dict(workflow.initial) | declared
    assert dict(reads.iter_rows()) == {p: sizes[p] * n for p, n in consumers.items()}
    pids = set(trace.tasks["pid"].to_list())
    assert set(trace.ops["pid"].to_list()) <= pids


def test_throttled_tier_costs_at_least_its_bandwidth(space, tmp_path):
    """The shim sleeps inside read/write, so traced durations carry the tier's cost."""
    cfg = WorkflowConfig(workflow="mapreduce", scale=2, size_kb=256, tiers={"part": "shared"})
    analysis = analyse(read_trace(run_config(cfg, space, out_dir=tmp_path / "t").trace_dir))
    shared = analysis.dfl.access.filter(pl.col("tier") == "shared")
    tier = DEFAULT_TIERS["shared"]
    assert shared.height > 0
    floor = shared["bytes"].sum() / tier.bandwidth + shared["ops"].sum() * tier.latency
    assert shared["time"].sum() >= 0.99 * floor
    assert analysis.tier_models["shared"].bandwidth < analysis.tier_models["local"].bandwidth


def test_untraced_runs_leave_no_trace_files(space, tmp_path):
    record = run_config(WorkflowConfig(workflow="dlreader", scale=2, size_kb=64), space,
                        tracer="untraced", out_dir=tmp_path / "u")
    assert not list(record.trace_dir.glob("*.pfw"))
    assert (record.trace_dir / "tasks.jsonl").is_file()


def test_trace_an_unmodified_command(space, tmp_path):
    data = space.layout.root("local") / "cmd.bin"
    data.write_bytes(b"z" * 300_000)
    code = f"open({str(data)!r}, 'rb').read()"
    record = run_command([sys.executable, "-c", code], make_tracer("dftracer-stdio"),
                         tmp_path / "c", space.layout, name="reader")
    diagnosis = diagnose(record.trace_dir)
    access = diagnosis.analysis.dfl.access
    row = access.filter(pl.col("path") == str(data))
    assert row["bytes"].sum() == 300_000 and set(row["task"]) == {"reader"}


def test_real_small_io_storm_is_diagnosed_and_fixed(space, tmp_path):
    cfg, truth = inject(WorkflowConfig(workflow="mapreduce", scale=3, size_kb=512),
                        "small-io", seed=0)
    diagnosis = diagnose(run_config(cfg, space, out_dir=tmp_path / "s").trace_dir)
    top = diagnosis.ranked[0]
    assert (top.kind, top.target) == (truth.kind, truth.target)
    assert diagnosis.recommendations[0].apply(cfg).block(truth.target) == 1 << 20
    summary = write_report(diagnosis, tmp_path / "report", png=False)
    for name in ("report.json", "report.md", "bottlenecks.csv", "producer_consumer.csv",
                 "timeline.png", "dfl_sankey.html"):
        assert (tmp_path / "report" / name).is_file()
    assert summary["bottlenecks"][0]["kind"] == "small-io"


@pytest.mark.slow
def test_optimize_loop_changes_the_configuration_and_measures_it(space):
    cfg, _ = inject(WorkflowConfig(workflow="genomes", scale=3, size_kb=256), "slow-tier", 1)
    history = optimize_loop(cfg, steps=1, space=space)
    assert len(history) == 2
    assert history[0]["action"] in {"stage-to-tier", "coalesce-io", "split-merge",
                                    "raise-parallelism"}
    assert history[0]["config"] != history[1]["config"]
    assert all(h["makespan_s"] > 0 for h in history)


@pytest.mark.parametrize("engine", ["builtin", "parsl"])
def test_engines_respect_dependencies_and_parallelism(space, tmp_path, engine):
    if engine == "parsl":
        pytest.importorskip("parsl")
    cfg = WorkflowConfig(workflow="mapreduce", scale=3, size_kb=64, parallelism=2)
    record = run_config(cfg, space, tracer="untraced", out_dir=tmp_path / engine, engine=engine)
    events = {e["task"]: e for e in record.events}
    workflow = build(cfg, space.layout)
    assert set(events) == {t.id for t in workflow.tasks}
    for task, producers in workflow.dependencies().items():
        for producer in producers:
            assert events[task]["start"] >= events[producer]["end"]
        assert events[task]["ready"] <= events[task]["start"] + 1e-6
    edges = sorted((e["start"], 1) for e in events.values()) + sorted(
        (e["end"], -1) for e in events.values())
    running = peak = 0
    for _, step in sorted(edges, key=lambda x: (x[0], x[1])):
        running += step
        peak = max(peak, running)
    assert peak <= cfg.parallelism
    assert read_trace(record.trace_dir).meta["engine"] == engine


def test_unknown_engine_is_a_clear_error(space, tmp_path):
    from schedlab.core.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="parsl"):
        run_config(WorkflowConfig(scale=1), space, out_dir=tmp_path / "x", engine="airflow")


def test_strace_fallback_sees_the_same_calls_as_dftracer(space, tmp_path):
    import shutil

    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    cfg = WorkflowConfig(workflow="mapreduce", scale=2, size_kb=64, blocks={"map": 4096})
    totals = {}
    for tracer in ("dftracer", "strace"):
        trace = read_trace(run_config(cfg, space, tracer=tracer,
                                      out_dir=tmp_path / tracer).trace_dir, strict=True)
        io = trace.ops.filter(pl.col("op").is_in(["read", "write"]))
        totals[tracer] = (io.height, int(io["bytes"].sum()))
    assert totals["strace"] == totals["dftracer"]
