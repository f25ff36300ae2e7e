"""``schedlab carss ...`` end to end through Typer (CARSS paper 07)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from schedlab.carss.cli import app

runner = CliRunner()


def test_list_json() -> None:
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert "carss" in doc["schedulers"] and "adaptive" in doc["forecasters"]


def test_forecast_from_a_trace_writes_a_plot(tmp_path: Path) -> None:
    trace = tmp_path / "arrivals.csv"
    times = [60.0 * i for i in range(3000)] + [180_000 + 10.0 * i for i in range(3000)]
    trace.write_text("timestamp\n" + "\n".join(str(t) for t in times) + "\n")
    plot = tmp_path / "fc.png"
    result = runner.invoke(
        app,
        [
            "forecast",
            "--trace",
            str(trace),
            "--interval",
            "3600",
            "--forecaster",
            "ets",
            "--horizon",
            "3",
            "--plot",
            str(plot),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["mean"]) == 3 and plot.stat().st_size > 1000
    assert any(45 <= c <= 55 for c in doc["offline_changes"])  # rate x6 at interval 50


def test_simulate_compares_schedulers(tmp_path: Path) -> None:
    out = tmp_path / "intervals.csv"
    result = runner.invoke(
        app,
        [
            "simulate",
            "-s",
            "least-loaded",
            "-s",
            "best-fit",
            "--hosts",
            "4",
            "--intervals",
            "6",
            "--train",
            "32",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["scheduler"] for r in rows] == ["least-loaded", "best-fit"]
    assert out.is_file()


def test_bad_trace_is_one_clear_line(tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("timestamp\n5\n3\n")
    result = runner.invoke(app, ["forecast", "--trace", str(trace)])
    assert result.exit_code == 2
    assert "bad.csv:3" in result.output and "not sorted" in result.output


def test_unknown_scheduler_lists_valid_names() -> None:
    result = runner.invoke(app, ["simulate", "-s", "magic", "--intervals", "2", "--train", "32"])
    assert result.exit_code == 2 and "carss" in result.output


def test_an_overloaded_run_warns_and_a_light_one_does_not() -> None:
    """Issue 32 item 5: unfinished tasks / SLA violation above 50 % print one warning line."""
    heavy = runner.invoke(
        app,
        [
            "simulate",
            "-s",
            "least-loaded",
            "--hosts",
            "1",
            "--load",
            "40",
            "--intervals",
            "4",
            "--train",
            "32",
            "--json",
        ],
    )
    assert heavy.exit_code == 0, heavy.output
    assert json.loads(heavy.stdout)[0]["unfinished"] > 0
    assert "warning: least-loaded: the cluster is overloaded" in heavy.stderr
    light = runner.invoke(
        app,
        [
            "simulate",
            "-s",
            "least-loaded",
            "--hosts",
            "8",
            "--load",
            "0.5",
            "--intervals",
            "4",
            "--train",
            "32",
            "--json",
        ],
    )
    assert light.exit_code == 0, light.output
    assert "overloaded" not in light.stderr


def test_a_scale_that_leaves_no_task_is_one_clear_error(tmp_path: Path) -> None:
    """--scale 0 used to run an empty window and print a NaN response time."""
    trace = tmp_path / "arrivals.csv"
    trace.write_text("timestamp\n" + "\n".join(str(30.0 * i) for i in range(20_000)) + "\n")
    for command in (["simulate", "-s", "least-loaded"], ["cosim-error"]):
        result = runner.invoke(
            app,
            [*command, "--trace", str(trace), "--scale", "0", "--train", "32", "--intervals", "8"],
        )
        assert result.exit_code == 2, result.output
        assert "no arrivals at --scale 0" in result.output


def test_simulate_on_bitbrains_with_cosco_fleet(tmp_path: Path) -> None:
    """Bitbrains demand from a directory of traces, COSCO's fleet, a bad directory rejected."""
    import shutil

    from schedlab.carss.bitbrains import bitbrains_dir

    source = bitbrains_dir()
    if source is None:
        import pytest

        pytest.skip("../shared/data/bitbrains is absent")
    traces = tmp_path / "vms"
    traces.mkdir()
    for name in ("9.csv.gz", "21.csv.gz"):
        shutil.copy(source / name, traces / name)
    args = [
        "simulate",
        "-s",
        "least-loaded",
        "-s",
        "pack-sleep",
        "-s",
        "lr-mmt",
        "--hosts",
        "4",
        "--intervals",
        "6",
        "--train",
        "40",
        "--load",
        "0.3",
        "--fleet",
        "cosco",
        "--bitbrains",
        str(traces),
        "--drain",
        "30",
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["scheduler"] for r in rows] == ["least-loaded", "pack-sleep", "lr-mmt"]
    assert all(r["completed"] + r["unfinished"] == r["arrived"] for r in rows)
    assert rows[1]["avg_hosts_asleep"] > 0 and rows[0]["avg_hosts_asleep"] == 0
    bad = runner.invoke(app, [*args[:-5], "--bitbrains", str(tmp_path / "nope")])
    assert bad.exit_code != 0 and "not a directory" in bad.output


def test_a_run_shorter_than_the_tasks_says_so_instead_of_overload(capsys) -> None:
    """A run that ends before any task can finish is not an overload: the warning names --drain."""
    from schedlab.carss.cli import _warn_overload

    _warn_overload("gobi", {"unfinished": 930, "completed": 0, "sla_violation_rate": 0.0})
    short = capsys.readouterr().err
    assert "no task finished before the run ended" in short
    assert "--drain" in short and "overloaded" not in short
    _warn_overload("gobi", {"unfinished": 5, "completed": 50, "sla_violation_rate": 0.0})
    assert "overloaded" in capsys.readouterr().err
