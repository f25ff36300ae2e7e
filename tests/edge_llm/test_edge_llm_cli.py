"""The CLI: --json documents, clear one-line errors with exit code 2, files written."""

import json

from typer.testing import CliRunner

from schedlab.edge_llm.cli import app

runner = CliRunner()


def test_simulate_json_is_one_document(tmp_path):
    res = runner.invoke(app, ["simulate", "--n", "80", "--policy", "online", "--policy",
                              "cloud", "--json", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert [s["policy"] for s in doc["summaries"]] == ["online", "cloud"]
    assert (tmp_path / "requests_online.parquet").is_file()
    assert (tmp_path / "summary.json").is_file()


def test_generate_then_replay_own_csv(tmp_path):
    path = tmp_path / "reqs.csv"
    assert runner.invoke(app, ["generate", str(path), "--n", "40"]).exit_code == 0
    res = runner.invoke(app, ["simulate", "--requests", str(path), "--policy", "mix", "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["summaries"][0]["requests"] == 40


def test_residency_json():
    res = runner.invoke(app, ["residency", "--model", "qwen3-8b", "--gpu", "a6000", "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert doc["summary"]["shapes"] == len(doc["shapes"]) > 0


def test_bad_options_exit_2_with_the_field():
    for args, needle in ((["residency", "--gpu", "v100"], "unknown gpu"),
                         (["simulate", "--backhaul-gbps", "-1"], "backhaul_gbps"),
                         (["simulate", "--snr-max", "60"], "SNR"),
                         (["simulate", "--n", "5", "--snr-min", "30", "--snr-max", "5"],
                          "min > max"),
                         (["simulate", "--policy", "fastest", "--n", "5"], "unknown policy"),
                         (["simulate", "--policy", "online", "--policy", "fastest+admit",
                           "--n", "5"], "unknown policy")):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert needle in res.output
        assert "replaying" not in res.output  # every name is checked before any replay
