"""The ``schedlab mec-coalition`` commands: JSON output, plan files, clear errors."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from schedlab.mec_coalition.cli import app

runner = CliRunner()


def test_solve_prints_one_json_document_and_writes_the_plan(tmp_path):
    out = tmp_path / "plan.json"
    result = runner.invoke(app, ["solve", "--seed", "1", "--cloudlets", "6", "--models", "8",
                                 "--n-users", "30", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["method"] == "coalition"
    assert sorted(i for s in document["coalitions"] for i in s) == list(range(6))
    assert 0 <= document["metrics"]["hit_ratio"] <= 1
    assert json.loads(out.read_text())["metrics"] == document["metrics"]


def test_solve_with_ilp_and_table_output():
    result = runner.invoke(app, ["solve", "--method", "ilp", "--cloudlets", "3", "--models",
                                 "6", "--n-users", "12"])
    assert result.exit_code == 0, result.output
    assert "avg_delay_ms" in result.stdout


def test_solve_on_a_topology_file(tmp_path):
    sites = tmp_path / "sites.csv"
    sites.write_text("LATITUDE,LONGITUDE\n-37.81,144.96\n-37.82,144.97\n-37.815,144.95\n")
    result = runner.invoke(app, ["solve", "--topology", str(sites), "--n-users", "20",
                                 "--models", "8", "--json"])
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["cache"]) == 3


def test_errors_are_one_line_with_exit_code_2(tmp_path):
    result = runner.invoke(app, ["solve", "--method", "nope"])
    assert result.exit_code == 2 and "valid: coalition" in result.output
    bad = tmp_path / "bad.csv"
    bad.write_text("LATITUDE,LONGITUDE\n-37.81,east\n")
    result = runner.invoke(app, ["solve", "--topology", str(bad)])
    assert result.exit_code == 2
    assert "bad.csv:2" in result.output and "LONGITUDE" in result.output
    assert "Traceback" not in result.output
    sites = tmp_path / "s.csv"
    sites.write_text("LATITUDE,LONGITUDE,storage_gb\n-37.81,144.96,0.5\n")
    result = runner.invoke(app, ["solve", "--topology", str(sites), "--models", "8"])
    assert result.exit_code == 2 and "never be cached" in result.output


def test_compare_and_spoa_json(tmp_path):
    out = tmp_path / "rows.csv"
    result = runner.invoke(app, ["compare", "--cloudlets", "5", "--models", "6", "--n-users",
                                 "25", "--seeds", "1", "--jobs", "1", "--methods",
                                 "coalition,lfu", "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    assert {row["policy"] for row in summary} == {"coalition", "lfu"}
    assert out.read_text().startswith("seed,")
    result = runner.invoke(app, ["spoa", "--cloudlets", "3", "--n-users", "10", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["partitions"] == 5


def test_compare_with_no_method_names_is_a_clear_error():
    # regression: --methods "," used to end in a polars ColumnNotFoundError traceback
    result = runner.invoke(app, ["compare", "--cloudlets", "3", "--models", "3",
                                 "--n-users", "5", "--seeds", "1", "--methods", ","])
    assert result.exit_code == 2, result.output
    assert "methods" in result.output and "names no method" in result.output
