"""``schedlab doctor``: one table of the optional parts, right about what is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from schedlab.cli import app
from schedlab.core import doctor


def test_json_lists_every_extra_tool_service_and_device():
    result = CliRunner().invoke(app, ["doctor", "--json"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    rows = {(p["kind"], p["name"]): p for p in document["parts"]}
    assert {n for k, n in rows if k == "extra"} == set(doctor.EXTRAS)
    for name in ("fio", "iverilog", "yosys"):
        assert ("tool", name) in rows
    assert ("device", "NVIDIA GPU") in rows and ("service", "Slurm + munge") in rows
    for part in rows.values():
        assert isinstance(part["present"], bool) and part["enables"]
        if not part["present"] and part["kind"] != "device":
            assert part["install"] or part["name"] == "mount namespaces"
    # the extras schedlab itself is installed with are found from its own metadata
    assert rows[("extra", "services")]["present"] == all(
        doctor.dist_version(n) is not None for n in doctor.extra_packages("services"))


def test_extra_packages_are_read_from_metadata():
    assert "numba" in doctor.extra_packages("mcs")
    assert "xdsl" in doctor.extra_packages("compiler")
    assert doctor.extra_packages("no-such-extra") == []


def test_a_tool_hidden_from_path_is_reported_missing_with_its_install_line(tmp_path: Path):
    env = dict(os.environ, PATH=str(tmp_path))  # no tool at all on PATH
    code = ("import json; from schedlab.core.doctor import examine; "
            "print(json.dumps([f.as_dict() for f in examine()]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["fio"]["present"] is False
    assert rows["fio"]["install"] == "apt-get install -y fio"
    assert rows["iverilog"]["present"] is False and "not on PATH" in rows["iverilog"]["version"]
    assert rows["Slurm + munge"]["present"] is False


def test_a_missing_extra_names_its_packages(monkeypatch):
    real = doctor.dist_version
    monkeypatch.setattr(doctor, "dist_version",
                        lambda name: None if name == "xdsl" else real(name))
    finding = next(f for f in doctor.examine() if f.name == "compiler")
    assert not finding.present and finding.version == "missing xdsl"
    assert finding.install == "pip install -e '.[compiler]'"


def test_table_output_names_the_apt_line():
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0
    assert "schedlab doctor" in result.stdout and "apt-get install -y fio" in result.stdout
