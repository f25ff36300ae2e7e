"""The CLI: simulate from a workload and a trace, JSON output, bad input as one clear line."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedlab.core.experiment import get_experiment
from schedlab.faircache.cli import app

DATA = Path(__file__).parents[1] / "llm" / "data"
runner = CliRunner()


def test_simulate_workload_json_and_outputs(tmp_path):
    result = runner.invoke(
        app,
        [
            "simulate",
            "--workload",
            "shared-prefix",
            "--tenants",
            "2",
            "--duration",
            "5",
            "--scheduler",
            "vtc",
            "--cache",
            "static",
            "--host-gb",
            "1",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["tenants"]) == 2 and doc["summary"]["requests"] > 0
    assert (tmp_path / "tenants.csv").exists() and (tmp_path / "summary.json").exists()


def test_simulate_shipped_trace_prints_table():
    result = runner.invoke(
        app, ["simulate", "--trace", str(DATA / "sample_mooncake.jsonl"), "--gpu", "h100"]
    )
    assert result.exit_code == 0, result.output
    assert "t0" in result.stdout and "throughput" in result.stdout


def test_bad_trace_line_is_reported(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": "many", '
        '"hash_ids": [1]}\n'
    )
    result = runner.invoke(app, ["simulate", "--trace", str(bad)])
    assert result.exit_code == 2
    assert "bad.jsonl:2" in result.output and "output_length" in result.output


def test_unknown_policy_and_missing_source():
    result = runner.invoke(app, ["simulate", "--workload", "overload", "--scheduler", "magic"])
    assert result.exit_code == 2 and "valid" in result.output
    result = runner.invoke(app, ["simulate"])
    assert result.exit_code == 2


def test_costmodel_and_generate(tmp_path):
    result = runner.invoke(app, ["costmodel", "--model", "qwen3-8b", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["tp"] == 1
    out = tmp_path / "g.jsonl"
    result = runner.invoke(
        app, ["generate", "on-off", "--out", str(out), "--duration", "5", "--json"]
    )
    assert result.exit_code == 0 and out.exists()


def test_free_riding_experiment_claims_hold():
    exp = get_experiment("faircache.free_riding")
    result = exp.fn(k=3, prefix=1024, seed=0)
    assert result.claims and all(c.holds for c in result.claims)


def test_non_finite_or_empty_durations_and_host_sizes_are_one_error_line():
    for args, field in [
        (["--workload", "hit-bias", "--duration", "nan"], "duration"),
        (["--workload", "hit-bias", "--duration", "inf"], "duration"),
        (["--workload", "hit-bias", "--duration", "1e-9"], "duration"),
        (["--workload", "hit-bias", "--duration", "5", "--host-gb", "inf"], "host_gb"),
    ]:
        result = runner.invoke(app, ["simulate", *args])
        assert result.exit_code == 2, (args, result.output)
        assert f"field '{field}'" in result.output, (args, result.output)
        assert "Traceback" not in result.output


def test_serve_on_the_real_engine_then_report(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    data = Path(__file__).parents[1] / "llm" / "data" / "sample_mooncake.jsonl"
    out = tmp_path / "res"
    # blocks go to the host tier and are reclaimed from it while a new request matches them
    # (this run once crashed on a matched block whose host copy was evicted)
    result = runner.invoke(
        app,
        [
            "serve",
            "--trace",
            str(data),
            "--assign",
            "prefix",
            "--tenants",
            "3",
            "--max-requests",
            "40",
            "--time-scale",
            "0.001",
            "--context",
            "truncate",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout[result.stdout.index("{") :])
    assert doc["summary"]["requests"] == 40
    assert sum(t["cpu_share"] for t in doc["tenants"]) == pytest.approx(1.0)
    rep = runner.invoke(app, ["report", str(out), "--json"])
    assert rep.exit_code == 0, rep.output
    fairness = json.loads(rep.stdout[rep.stdout.index("{") :])["fairness"]
    assert set(fairness) == {"compute", "unified", "cpu"}


def test_serve_refuses_a_prompt_beyond_the_engine_context():
    pytest.importorskip("torch")
    data = Path(__file__).parents[1] / "llm" / "data" / "sample_mooncake.jsonl"
    result = runner.invoke(
        app, ["serve", "--trace", str(data), "--max-requests", "4", "--max-context", "64"]
    )
    assert result.exit_code != 0
    assert "context" in result.output and "Traceback" not in result.output


def test_serve_rejects_bad_out_and_names_before_running(tmp_path):
    pytest.importorskip("torch")
    data = Path(__file__).parents[1] / "llm" / "data" / "sample_mooncake.jsonl"
    blocker = tmp_path / "afile"
    blocker.write_text("keep me")
    for extra, needle in (
        (["--out", str(blocker)], "not a directory"),
        (["--scheduler", "bogus"], "unknown scheduler"),
        (["--cache", "bogus"], "unknown cache manager"),
    ):
        result = runner.invoke(app, ["serve", "--trace", str(data), *extra])
        assert result.exit_code != 0, extra
        assert needle in result.output and "Traceback" not in result.output, result.output
        assert "serving" not in result.output  # failed before the engine started
    assert blocker.read_text() == "keep me"
