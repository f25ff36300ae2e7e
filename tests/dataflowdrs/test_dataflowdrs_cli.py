"""``schedlab dataflowdrs``: commands print one JSON document; bad input is one clear line."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from schedlab.dataflowdrs import WorkflowConfig, build, make_layout
from schedlab.dataflowdrs.cli import app
from schedlab.dataflowdrs.synthetic import simulate_trace, write_trace

runner = CliRunner()


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Modelled runs of mapreduce at three scales, written as trace directories."""
    root = tmp_path_factory.mktemp("dfd-cli")
    layout = make_layout(root / "tiers", create=False)
    out = []
    for n in (2, 3, 4):
        cfg = WorkflowConfig(workflow="mapreduce", scale=n, size_kb=128)
        out.append(write_trace(simulate_trace(build(cfg, layout), layout, 2), root / f"s{n}"))
    return out


def test_analyze_json(traces, tmp_path):
    result = runner.invoke(app, ["analyze", str(traces[0]), "--no-sankey", "--json",
                                 "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tasks"] == 2 + 2 + 1 and doc["bottlenecks"] and doc["recommendations"]
    assert (tmp_path / "r" / "report.md").is_file()


@pytest.mark.parametrize("name", ["io-volume", "io-time", "task-time"])
def test_analyze_with_a_baseline(traces, tmp_path, name):
    result = runner.invoke(app, ["analyze", str(traces[1]), "--diagnoser", name, "--no-sankey",
                                 "--json", "--out", str(tmp_path / name)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["diagnoser"] == name


def test_predict_json_uses_scales_from_metadata(traces):
    result = runner.invoke(app, ["predict", *map(str, traces), "--scale", "8", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    maps = [r for r in rows if r["quantity"] == "instances" and r["name"] == "map"]
    assert maps and maps[0]["predicted"] == pytest.approx(8)


def test_errors_are_one_line_with_exit_code_2(traces, tmp_path):
    cases = [
        ["analyze", str(tmp_path / "missing")],
        ["analyze", str(traces[0]), "--diagnoser", "oracle"],
        ["predict", str(traces[0]), "--scale", "9"],
        ["predict", str(traces[0]), str(traces[1]), "--scale", "9", "--scales", "1,x"],
        ["run", "genomes", "--tier", "nonsense"],
        ["run", "nowflow", "--out", str(tmp_path / "x"), "--workdir", str(tmp_path / "w")],
    ]
    for args in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "error:" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--tier", "split=ssd", "unknown tier 'ssd' for file group 'split'"),
    ("--tier", "splits=shared", "no file group 'splits' in mapreduce"),
    ("--block", "map=0", "block size for task group 'map' must be >= 1"),
    ("--block", "mapper=4096", "no task group 'mapper' in mapreduce"),
])
def test_run_rejects_unknown_groups_and_bad_values(tmp_path, option, value, expected):
    # these used to be ignored silently (a typo'd group) or reach the task binary (block <= 0)
    out = tmp_path / "x"
    result = runner.invoke(app, ["run", "mapreduce", "--scale", "1", "--size-kb", "1", option,
                                 value, "--out", str(out), "--workdir", str(tmp_path / "w")])
    assert result.exit_code == 2, result.output
    assert expected in result.output and not out.exists()


@pytest.mark.parametrize("scale", ["0", "-4"])
def test_predict_rejects_a_non_positive_scale(traces, scale):
    result = runner.invoke(app, ["predict", *map(str, traces), "--scale", scale])
    assert result.exit_code == 2
    assert "field 'scale'" in result.output and "must be > 0" in result.output


def test_diagnosers_lists_every_registered_one():
    result = runner.invoke(app, ["diagnosers", "--json"])
    assert result.exit_code == 0
    assert [r["name"] for r in json.loads(result.stdout)] == [
        "dataflowdrs", "io-volume", "io-time", "task-time", "drishti"]


def test_run_then_analyze_a_real_workflow(tmp_path):
    pytest.importorskip("dftracer")
    out = tmp_path / "trace"
    result = runner.invoke(app, ["run", "dlreader", "--scale", "2", "--size-kb", "64", "--out",
                                 str(out), "--workdir", str(tmp_path / "w"), "--inject",
                                 "slow-tier", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["tasks"] == 2 + 1 + 2 and doc["injected"]["kind"] == "slow-tier"
    result = runner.invoke(app, ["analyze", str(out), "--no-sankey", "--json"])
    assert result.exit_code == 0, result.output
