"""Output that survives a pipe: off a terminal, tables print whole (issue 22, item 4)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from schedlab.core.data import data_dir

DATA = data_dir()


def test_a_wide_table_sent_to_a_pipe_is_not_cut():
    code = ("from rich.table import Table\n"
            "from schedlab.core.clitools import out_console\n"
            "t = Table('a' * 60, 'b' * 60)\n"
            "t.add_row('x' * 70, '2.75e+07 exactly')\n"
            "out_console.print(t)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "…" not in out
    assert "x" * 70 in out and "2.75e+07 exactly" in out
    assert len(out.splitlines()[1]) > 80


@pytest.mark.skipif(not (DATA / "xbucket" / "bioblast.txt").is_file(),
                    reason="../shared/data/xbucket not present")
def test_xbucket_replay_piped_prints_every_column_whole(tmp_path: Path):
    trace = DATA / "xbucket" / "bioblast.txt"
    cmd = [sys.executable, "-m", "schedlab.cli", "xbucket", "replay", "--trace", str(trace),
           "--algorithm", "all"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300).stdout
    assert "…" not in out
    for column in ("algorithm", "efficiency_memory", "makespan"):
        assert column in out
    # --json stays one document (one allocator: the table above already ran them all)
    document = subprocess.run([*cmd[:-1], "dg-bucket", "--json"], capture_output=True,
                              text=True, check=True, timeout=300).stdout
    json.loads(document)  # --json stays exactly one document
