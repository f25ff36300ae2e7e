"""benchmarks/gpu/run_all.sh and checks.py: the plumbing of the GPU run, checked on a CPU."""

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_ALL = ROOT / "benchmarks" / "gpu" / "run_all.sh"
CHEAP = ("couchsurfer", "hip_dfpt", "gpooling", "edge_llm")  # dry runs of a second or so each


def _checks():
    spec = importlib.util.spec_from_file_location("gpu_checks", RUN_ALL.parent / "checks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_checks"] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


def _run_all(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RUN_ALL), *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHON": sys.executable, **(env or {})})


def test_dry_run_writes_one_json_per_check_and_a_summary(tmp_path: Path):
    done = _run_all("--dry-run", "--out", str(tmp_path), "--only", ",".join(CHEAP))
    assert done.returncode == 0, done.stderr + done.stdout
    for name in CHEAP:
        doc = json.loads((tmp_path / f"{name}.json").read_text())
        assert doc["mode"] == "dry-run" and doc["status"] == "ok", doc
        assert doc["docs"] == f"docs/gpu.md#{name}"
        assert doc["seconds"] >= 0 and doc["budget_s"] > 0
    flags = json.loads((tmp_path / "gpooling.json").read_text())["figures"]["flags_validated"]
    assert flags == ["--seconds", "--out"]
    registers = json.loads((tmp_path / "edge_llm.json").read_text())["figures"]
    assert registers["mode"] == "dry-run" and len(registers["measured"]) == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == "dry-run"
    assert [c["check"] for c in summary["checks"]] == list(CHEAP)
    assert summary["counts"] == {"ok": 4, "failed": 0, "timeout": 0, "skipped": 0}


def test_a_failing_check_does_not_stop_the_others(tmp_path: Path):
    """A runner that dies on one check (here: a PYTHON wrapper that exits 1 for hydra_mcs)."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\n[ "$2" = run ] && [ "$3" = hydra_mcs ] && exit 1\n'
                       f'exec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    out = tmp_path / "out"
    done = _run_all("--dry-run", "--out", str(out), "--only", "hydra_mcs,gpooling",
                    env={"PYTHON": str(wrapper)})
    assert done.returncode == 1
    summary = json.loads((out / "summary.json").read_text())
    status = {c["check"]: c["status"] for c in summary["checks"]}
    assert status == {"hydra_mcs": "timeout", "gpooling": "ok"}  # no file: listed, not lost


def test_bad_arguments_are_one_line(tmp_path: Path):
    done = _run_all("--frobnicate")
    assert done.returncode == 2 and "unknown argument '--frobnicate'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_budgets_fit_twelve_minutes():
    checks = _checks()
    margin = 8
    assert sum(c.budget_s + margin for c in checks.CHECKS.values()) <= 12 * 60
    assert {c.system for c in checks.CHECKS.values()} == {
        "hydra_mcs", "esr_hgnn", "couchsurfer", "faircache", "synergyscale", "hip_dfpt",
        "gpooling", "edge_llm"}


def test_run_child_kills_the_process_group_and_keeps_partial_output():
    checks = _checks()
    done = checks.run_child(["bash", "-c", "echo started; sleep 30 & wait"], timeout=1.0)
    assert done.timed_out and done.stdout.strip() == "started" and done.seconds < 10


def test_a_check_that_raises_is_recorded_as_failed(tmp_path: Path, monkeypatch):
    checks = _checks()

    def broken(budget, dry, work):
        raise checks.CheckError("the entry point printed nothing")

    def absent(budget, dry, work):
        raise checks.Skip("CuPy is not installed")

    monkeypatch.setitem(checks.CHECKS, "hip_dfpt", checks.Check(
        "hip_dfpt", "hip_dfpt", 5, "docs/gpu.md#hip_dfpt", broken))
    monkeypatch.setitem(checks.CHECKS, "gpooling", checks.Check(
        "gpooling", "gpooling", 5, "docs/gpu.md#gpooling", absent))
    assert checks.run_check("hip_dfpt", tmp_path, None, dry=False)["status"] == "failed"
    assert checks.run_check("gpooling", tmp_path, None, dry=False)["reason"] == (
        "CuPy is not installed")
    doc = json.loads((tmp_path / "hip_dfpt.json").read_text())
    assert doc["mode"] == "gpu" and "printed nothing" in doc["reason"]


@pytest.mark.parametrize("text,expected", [
    ('noise\n{"a": 1}\n', {"a": 1}),
    ('x\n{\n  "a": [1,\n 2]\n}\n', {"a": [1, 2]}),
    ("no json here", None),
])
def test_last_json(text, expected):
    assert _checks().last_json(text) == expected
