"""Workflows DataFlowDrs did not write: real tools traced with relative paths, pipelines,
multiprocessing, bare dftracer traces with no task file, a metadata storm, empty runs."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedlab.dataflowdrs import read_trace
from schedlab.dataflowdrs.cli import app
from schedlab.dataflowdrs.engine import diagnose
from schedlab.dataflowdrs.traces import parse_pfw

runner = CliRunner()
needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")


def _dftracer_lib() -> str:
    pytest.importorskip("dftracer", reason="dftracer is not installed")
    from schedlab.dataflowdrs.tracer import dftracer_library

    return str(dftracer_library())


@pytest.fixture
def data(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "in.bin").write_bytes(os.urandom(300_000))
    (root / "t.txt").write_text("b\na\nc\n" * 100)
    monkeypatch.chdir(root)
    return root


def _trace(out: Path, tracer: str, *cmd: str, extra: tuple = ()) -> tuple[int, str]:
    result = runner.invoke(app, ["trace", "--out", str(out), "--tracer", tracer, *extra, "--",
                                 *cmd])
    return result.exit_code, result.output


def _bytes(trace, name: str, op: str) -> int:
    ops = trace.ops.filter((pl.col("op") == op) & pl.col("path").str.ends_with("/" + name))
    return int(ops["bytes"].sum())


@needs_strace
@pytest.mark.parametrize("cmd, reads, writes", [
    (("cat", "in.bin"), {"in.bin": 300_000}, {}),
    (("cp", "in.bin", "out.bin"), {"in.bin": 300_000}, {}),
    (("dd", "if=in.bin", "of=dd.bin", "bs=4k", "status=none"), {"in.bin": 300_000},
     {"dd.bin": 300_000}),
])
def test_relative_paths_are_seen_by_strace(data, tmp_path, cmd, reads, writes):
    code, output = _trace(tmp_path / "tr", "strace", *cmd)
    assert code == 0, output
    trace = read_trace(tmp_path / "tr")
    for name, n in reads.items():
        assert _bytes(trace, name, "read") == n
    for name, n in writes.items():
        assert _bytes(trace, name, "write") == n
    assert all(p.startswith(str(data)) for p in trace.ops["path"].to_list())


@pytest.mark.parametrize("cmd", [("cat", "in.bin"), ("cp", "in.bin", "out.bin")])
def test_relative_paths_are_seen_by_dftracer(data, tmp_path, cmd):
    _dftracer_lib()
    code, output = _trace(tmp_path / "tr", "dftracer-stdio", *cmd)
    assert code == 0, output
    assert _bytes(read_trace(tmp_path / "tr"), "in.bin", "read") == 300_000


@pytest.mark.parametrize("tracer", ["strace", "dftracer-stdio"])
def test_bash_pipeline_children_are_followed(data, tmp_path, tracer):
    if tracer == "strace" and shutil.which("strace") is None:
        pytest.skip("strace not installed")
    if tracer != "strace":
        _dftracer_lib()
    code, output = _trace(tmp_path / "tr", tracer, "bash", "-c",
                          "cat t.txt | sort | gzip > t.gz")
    assert code == 0, output
    trace = read_trace(tmp_path / "tr")
    assert _bytes(trace, "t.txt", "read") == (data / "t.txt").stat().st_size
    if tracer == "strace":
        assert _bytes(trace, "t.gz", "write") == (data / "t.gz").stat().st_size
        assert {"cat", "gzip"} <= set(trace.tasks["group"].to_list())  # tasks of their own
    else:  # dftracer's blind spot: gzip writes to the descriptor bash dup2()ed onto stdout
        assert "cat" in set(trace.tasks["group"].to_list())  # the child is followed


@needs_strace
def test_python_multiprocessing_workers_are_followed(data, tmp_path):
    (data / "mp.py").write_text(
        "import multiprocessing as mp\n"
        "def work(i):\n    open(f'part{i}.txt', 'w').write('x' * 5000)\n"
        "if __name__ == '__main__':\n    with mp.Pool(2) as p:\n        p.map(work, range(4))\n")
    code, output = _trace(tmp_path / "tr", "strace", sys.executable, "mp.py")
    assert code == 0, output
    trace = read_trace(tmp_path / "tr")
    for i in range(4):
        assert _bytes(trace, f"part{i}.txt", "write") == 5000
    assert trace.tasks.height >= 2  # the pool's workers are tasks of their own


@needs_strace
def test_zero_io_events_fail_loudly(data, tmp_path):
    code, output = _trace(tmp_path / "tr", "strace", "cat", "in.bin",
                          extra=("--data-dir", str(tmp_path / "elsewhere")))
    assert code == 3 and "no I/O event" in output
    code, _ = _trace(tmp_path / "tr2", "strace", "true", extra=("--allow-empty",))
    assert code == 0
    result = runner.invoke(app, ["analyze", str(tmp_path / "tr2"), "--no-sankey"])
    assert result.exit_code == 0 and "holds no I/O event" in result.output
    assert "none found" in result.output


@needs_strace
def test_metadata_storm_is_diagnosed_as_metadata(data, tmp_path):
    (data / "storm.py").write_text(
        "import os\nos.makedirs('d', exist_ok=True)\n"
        "for i in range(2000):\n    open(f'd/f{i}', 'wb').write(b'x' * 100)\n"
        "for i in range(2000):\n    os.stat(f'd/f{i}')\n"
        "for i in range(2000):\n    open(f'd/f{i}', 'rb').read()\n")
    code, output = _trace(tmp_path / "tr", "strace", sys.executable, "storm.py")
    assert code == 0, output
    d = diagnose(tmp_path / "tr")
    top = d.ranked[0]
    assert top.kind == "metadata", d.ranked[:3]
    assert "2000" in top.evidence or "stats" in top.evidence
    assert d.recommendations[0].action == "pack-files"


def _bare_dftracer_run(data: Path, out: Path, command: str) -> None:
    """dftracer used directly, as someone outside schedlab would: no tasks.jsonl, no meta."""
    env = dict(os.environ, LD_PRELOAD=_dftracer_lib(), DFTRACER_ENABLE="1",
               DFTRACER_INIT="PRELOAD", DFTRACER_INC_METADATA="1",
               DFTRACER_TRACE_COMPRESSION="1", DFTRACER_LOG_FILE=str(out / "app"),
               DFTRACER_DATA_DIR="all")
    out.mkdir()
    subprocess.run(["bash", "-c", command], cwd=data, env=env, check=True)


def test_bare_dftracer_trace_infers_tasks_per_process(data, tmp_path):
    out = tmp_path / "bare"
    # sort -o: dftracer does not see I/O on descriptors a shell dup2()ed (redirections)
    _bare_dftracer_run(data, out, "cat t.txt > /dev/null; sort -o sorted.txt t.txt; "
                                  "cp sorted.txt copy.txt")
    assert not (out / "tasks.jsonl").exists()
    trace = read_trace(out)
    assert trace.meta.get("tasks_inferred") == "per process"
    groups = set(trace.tasks["group"].to_list())
    assert {"cat", "sort", "cp"} <= groups, groups
    # relative names were resolved against each process's cwd (dftracer records it)
    assert _bytes(trace, "t.txt", "read") >= (data / "t.txt").stat().st_size  # cat (sort: mmap)
    assert _bytes(trace, "sorted.txt", "read") == (data / "sorted.txt").stat().st_size  # cp
    d = diagnose(out)
    assert d.analysis.dfl.tasks.height == trace.tasks.height and d.analysis.dfl.makespan > 0


def test_cut_gzip_trace_keeps_the_good_lines(data, tmp_path):
    out = tmp_path / "bare"
    _bare_dftracer_run(data, out, "cat in.bin > /dev/null; cat t.txt > /dev/null")
    victim = max(out.glob("*.pfw*"), key=lambda p: p.stat().st_size)
    whole, _, _ = parse_pfw(victim, strict=True)
    raw = gzip.decompress(victim.read_bytes()) if victim.suffix == ".gz" else victim.read_bytes()
    lines = raw.decode().splitlines(keepends=True)
    cut = "".join(lines[: len(lines) * 2 // 3]) + lines[len(lines) * 2 // 3][:15]
    target = tmp_path / "cut" / victim.name
    target.parent.mkdir()
    if victim.suffix == ".gz":
        target.write_bytes(gzip.compress(cut.encode())[:-6])  # the stream ends mid-way too
    else:
        target.write_text(cut)
    rows, _, issue = parse_pfw(target, strict=False)
    assert issue is not None and issue.line is not None and issue.line >= len(lines) * 2 // 3
    assert 0 < len(rows) <= len(whole)


def test_threads_of_one_process_become_tasks(tmp_path):
    lib = _dftracer_lib()
    data = tmp_path / "d"
    data.mkdir()
    script = ("import threading\n"
              "def w(i):\n    open(f'{i}.bin', 'wb').write(b'y' * 70000)\n"
              "ts = [threading.Thread(target=w, args=(i,)) for i in range(3)]\n"
              "[t.start() for t in ts]; [t.join() for t in ts]\n")
    out = tmp_path / "t"
    out.mkdir()
    env = dict(os.environ, LD_PRELOAD=lib, DFTRACER_ENABLE="1", DFTRACER_INIT="PRELOAD",
               DFTRACER_INC_METADATA="1", DFTRACER_TRACE_COMPRESSION="0",
               DFTRACER_LOG_FILE=str(out / "app"), DFTRACER_DATA_DIR="all")
    subprocess.run([sys.executable, "-c", script], cwd=data, env=env, check=True)
    trace = read_trace(out)
    writers = trace.tasks.filter(pl.col("task").str.contains(r"\."))
    assert writers.height == 3, trace.tasks


RECORD = st.fixed_dictionaries({
    "name": st.sampled_from(["read", "write", "open64", "stat", "unlink", "lseek64", "start",
                             "FH", "chdir", "pread64"]),
    "cat": st.sampled_from(["POSIX", "STDIO", "dftracer"]),
    "pid": st.one_of(st.integers(-3, 5), st.text(max_size=2)),
    "tid": st.integers(0, 5),
    "ts": st.one_of(st.integers(-5, 10**7), st.floats(allow_nan=True), st.none()),
    "dur": st.one_of(st.integers(-5, 10**4), st.none()),
    "args": st.one_of(st.dictionaries(
        st.sampled_from(["ret", "fhash", "name", "value", "offset", "cwd", "ppid"]),
        st.one_of(st.integers(-3, 10**6), st.text(max_size=6)), max_size=5), st.text(max_size=3)),
})


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(RECORD.map(json.dumps), st.text(max_size=30)), max_size=12))
def test_fuzzed_bare_trace_never_raises_anything_else(tmp_path, lines):
    directory = tmp_path / "fz"
    directory.mkdir(exist_ok=True)
    (directory / "x.pfw").write_text("\n".join(lines), encoding="utf-8")
    trace = read_trace(directory)
    assert (trace.ops["dur"] >= 0).all() and (trace.ops["bytes"] >= 0).all()
    assert all(i.line is not None for i in trace.issues)
    assert trace.tasks.height == trace.tasks["task"].n_unique()
    from schedlab.dataflowdrs.diagnosis import analyse
    from schedlab.dataflowdrs.engine import diagnose_analysis
    from schedlab.dataflowdrs.policies import DIAGNOSERS

    analysis = analyse(trace)  # whatever survived parses into a DFL every diagnoser ranks
    for name in DIAGNOSERS:
        d = diagnose_analysis(analysis, name)
        assert all(b.saving > 0 for b in d.ranked)
        d.summary()


@needs_strace
def test_the_shell_running_a_script_is_a_container_not_the_critical_step(data, tmp_path):
    (data / "job.sh").write_text("cat t.txt > a.txt & cat t.txt > b.txt & wait\n"
                                 "sort a.txt b.txt > c.txt\n")
    code, output = _trace(tmp_path / "tr", "strace", "bash", "job.sh")
    assert code == 0, output
    trace = read_trace(tmp_path / "tr")
    assert trace.meta["parallelism"] >= 2  # the two cats ran side by side
    root = trace.tasks.filter((pl.col("group") == "bash") & ~pl.col("task").str.contains(
        r"\.own"))
    assert root.height == 1 and (root["end"] - root["start"]).item() == 0  # an instant
    # its own calls between its children (reading job.sh) are tasks of their own (issue 52)
    own = trace.tasks.filter(pl.col("task").str.contains(r"\.own"))["pid"].to_list()
    paths = set(trace.ops.filter(pl.col("pid").is_in(own))["path"].to_list())
    assert paths <= {str(data / "job.sh"), str(data)}
    d = diagnose(tmp_path / "tr")
    critical = d.analysis.dfl.tasks.filter(pl.col("critical"))["group"].to_list()
    assert critical[-1] == "sort"  # the last real step, not the waiting shell


def test_missing_command_and_unwritable_out_are_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["trace", "--out", "tr", "--tracer", "untraced", "--",
                                 "no-such-command-xyz"])
    assert result.exit_code == 2 and "no such command" in result.output, result.output
    assert "no I/O event" not in result.output  # not blamed on --data-dir
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = runner.invoke(app, ["trace", "--out", str(blocker / "tr"), "--tracer",
                                 "untraced", "--", "true"])
    assert result.exit_code == 2 and "field 'out'" in result.output, result.output
