"""The registered experiments run at a tiny scale and their required claims hold."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from schedlab.core.experiment import experiments
from schedlab.gpooling.cli import app
from schedlab.gpooling.experiment import cluster_inflation, interception, trace_replay
from schedlab.traces import alibaba_gpu2023 as alibaba


def test_experiments_are_registered() -> None:
    names = {e.name for e in experiments(["gpooling"])}
    assert names == {"cluster_inflation", "trace_replay", "interception"}


def test_cluster_inflation_on_the_generator(monkeypatch) -> None:
    monkeypatch.setattr(alibaba, "shared_trace", lambda: None)
    result = cluster_inflation(every=60, levels=(0.5, 1.0), seed=1)
    assert result.ran_with.startswith("seeded generator shaped like Alibaba GPU 2023")
    assert result.figures and set(result.frame["policy"]) >= {"pooled-fgd", "frag-aware", "fgd",
                                                              "random"}
    claims = {c.metric: c for c in result.claims}
    assert all(c.holds for c in result.claims if c.required)
    assert claims["GPU allocation at 100 % arrived demand, pooled-fgd / whole-device"] \
        .measured > 1.0
    assert "GPU allocation at 100 % arrived demand, frag-aware / fgd" in claims  # paper's row


def test_trace_replay_on_the_generator(monkeypatch) -> None:
    monkeypatch.setattr(alibaba, "shared_trace", lambda: None)
    result = trace_replay(every=200, loads=(1.0,), horizon=20_000.0, seed=0)
    assert "seeded generator" in result.ran_with and result.frame.height == 5
    assert all(c.measured == c.measured for c in result.claims)  # no NaN


def test_experiment_says_it_ran_on_the_real_trace(shared_data) -> None:
    result = trace_replay(every=200, loads=(0.5,), horizon=5_000.0, seed=0)
    assert result.ran_with.startswith("Alibaba GPU 2023 node list + pod list (real)")


def test_interception_experiment_claims(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPOOLING_BUILD_DIR", str(tmp_path))
    result = interception(calls=20_000, repeats=1, seed=0)
    assert all(c.holds for c in result.claims if c.required)
    assert result.frame["alloc_shim_ns"][0] > 0


def test_cli_generate_and_simulate(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = tmp_path / "t.csv"
    made = runner.invoke(app, ["generate", "--out", str(trace), "--jobs", "200", "--devices", "8"])
    assert made.exit_code == 0, made.output
    ran = runner.invoke(app, ["simulate", "--trace", str(trace), "--devices", "8", "--json",
                              "--policy", "frag-aware", "--out", str(tmp_path / "r.csv")])
    assert ran.exit_code == 0, ran.output
    rows = json.loads(ran.stdout)
    assert rows[0]["policy"] == "frag-aware" and rows[0]["jobs"] == 200
    assert (tmp_path / "r.csv").is_file()
    bad = runner.invoke(app, ["simulate", "--policy", "nope"])
    assert bad.exit_code == 2 and "frag-aware" in bad.output
    broken = tmp_path / "broken.csv"
    broken.write_text("gpu_milli,num_gpu,creation_time,deletion_time\n100,1,0,x\n")
    failed = runner.invoke(app, ["simulate", "--trace", str(broken)])
    assert failed.exit_code == 2 and "broken.csv:2" in failed.output
