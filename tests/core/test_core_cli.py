"""The schedlab command as a user meets it: list, reproduce, errors, --json."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedlab import cli

runner = CliRunner()


def invoke(*args: str):
    cli.mount_system_apps()
    return runner.invoke(cli.app, list(args))


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith("schedlab ")


def test_list_json_has_sixteen_systems():
    result = invoke("list", "--json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert len(rows) == 16
    assert {r["status"] for r in rows} <= {"implemented", "planned"}


def test_reproduce_unknown_system_is_one_line_error(tmp_path: Path):
    result = invoke("reproduce", "nosuchsystem", "--out", str(tmp_path))
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "nosuchsystem" in message and "xbucket" in message and "hydra_mcs" in message
    assert "Traceback" not in result.output


def test_reproduce_out_pointing_at_a_file(tmp_path: Path):
    target = tmp_path / "a-file"
    target.write_text("keep me")
    result = invoke("reproduce", "core", "--quick", "--out", str(target))
    assert result.exit_code == 2
    assert "not a directory" in result.stderr and "a-file" in result.stderr
    assert target.read_text() == "keep me"


def test_reproduce_json_prints_one_document(tmp_path: Path):
    result = invoke("reproduce", "core", "--quick", "--seeds", "2", "--jobs", "1",
                    "--out", str(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert {c["system"] for c in document["claims"]} == {"core"}
    assert all(c["holds"] for c in document["claims"])
    assert (tmp_path / "index.html").is_file()


def test_interrupt_keeps_previous_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    first = invoke("reproduce", "core", "--quick", "--seeds", "1", "--jobs", "1",
                   "--out", str(tmp_path))
    assert first.exit_code == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    from schedlab.core import experiment as exp

    monkeypatch.setattr(exp, "run_sweep", interrupted)  # reproduce imports it when it runs
    second = invoke("reproduce", "core", "--quick", "--jobs", "1", "--out", str(tmp_path))
    assert second.exit_code == 130
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before  # nothing new, nothing half-written, no temp files


def test_required_claim_failure_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from schedlab.core import experiment as exp
    from schedlab.core.experiment import Claim, Result

    def failing(seed: int) -> Result:
        import polars as pl

        return Result(pl.DataFrame({"x": [1]}),
                      claims=[Claim("must hold", "x", 0.0, 1.0, ">=", required=True,
                                   kind="sanity")])

    monkeypatch.setitem(exp._REGISTRY, "core.failing",
                        exp.Experiment("core", "failing", failing, {}, {}))
    result = invoke("reproduce", "core", "--quick", "--seeds", "1", "--jobs", "1",
                    "--out", str(tmp_path))
    assert result.exit_code == 1
    # the self-check's two sanity rows pass, the failing one does not; no claim about a paper
    assert "0 of 0 claims hold (2 of 3 sanity checks pass)" in result.stdout


def test_real_ctrl_c_leaves_no_report(tmp_path: Path):
    """Ctrl-C on a real process group (parent + pool workers): exit 130, no traceback, no files."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "report"
    proc = subprocess.Popen(
        [sys.executable, "-m", "schedlab.cli", "reproduce", "core", "--seeds", "400",
         "--jobs", "2", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True,
    )
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline:  # --out is created before the sweep
        time.sleep(0.1)
    time.sleep(2.0)  # let the pool start working
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert list(out.iterdir()) == []


def test_error_text_in_brackets_is_printed_verbatim(tmp_path: Path):
    result = invoke("reproduce", "[weird]", "--out", str(tmp_path))
    assert result.exit_code == 2 and "[weird]" in result.stderr


def test_system_with_missing_extra_gets_a_clear_command(monkeypatch: pytest.MonkeyPatch):
    from schedlab.core.systems import system_info

    def no_numba(name: str):
        raise ModuleNotFoundError("No module named 'numba'", name="numba")

    monkeypatch.setattr(cli.importlib, "import_module", no_numba)
    stand_in = cli._system_app(system_info("xbucket"))
    result = runner.invoke(stand_in, [])
    assert result.exit_code == 2
    assert "numba" in result.stderr and "pip install" in result.stderr
