"""The CLI end to end: one JSON document on stdout, library numbers, clear failures."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from schedlab.hip_dfpt.cli import app

runner = CliRunner()


def test_run_water_json_matches_pyscf() -> None:
    pytest.importorskip("pyscf")
    result = runner.invoke(
        app,
        [
            "run",
            "-m",
            "water",
            "-b",
            "sto-3g",
            "--workers",
            "2",
            "--streams",
            "2",
            "--balancer",
            "work-stealing",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["relative_error"] < 1e-8 and doc["micro_tasks"] < doc["raw_batches"]
    assert len(doc["alpha"]) == 3 and doc["vxc_error"] < 1e-10


def test_tasks_json_reports_both_task_sets() -> None:
    pytest.importorskip("pyscf")
    result = runner.invoke(app, ["tasks", "-m", "h2", "-b", "sto-3g", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["tasks_of"] for r in rows] == ["raw", "composed"]
    assert rows[1]["tasks"] <= rows[0]["tasks"]


def test_simulate_json_is_labelled_simulated() -> None:
    result = runner.invoke(
        app,
        [
            "simulate",
            "--devices",
            "16",
            "--atoms",
            "600",
            "--balancer",
            "hip-dfpt",
            "--balancer",
            "round-robin",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["simulated"] is True
    assert {r["config"] for r in doc["rows"]} == {
        "sota",
        "sota+streams",
        "hip-dfpt",
        "micro-tasks+round-robin",
    }


def test_simulate_rejects_bad_options() -> None:
    result = runner.invoke(app, ["simulate", "--balancer", "nope"])
    assert result.exit_code == 2 and "valid" in result.output
    result = runner.invoke(
        app, ["simulate", "--executor", "mpi", "--devices", "2", "--atoms", "10"]
    )
    assert result.exit_code == 2


def test_run_own_xyz_on_processes_with_pbe(tmp_path) -> None:
    pytest.importorskip("pyscf")
    path = tmp_path / "mine.xyz"
    path.write_text("2\nmy molecule\nH 0 0 0\nH 0 0 0.74\n")
    result = runner.invoke(
        app,
        [
            "run",
            "-m",
            str(path),
            "-b",
            "sto-3g",
            "--xc",
            "pbe",
            "--executor",
            "process",
            "--workers",
            "2",
            "--streams",
            "1",
            "--replan",
            "measured",
            "--ao-on-the-fly",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["relative_error"] < 1e-10 and doc["xc"] == "pbe"
    assert doc["live_cpu_balance"] >= 1.0 and 0.0 <= doc["overhead_fraction"] < 1.0


def test_new_options_fail_in_one_line() -> None:
    for args, field in (
        (["run", "--replan", "often"], "replan"),
        (["run", "--executor", "mpi"], "executor"),
        (["calibrate", "--train", " , "], "train"),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and field in result.output
        assert "Traceback" not in result.output
