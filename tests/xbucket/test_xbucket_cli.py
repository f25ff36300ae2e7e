"""The CLI end to end: generate a trace, replay it (--json), bad input exits 2 with file:line."""

import json

from typer.testing import CliRunner

from schedlab.cli import _mount_system_apps_once, app

_mount_system_apps_once()  # main() mounts the system groups; tests build the app themselves
runner = CliRunner()


def test_generate_then_replay_all_as_json(tmp_path):
    trace = tmp_path / "t.csv"
    done = runner.invoke(app, ["xbucket", "generate", "--workflow", "bimodal", "--tasks", "150",
                               "--out", str(trace), "--json"])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["xbucket", "replay", "--trace", str(trace), "-a", "all",
                               "--json", "--out", str(tmp_path / "r.parquet")])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout[done.stdout.index("["):])
    assert {r["algorithm"] for r in rows} >= {"pg-bucket", "de-bucket", "whole-machine"}
    assert all(r["tasks"] == 150 for r in rows)
    assert (tmp_path / "r.parquet").exists()


def test_malformed_trace_is_one_line_with_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("task_id -- core\n1 -- 1 -- x -- 0 -- 1 -- 1 -- 0 -- 1\n")
    done = runner.invoke(app, ["xbucket", "replay", "--trace", str(bad)])
    assert done.exit_code == 2
    assert f"{bad}:2" in done.output and "memory" in done.output


def test_unknown_algorithm_exits_2():
    done = runner.invoke(app, ["xbucket", "replay", "--trace", "/nonexistent", "-a", "x"])
    assert done.exit_code == 2


def test_run_real_commands_from_a_file(tmp_path):
    listing = tmp_path / "cmds.txt"
    listing.write_text("# two tasks\n[small] sh -c 'echo one'\nsh -c 'echo two'\n")
    done = runner.invoke(app, ["xbucket", "run", "--commands", str(listing), "--json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout[done.stdout.index("["):])
    assert [r["returncode"] for r in rows] == [0, 0]


def test_run_a_missing_program_is_one_error_line():
    done = runner.invoke(app, ["xbucket", "run", "--", "/nonexistent/program"])
    assert done.exit_code == 2
    assert "cannot start '/nonexistent/program'" in done.output
    assert "Traceback" not in done.output


def test_run_rejects_a_non_positive_first_memory():
    done = runner.invoke(app, ["xbucket", "run", "--first-memory", "-5", "--", "true"])
    assert done.exit_code == 2
    assert "first_memory" in done.output
