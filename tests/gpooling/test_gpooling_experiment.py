"""The registered experiments run at a tiny scale and their required claims hold."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from schedlab.core.experiment import experiments
from schedlab.gpooling.cli import app
from schedlab.gpooling.experiment import interception, pooling_vs_device


def test_experiments_are_registered() -> None:
    names = {e.name for e in experiments(["gpooling"])}
    assert names == {"pooling_vs_device", "interception"}


def test_pooling_experiment_claims() -> None:
    result = pooling_vs_device(jobs=300, devices=12, load=0.9, seed=0)
    assert result.frame.height == 5 and result.figures
    claims = {c.metric: c for c in result.claims}
    assert all(c.holds for c in result.claims if c.required)
    assert claims["utilisation frag-aware / whole-device"].measured > 1.0


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
