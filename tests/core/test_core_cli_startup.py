"""The CLI answers at once: help loads no system's heavy dependencies (issue 22, item 3).

Each check runs the real entry point in a fresh interpreter and reads ``sys.modules`` there, so
an eager import anywhere on the path (a package ``__init__``, a CLI module's top level) fails.
Timings live in ``benchmarks/core/test_core_bench_cli.py``, never here.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from schedlab.core.systems import SYSTEM_NAMES

HEAVY = ("torch", "ray", "redis", "xdsl", "scipy.stats", "numba", "polars", "fastapi",
         "pyscf", "parsl", "highspy", "matplotlib", "networkx")

_PROBE = """
import json, sys
sys.argv = ["schedlab", *json.loads(sys.argv[1])]
from schedlab.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = {heavy}
loaded = sorted(m for m in heavy if m in sys.modules)
systems = sorted({{m.split(".")[1] for m in sys.modules if m.startswith("schedlab.")
                  and m.split(".")[1] not in ("core", "cli")}})
sys.stderr.write("\\nPROBE " + json.dumps(dict(code=code, heavy=loaded, systems=systems)) + "\\n")
"""


def probe(*args: str) -> dict:
    code = _PROBE.format(heavy=repr(HEAVY))
    done = subprocess.run([sys.executable, "-c", code, json.dumps(list(args))],
                          capture_output=True, text=True, timeout=120)
    line = [x for x in done.stderr.splitlines() if x.startswith("PROBE ")]
    assert line, done.stderr[-2000:]
    return json.loads(line[-1][6:])


def test_root_help_imports_no_system_and_no_heavy_module():
    found = probe("--help")
    assert found["code"] == 0
    assert found["heavy"] == [] and found["systems"] == []


def test_version_is_light():
    found = probe("--version")
    assert found["code"] == 0 and found["heavy"] == [] and found["systems"] == []


@pytest.mark.parametrize("system", SYSTEM_NAMES)
def test_a_systems_help_imports_only_that_system_and_nothing_heavy(system: str):
    found = probe(system.replace("_", "-"), "--help")
    assert found["code"] == 0
    assert found["systems"] == [system]
    assert found["heavy"] == []


def test_underscore_alias_still_works_and_is_hidden():
    from typer.testing import CliRunner

    from schedlab.cli import app

    runner = CliRunner()
    assert runner.invoke(app, ["hydra_mcs", "--help"]).exit_code == 0
    listing = runner.invoke(app, ["--help"]).stdout
    assert "hydra-mcs" in listing and "hydra_mcs" not in listing


def test_unknown_command_is_a_clear_error():
    from typer.testing import CliRunner

    from schedlab.cli import app

    result = CliRunner().invoke(app, ["no-such-system"])
    assert result.exit_code == 2 and "no-such-system" in result.output


@pytest.mark.parametrize("args", [("list",), ("data", "list")])
def test_list_reads_catalogues_and_imports_no_system(args: tuple[str, ...]):
    """``schedlab list`` reads the generated experiments.json, not the live registry."""
    found = probe(*args)
    assert found["code"] == 0
    assert found["heavy"] == [] and found["systems"] == []
