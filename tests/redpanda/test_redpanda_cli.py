"""CLI: compile prints a schedule and metrics; --json is one document; errors are one line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from schedlab.redpanda.backends.config import link_loads, read_config
from schedlab.redpanda.cli import app
from schedlab.redpanda.workloads import kernel_text

runner = CliRunner()


def test_compile_spatial_and_temporal_json(tmp_path):
    path = tmp_path / "gcd.mlir"
    path.write_text(kernel_text("gcd", 3))
    result = runner.invoke(app, ["compile", str(path), "--target", "cgra", "--rows", "6",
                                 "--cols", "6", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # without --arch the default is place and route on a rows x cols mesh, 1 word/link-cycle
    assert doc["metrics"]["arch"] == "mesh6x6c16" and doc["metrics"]["link_capacity"] == 1
    assert doc["metrics"]["matches_interpreter"] is True
    assert len(doc["schedule"]) == doc["metrics"]["instructions"]
    config = read_config(doc["files"]["config"])  # written next to the kernel by default
    assert Path(doc["files"]["config"]) == tmp_path / "gcd.cgra.json"
    assert config["arch"]["memory"]["ports_per_array"] == 2
    assert 0 < max(link_loads(config).values()) <= 1
    done = runner.invoke(app, ["compile", str(path), "--temporal", "--out", str(tmp_path / "o")])
    assert done.exit_code == 0 and (tmp_path / "o" / "gcd.cgra.json").is_file(), done.output
    ir = tmp_path / "gcd.rp.mlir"
    result = runner.invoke(app, ["compile", str(path), "--rows", "4", "--cols", "4",
                                 "--temporal", "--mapper", "milp", "--emit-ir", str(ir)])
    assert result.exit_code == 0, result.output
    assert "redpanda.carry" in ir.read_text()
    assert "min_ii" in result.stdout and "no routes" in result.output


def test_malformed_mlir_is_one_line_with_location(tmp_path):
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @k(%a: memref<4xi32>) {\n  %x = arith.addi %a %a\n}\n")
    result = runner.invoke(app, ["compile", str(path)])
    assert result.exit_code == 2
    assert "bad.mlir:2" in result.output
    assert "Traceback" not in result.output


def test_unknown_target_and_flow(tmp_path):
    path = tmp_path / "k.mlir"
    path.write_text(kernel_text("fir", 3))
    result = runner.invoke(app, ["compile", str(path), "--target", "asic"])
    assert result.exit_code == 2 and "valid: cgra, dhls" in result.output
    result = runner.invoke(app, ["compile", str(path), "--flow", "nope"])
    assert result.exit_code == 2 and "redpanda" in result.output


def test_unknown_mapper_and_negative_seed(tmp_path):
    path = tmp_path / "k.mlir"
    path.write_text(kernel_text("fir", 3))
    result = runner.invoke(app, ["compile", str(path), "--temporal", "--mapper", "ilp"])
    assert result.exit_code == 2
    assert "unknown mapper 'ilp'; valid: pnr, schedule-only, milp" in result.output
    for args in (["compile", str(path), "--temporal", "--seed", "-1"],
                 ["evaluate", "--kernels", "fir", "--flows", "redpanda", "--seed", "-1"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "field 'seed'" in result.output and "Traceback" not in result.output


def test_spatial_fabric_too_small(tmp_path):
    path = tmp_path / "k.mlir"
    path.write_text(kernel_text("mm2", 3))
    result = runner.invoke(app, ["compile", str(path), "--rows", "2", "--cols", "2"])
    assert result.exit_code == 2 and "--temporal" in result.output


def test_evaluate_kernels_and_flows_json(tmp_path):
    result = runner.invoke(app, ["evaluate", "--kernels", "histogram,gcd", "--size", "3",
                                 "--flows", "redpanda,baseline", "--json",
                                 "--out", str(tmp_path / "t.csv")])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 2 * 2 * 2 and all(r["correct"] for r in rows)
    assert (tmp_path / "t.csv").exists()
    result = runner.invoke(app, ["kernels", "--emit", str(tmp_path / "k"), "--json"])
    assert result.exit_code == 0 and len(list((tmp_path / "k").glob("*.mlir"))) == 15
    assert runner.invoke(app, ["flows", "--json"]).exit_code == 0


COLLATZ = """
#define N 3
int collatz(int a[N], int steps[N]) {
  int total = 0;
  for (int i = 0; i < N; i++) {
    int x = a[i];
    int s = 0;
    while (x != 1) {
      if (x % 2 == 0) x = x / 2; else x = 3 * x + 1;
      s++;
    }
    steps[i] = s;
    total += s;
  }
  return total;
}
"""


def test_default_command_sizes_the_spatial_fabric_or_falls_back(tmp_path, monkeypatch):
    """Issue 57: 27 instructions do not fit the default spatial 4x4 (16 PEs). Without
    --rows/--cols/--arch the command picks the smallest square mesh the kernel routes on and
    says so; with no larger mesh allowed it falls back to temporal 4x4 and says that."""
    from schedlab.redpanda import api

    path = tmp_path / "collatz.c"
    path.write_text(COLLATZ)
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"a": [6, 7, 27]}))
    result = runner.invoke(app, ["compile", str(path), "--inputs", str(inputs), "--json",
                                 "--link-capacity", "2"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.stdout)["metrics"]
    side = int(metrics["fabric"].split()[1].split("x")[0])
    assert metrics["fabric"].startswith("spatial") and side >= 6  # 27 > 25 PEs of 5x5
    assert metrics["instructions"] > 16 and metrics["matches_interpreter"] is True
    monkeypatch.setattr(api, "AUTO_SPATIAL_MAX_SIDE", 4)
    result = runner.invoke(app, ["compile", str(path), "--inputs", str(inputs)])
    assert result.exit_code == 0, result.output
    assert "fell back to the temporal 4x4" in result.output and "27 instructions" in result.output
    # an explicit fabric is still the user's: too small is an error naming --temporal
    result = runner.invoke(app, ["compile", str(path), "--rows", "4", "--cols", "4"])
    assert result.exit_code == 2 and "--temporal" in result.output
