"""The lean ``hydra-mcs solve`` path (``fastcli.py``, via ``schedlab.entry``) is the Typer
command, byte for byte, and never loads Typer, Click, Rich or pydantic.

* Hypothesis: for argument lists drawn from the command's options (valid, malformed, typos,
  ``--help``, ``--``), whatever the lean parser accepts, Click parses to the same parameters;
  everything else it leaves to Typer.
* Real processes: the console entry point and the Typer app give the same stdout, stderr and
  exit code on good and bad calls (timings masked), plain and with colour forced.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.hydra_mcs import fastcli
from schedlab.hydra_mcs.cli import app

TOKENS = [
    "--pairs",
    "--format",
    "--labels",
    "--connected",
    "--directed",
    "--threads",
    "--policy",
    "--heuristic",
    "--branching",
    "--big-first",
    "--gpu",
    "--gpu-kernel",
    "--timeout",
    "--prove",
    "--no-mapping",
    "--json",
    "--help",
    "--",
    "-x",
    "--jsn",
    "--threads=2",
    "--timeout=1.5",
    "--json=1",
    "--labels=",
    "a.grf",
    "b.grf",
    "2",
    "0",
    "-1",
    "1e3",
    "nan",
    "x",
    "",
    "all",
    "min_product",
    "rl",
    " 3",
    "3.",
    ".5",
    "+4",
]


def _click_params(argv: list[str]) -> dict | None:
    command = typer.main.get_command(app).commands["solve"]
    try:
        ctx = command.make_context("solve", list(argv), resilient_parsing=False)
    except (typer.Exit, SystemExit, Exception):  # click.UsageError, BadParameter, --help
        return None
    return dict(ctx.params)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=7))
def test_what_the_lean_parser_accepts_click_parses_the_same(argv):
    mine = fastcli.parse(argv)
    if mine is None:
        return  # Typer decides (and words its own message)
    theirs = _click_params(argv)
    assert theirs is not None, argv
    for key, value in mine.items():
        assert theirs[key] == value, (argv, key, value, theirs[key])


def test_plain_calls_are_taken_and_odd_ones_left_to_typer():
    assert fastcli.parse(["a", "b", "--threads", "2", "--json"])["threads"] == 2
    assert fastcli.parse(["a", "b", "--timeout=0.5"])["timeout"] == 0.5
    for odd in (
        ["--help"],
        ["a", "b", "--threads", "0"],
        ["a", "b", "--", "c"],
        ["a", "b", "c"],
        ["a", "--json=1"],
        ["a", "b", "--threads"],
        ["", "b"],
    ):
        assert fastcli.parse(odd) is None, odd


_MASK = [
    (re.compile(r'"(seconds|cpu_s)": [0-9.e-]+'), r'"\1": X'),
    (re.compile(r"time (\x1b\[[0-9;]*m)?[0-9.]+(\x1b\[[0-9;]*m)?[0-9]*s"), "time Xs"),
    (re.compile(r" +[0-9]+\.[0-9]{3} (optimal|error|stopped)"), r" X \1"),
]

_ENTRY = (
    "import sys; sys.argv = ['schedlab', *sys.argv[1:]]; from schedlab.entry import main; main()"
)
_TYPER = "import sys; sys.argv = ['schedlab', *sys.argv[1:]]; from schedlab.cli import app; app()"


def _run(code: str, argv: list[str], cwd: Path) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-c", code, "hydra-mcs", "solve", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    for pattern, repl in _MASK:
        out = pattern.sub(repl, out)
    return done.returncode, out, done.stderr


@pytest.fixture
def pair(shared_data, tmp_path):
    for name in ("s20.A01", "s20.B01"):
        (tmp_path / name).write_bytes((shared_data / "mcs" / name).read_bytes())
    (tmp_path / "list.txt").write_text("s20.A01 s20.B01\nmissing.A s20.B01\n")
    return tmp_path


CASES = [
    ["s20.A01", "s20.B01"],
    ["s20.A01", "s20.B01", "--json", "--branching", "dal"],
    ["s20.A01", "s20.B01", "--threads", "0"],
    ["s20.A01", "s20.B01", "--heuristic", "nope"],
    ["s20.A01"],
    ["--pairs", "list.txt", "--json", "--no-mapping"],
    ["--pairs", "list.txt", "--labels", "all"],
    ["s20.A01", "s20.B01", "--prove", "no/such/dir/p.bin"],
    ["--help"],
]


@pytest.mark.parametrize("argv", CASES, ids=lambda a: " ".join(a))
def test_entry_point_and_typer_answer_the_same(pair, argv):
    assert _run(_ENTRY, argv, pair) == _run(_TYPER, argv, pair)


@pytest.mark.parametrize(
    "argv", [["s20.A01", "s20.B01"], ["s20.A01", "nope"], ["--pairs", "list.txt"]], ids=" ".join
)
def test_forced_colour_is_the_same_as_typers(pair, argv, monkeypatch):
    # FORCE_COLOR makes Rich colour a pipe as a terminal: the lean path then prints through
    # Rich consoles made as core.clitools makes them, so the ANSI output is Typer's too
    monkeypatch.setenv("FORCE_COLOR", "1")
    ours, typers = _run(_ENTRY, argv, pair), _run(_TYPER, argv, pair)
    assert "\x1b[" in ours[1] + ours[2]
    assert ours == typers


def _closed_reader(code: str, argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run with stdout a pipe whose reader has already gone (``| head -0``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, "hydra-mcs", "solve", *argv],
            cwd=cwd,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    "argv", [["s20.A01", "s20.B01"], ["s20.A01", "s20.B01", "--json"]], ids=" ".join
)
def test_a_reader_that_went_away_is_exit_1_without_a_traceback_as_typers(pair, argv):
    ours = _closed_reader(_ENTRY, argv, pair)
    assert ours == _closed_reader(_TYPER, argv, pair)
    assert ours == (1, "")


def test_lean_path_loads_no_cli_framework(pair):
    code = (
        "import json, sys; sys.argv = ['schedlab', 'hydra-mcs', 'solve', 's20.A01', "
        "'s20.B01', '--json']\nfrom schedlab.entry import main\ntry:\n    main()\n"
        "except SystemExit as exc:\n    assert not exc.code\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('typer', 'click', "
        "'rich', 'pydantic', 'numba', 'scipy', 'polars'))\n"
        "sys.stderr.write('MODULES ' + json.dumps(bad))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=pair,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout)["size"] == 12
    assert done.stderr.split("MODULES ")[-1] == "[]"


def test_a_result_line_longer_than_the_console_width_is_printed_whole_by_both_writers():
    """Off a terminal the consoles are 100,000 columns wide: a mapping line of ~7,000 pairs
    must not be folded by Rich (the Typer path) when the plain writer prints it whole."""
    code = (
        "import sys\nfrom schedlab.hydra_mcs.fastcli import plain_writers, rich_writers\n"
        "say = (rich_writers if sys.argv[1] == 'rich' else plain_writers)()[0]\n"
        "say(' '.join(f'({i} -> {i})' for i in range(12000)))\n"
    )
    outs = [
        subprocess.run(
            [sys.executable, "-c", code, kind], capture_output=True, text=True, timeout=60
        ).stdout
        for kind in ("rich", "plain")
    ]
    assert len(outs[0]) > 100_000 and outs[0].count("\n") == 1
    assert outs[0] == outs[1]
