"""Trace readers: dftracer .pfw files, tasks.jsonl, meta.json; corrupt input never crashes."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.dataflowdrs import WorkflowConfig, build, make_layout, read_pfw, read_trace
from schedlab.dataflowdrs.synthetic import simulate_trace, write_trace

FH = ('{"name":"FH","cat":"dftracer","type":1,"pid":7,"tid":7,"ph":4,'
      '"args":{"hhash":"h","name":"/data/a.bin","value":"f1"}}')
READ = ('{"id":3,"name":"read","cat":"POSIX","type":3,"pid":7,"tid":7,"ts":1000000,'
        '"dur":250,"ph":1,"args":{"hhash":"h","ret":4096,"count":4096,"fhash":"f1"}}')
OPEN = ('{"id":2,"name":"open64","cat":"POSIX","type":3,"pid":7,"tid":7,"ts":999000,'
        '"dur":10,"ph":1,"args":{"flags":0,"fhash":"f1"}}')


def test_read_pfw_parses_dftracer_records(tmp_path):
    path = tmp_path / "trace-1-preload.pfw"
    path.write_text("\n".join([FH, OPEN, READ, '{"name":"end","cat":"dftracer","pid":7}']))
    rows = read_pfw(path)
    assert rows == [(7, 0.999, 1e-05, "open", 0, "/data/a.bin"),
                    (7, 1.0, 0.00025, "read", 4096, "/data/a.bin")]


def test_read_pfw_reads_gzip_and_json_array_framing(tmp_path):
    path = tmp_path / "trace-2.pfw.gz"
    with gzip.open(path, "wt") as handle:
        handle.write("[\n" + FH + ",\n" + READ + ",\n]\n")
    assert read_pfw(path)[0][3:] == ("read", 4096, "/data/a.bin")


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dfd-traces")
    layout = make_layout(root / "tiers", create=False)
    trace = simulate_trace(build(WorkflowConfig(workflow="mapreduce", scale=3), layout),
                           layout, 2)
    return write_trace(trace, root / "trace")


def test_written_trace_round_trips(trace_dir):
    trace = read_trace(trace_dir, strict=True)
    assert trace.tasks.height == 3 + 2 + 1
    assert trace.issues == []
    written = trace.ops.filter(trace.ops["op"] == "write")["bytes"].sum()
    layout = make_layout(trace_dir.parent / "tiers", create=False)
    workflow = build(WorkflowConfig(workflow="mapreduce", scale=3), layout)
    assert written == sum(s for t in workflow.tasks for _, s in t.outputs)


def _copy(trace_dir: Path, target: Path) -> Path:
    target.mkdir()
    for f in trace_dir.iterdir():
        (target / f.name).write_bytes(f.read_bytes())
    return target


def test_truncated_file_keeps_its_good_lines_and_reports_the_break(trace_dir, tmp_path):
    copy = _copy(trace_dir, tmp_path / "t")
    victim = sorted(copy.glob("*.pfw"))[0]
    text = victim.read_text()
    cut = text[: len(text) // 2 + 7]  # cut mid-record
    victim.write_text(cut)
    full = read_trace(trace_dir)
    trace = read_trace(copy)
    assert len(trace.issues) == 1
    issue = trace.issues[0]
    assert issue.path == str(victim) and issue.line == cut.count("\n") + 1  # the cut line
    assert "truncated" in issue.message
    assert 0 < trace.ops.height < full.ops.height
    kept = trace.ops.filter(trace.ops["pid"] == int(victim.name.split("-")[1])).height
    whole = full.ops.filter(full.ops["pid"] == int(victim.name.split("-")[1])).height
    assert 0 < kept < whole  # the good lines of the cut file are kept
    with pytest.raises(BadInputError) as info:
        read_trace(copy, strict=True)
    assert str(victim) in str(info.value) and f":{issue.line}" in str(info.value)


def test_bad_task_line_names_line_and_field(trace_dir, tmp_path):
    copy = _copy(trace_dir, tmp_path / "t")
    lines = (copy / "tasks.jsonl").read_text().splitlines()
    record = json.loads(lines[1])
    record["start"] = "soon"
    lines[1] = json.dumps(record)
    (copy / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    trace = read_trace(copy)
    assert [(i.line, i.field) for i in trace.issues] == [(2, "start")]
    assert trace.tasks.height == len(lines) - 1
    with pytest.raises(BadInputError, match="tasks.jsonl:2: field 'start'"):
        read_trace(copy, strict=True)


def test_corrupt_meta_and_empty_directory(trace_dir, tmp_path):
    copy = _copy(trace_dir, tmp_path / "t")
    (copy / "meta.json").write_text("{not json")
    assert "meta" in str(read_trace(copy).issues[0])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BadInputError, match="no \\*.pfw"):
        read_trace(empty)
    with pytest.raises(BadInputError, match="not a trace directory"):
        read_trace(tmp_path / "missing")


LINE = st.one_of(
    st.text(max_size=80),
    st.binary(max_size=40).map(lambda b: b.decode("latin-1")),
    st.dictionaries(st.sampled_from(["name", "cat", "pid", "ts", "dur", "args"]),
                    st.one_of(st.none(), st.integers(-5, 10**6), st.text(max_size=5),
                              st.sampled_from(["read", "write", "POSIX", "FH"]),
                              st.dictionaries(st.sampled_from(["ret", "fhash", "name", "value"]),
                                              st.one_of(st.integers(), st.text(max_size=4)),
                                              max_size=3)),
                    max_size=6).map(json.dumps),
)


@given(st.lists(LINE, min_size=1, max_size=8))
def test_fuzzed_pfw_either_parses_or_names_the_file(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("fuzz") / "trace-9.pfw"
    path.write_text("\n".join([FH, READ, *lines]), encoding="utf-8", errors="replace")
    try:
        rows = read_pfw(path)
    except BadInputError as exc:
        assert exc.path == path
        assert exc.line is not None and 1 <= exc.line <= len(lines) + 2
    else:
        assert all(r[2] >= 0 and r[4] >= 0 for r in rows)


@given(st.lists(LINE, min_size=1, max_size=6))
def test_fuzzed_tasks_file_never_raises_anything_else(tmp_path_factory, lines):
    directory = tmp_path_factory.mktemp("fuzzt")
    (directory / "tasks.jsonl").write_text("\n".join(lines), encoding="utf-8",
                                           errors="replace")
    try:
        trace = read_trace(directory)
    except BadInputError as exc:
        assert "tasks.jsonl" in str(exc) or "no *.pfw" in str(exc)
    else:
        assert all(i.line is not None for i in trace.issues)


STRACE = """\
1795990836.259466 openat(AT_FDCWD</tmp>, "/data/a", O_RDONLY|O_CLOEXEC) = 3</data/a> <0.000013>
1795990836.259615 read(3</data/a>, "hello\\n", 7) = 6 <0.000011>
1795990836.259700 openat(AT_FDCWD</tmp>, "/data/zz", O_RDONLY) = -1 ENOENT (No such file) <0.000004>
1795990836.259731 read(3</data/a>, "", 1) = 0 <0.000008>
1795990836.259787 close(3</data/a>)   = 0 <0.000009>
1795990836.259800 read(4</usr/lib/x.so>, "\\177ELF", 832) = 832 <0.000002>
1795990836.260117 write(5</data/b>, "hello\\nhello\\nhe"..., 6000) = 6000 <0.000029>
--- SIGCHLD {si_signo=SIGCHLD} ---
+++ exited with 0 +++
"""


def test_read_strace_keeps_data_calls_with_bytes(tmp_path):
    from schedlab.dataflowdrs.traces import read_strace

    path = tmp_path / "strace-job.4242"
    path.write_text(STRACE)
    rows = read_strace(path)
    assert [(r[0], r[3], r[4], r[5]) for r in rows] == [
        (4242, "open", 0, "/data/a"), (4242, "read", 6, "/data/a"), (4242, "read", 0, "/data/a"),
        (4242, "close", 0, "/data/a"), (4242, "write", 6000, "/data/b")]
    assert read_strace(path, pid=7, roots=("/data/b",))[0][0] == 7
    assert len(read_strace(path, roots=("/data/b",))) == 1


def test_truncated_strace_file_keeps_its_good_lines_and_names_the_break(tmp_path):
    (tmp_path / "strace-job.1").write_text(STRACE + '1795990836.3 read(3</data/a>, "he')
    (tmp_path / "strace-other.2").write_text(STRACE)
    trace = read_trace(tmp_path)
    assert [(i.line, "truncated" in i.message) for i in trace.issues] == [(10, True)]
    assert trace.ops.height == 10  # both files' five good calls


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=60),
                max_size=8))
def test_fuzzed_strace_never_raises_anything_else(tmp_path_factory, lines):
    from schedlab.dataflowdrs.traces import read_strace

    path = tmp_path_factory.mktemp("fuzzs") / "strace-x.9"
    path.write_text("\n".join(["1795990836.1 read(3</d/a>, ", *lines]), encoding="utf-8")
    try:
        rows = read_strace(path)
    except BadInputError as exc:
        assert exc.path == path and exc.line is not None
    else:
        assert all(r[2] >= 0 and r[4] >= 0 for r in rows)


STRACE_OFFSETS = """\
1.000001 openat(AT_FDCWD</w>, "in.bin", O_RDONLY) = 3</w/in.bin> <0.000010>
1.000002 dup2(3</w/in.bin>, 0) = 0</w/in.bin> <0.000001>
1.000003 read(0</w/in.bin>, ""..., 512) = 512 <0.000002>
1.000004 read(0</w/in.bin>, ""..., 512) = 512 <0.000002>
1.000005 lseek(3</w/in.bin>, 4096, SEEK_SET) = 4096 <0.000001>
1.000006 read(3</w/in.bin>, ""..., 100) = 100 <0.000002>
1.000007 pread64(3</w/in.bin>, ""..., 10, 8192) = 10 <0.000002>
1.000008 newfstatat(AT_FDCWD</w>, "sub/x.txt", {st_mode=S_IFREG}, 0) = 0 <0.000003>
1.000009 chdir("/w/sub") = 0 <0.000003>
1.000010 unlink("x.txt") = 0 <0.000004>
"""


def test_strace_offsets_follow_dup2_lseek_pread_and_relative_names_the_cwd(tmp_path):
    from schedlab.dataflowdrs.traces import read_strace

    path = tmp_path / "strace-x.5"
    path.write_text(STRACE_OFFSETS)
    rows = read_strace(path, roots=("/w",))
    data = [(r[3], r[4], r[6]) for r in rows if r[3] == "read"]
    assert data == [("read", 512, 0), ("read", 512, 512), ("read", 100, 4096),
                    ("read", 10, 8192)]
    assert [(r[3], r[5]) for r in rows if r[3] in ("stat", "meta")] == [
        ("stat", "/w/sub/x.txt"), ("meta", "/w/sub/x.txt")]


_NAME = st.sampled_from(["a", "b.txt", "../w/c", "sub/d", "/w/e", "/usr/lib/x.so", ""])
_FD = st.integers(0, 6)
_CALL = st.one_of(
    st.builds(lambda n, r: f'openat(AT_FDCWD</w>, "{n}", O_RDONLY) = {r}</w/{n}>', _NAME, _FD),
    st.builds(lambda f, n, r: f'read({f}</w/{n}>, "", 9) = {r}', _FD, _NAME,
              st.integers(-1, 9)),
    st.builds(lambda f, n, r: f'pwrite64({f}</w/{n}>, "", 9, {r}) = 9', _FD, _NAME,
              st.integers(0, 10**6)),
    st.builds(lambda f, t: f"dup2({f}</w/a>, {t}) = {t}</w/a>", _FD, _FD),
    st.builds(lambda f, o: f"lseek({f}</w/a>, {o}, SEEK_SET) = {o}", _FD, st.integers(0, 99)),
    st.builds(lambda n: f'newfstatat(AT_FDCWD</w>, "{n}", {{}}, 0) = 0', _NAME),
    st.builds(lambda n: f'unlink("{n}") = 0', _NAME),
    st.builds(lambda n: f'chdir("{n}") = 0', _NAME),
    st.text(max_size=20),
)


@given(st.lists(_CALL, max_size=12))
def test_fuzzed_structured_strace_keeps_only_absolute_paths_under_the_roots(
        tmp_path_factory, calls):
    from schedlab.dataflowdrs.traces import parse_strace

    path = tmp_path_factory.mktemp("fuzzst") / "strace-t.3"
    path.write_text("".join(f"1.{i:06d} {c} <0.000001>\n" for i, c in enumerate(calls)),
                    encoding="utf-8")
    rows, _, _ = parse_strace(path, roots=("/w",), strict=False)
    for r in rows:
        assert r[5] == "/w" or r[5].startswith("/w/"), r
        assert r[6] is None or r[6] >= 0
        assert r[2] >= 0 and r[4] >= 0
