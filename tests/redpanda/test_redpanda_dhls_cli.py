"""DHLS from the CLI and the registered experiment (small subset)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from schedlab.core.errors import MissingServiceError
from schedlab.redpanda import dhls_experiment
from schedlab.redpanda.backends.dhls.tools import have
from schedlab.redpanda.cli import app
from schedlab.redpanda.workloads import kernel_text

runner = CliRunner()
needs_iverilog = pytest.mark.skipif(not have("iverilog"),
                                    reason="iverilog not installed (apt-get install iverilog)")


@needs_iverilog
def test_compile_dhls_writes_verilog_and_testbench(tmp_path):
    path = tmp_path / "gcd.mlir"
    path.write_text(kernel_text("gcd", 3))
    out = tmp_path / "gcd_rtl"
    result = runner.invoke(app, ["compile", str(path), "--target", "dhls", "--out", str(out),
                                 "--no-synth", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["metrics"]["matches_interpreter"] is True
    assert doc["metrics"]["cycles"] > 0 and doc["metrics"]["clock_ns"] > 0
    assert (out / "rp_gcd.v").read_text().startswith("// generated")
    assert (out / "tb.v").exists() and (out / "rp_control.v").exists()
    text = runner.invoke(app, ["compile", str(path), "--target", "dhls", "--out", str(out),
                               "--no-synth"])
    assert text.exit_code == 0 and "cycles" in text.stdout


@needs_iverilog
def test_compile_dhls_into_a_relative_out_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "gcd.mlir").write_text(kernel_text("gcd", 3))
    result = runner.invoke(app, ["compile", "k/gcd.mlir", "--target", "dhls", "--out", "rtl",
                                 "--no-synth", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metrics"]["matches_interpreter"] is True


STENCIL_C = """
#define N 6
void stencil(int a[N], int b[N], int idx[N], int hist[N]) {
  for (int i = 1; i < N - 1; i++) {
    int s = a[i - 1] + a[i] + a[i + 1];
    a[i] = s - b[i];
    hist[idx[i]] += a[i] * 3;
  }
}
"""


@needs_iverilog
def test_compile_dhls_from_another_directory_with_a_port_budget(tmp_path, monkeypatch):
    """The docs' command from a sibling directory: ../k/x.c, relative --out, --mem-ports."""
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "stencil.c").write_text(STENCIL_C)
    (tmp_path / "k" / "in.json").write_text(json.dumps(
        {"a": [1, 2, 3, 4, 5, 6], "b": [0, 1, 0, 1, 0, 1], "idx": [0, 5, 4, 3, 2, 1],
         "hist": [0] * 6}))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    for budget, most in (("1", 1), ("2", 2), ("0", 5)):
        result = runner.invoke(app, ["compile", "../k/stencil.c", "--target", "dhls", "--out",
                                     f"rtl/{budget}", "--inputs", "../k/in.json",
                                     "--mem-ports", budget, "--no-synth", "--json"])
        assert result.exit_code == 0, result.output
        metrics = json.loads(result.stdout)["metrics"]
        assert metrics["matches_interpreter"] is True
        assert max(metrics["memory_ports"].values()) == most  # a[] has five accesses
        assert (tmp_path / "work" / "rtl" / budget / "rp_stencil.v").exists()
    bad = runner.invoke(app, ["compile", "../k/stencil.c", "--target", "dhls", "--out", "x",
                              "--mem-ports", "a=zero"])
    assert bad.exit_code == 2 and "mem_ports" in bad.output and "Traceback" not in bad.output


def test_unknown_target_is_one_line(tmp_path):
    path = tmp_path / "gcd.mlir"
    path.write_text(kernel_text("gcd", 3))
    result = runner.invoke(app, ["compile", str(path), "--target", "fpga"])
    assert result.exit_code == 2
    assert "cgra, dhls" in result.output and "Traceback" not in result.output


@needs_iverilog
def test_dhls_experiment_subset_claims():
    result = dhls_experiment.dhls_suite(size=3, seed=0, kernels=("histogram", "gcd"),
                                        flows=("redpanda", "dynamatic-pipelined", "dynamatic"))
    frame = result.frame
    assert frame["correct"].all() and frame.height == 6
    # the yardstick is the fastest *pipelined* baseline; the non-pipelined flow never is
    assert set(frame["best_baseline"]) == {"dynamatic-pipelined"}
    assert (frame["verilog_ports"] <= 2).all()
    claims = {c.statement: c for c in result.claims}
    assert all(c.holds for c in claims.values() if c.required)
    speed = next(c for s, c in claims.items() if "faster" in s)
    rp = frame.filter(frame["flow"] == "redpanda")["exec_ns"].to_list()
    base = frame.filter(frame["flow"] == "dynamatic-pipelined")["exec_ns"].to_list()
    expected = 100 * (1 - (rp[0] / base[0] * rp[1] / base[1]) ** 0.5)
    assert speed.measured == pytest.approx(expected)
    assert "non-pipelined" in result.notes
    assert result.figures[0].png.startswith(b"\x89PNG")


def test_dhls_experiment_fails_loudly_without_any_simulator(monkeypatch):
    monkeypatch.setattr(dhls_experiment, "simulator", lambda: None)
    with pytest.raises(MissingServiceError, match="no Verilog simulator"):
        dhls_experiment.dhls_suite(size=3, seed=0, kernels=("gcd",))
