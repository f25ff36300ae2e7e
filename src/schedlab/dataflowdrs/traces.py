"""Reading a trace directory: dftracer ``*.pfw`` files plus the runner's ``tasks.jsonl``.

DataFlowDrs (paper 09) analyses measurements of real runs. A trace directory holds one
JSON-lines ``.pfw`` file per traced process (dftracer's format: ``FH`` metadata lines map a file
hash to its path; POSIX events carry ``ts``/``dur`` in microseconds and ``args.ret`` bytes) and
the task events. A corrupt or truncated file is reported as a :class:`TraceIssue` naming the
file, line and field, and skipped; the rest of the trace is still analysed. ``strict=True``
raises :class:`BadInputError` instead.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from schedlab.core.errors import BadInputError
from schedlab.core.io import json_record
from schedlab.dataflowdrs.tracedata import (
    TraceData,
    TraceIssue,
    is_runtime_file,
    ops_frame,
    runtime_summary,
    tasks_frame,
)

OPEN_OPS = {"open", "open64", "openat", "openat64", "fopen", "fopen64", "creat", "creat64"}
# copy_file_range/sendfile are recorded against their input file (cp uses them)
READ_OPS = {"read", "pread", "pread64", "readv", "preadv", "copy_file_range", "sendfile",
            "sendfile64", "fread"}
WRITE_OPS = {"write", "pwrite", "pwrite64", "writev", "pwritev", "fwrite"}
CLOSE_OPS = {"close", "fclose"}
STAT_OPS = {"stat", "stat64", "lstat", "lstat64", "fstat", "fstat64", "__xstat", "__xstat64",
            "__lxstat", "__lxstat64", "__fxstat", "__fxstat64", "newfstatat", "fstatat",
            "fstatat64", "statx", "access", "faccessat", "faccessat2"}
# namespace operations: what a metadata server does besides open/stat
META_OPS = {"unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "rename", "renameat",
            "renameat2", "opendir", "getdents64", "readlink", "readlinkat", "truncate",
            "ftruncate", "fsync", "fdatasync", "chmod", "fchmod", "utime", "utimensat"}
SEEK_OPS = {"lseek", "lseek64", "fseek", "fseeko"}
_KIND = {**{o: "open" for o in OPEN_OPS}, **{o: "read" for o in READ_OPS},
         **{o: "write" for o in WRITE_OPS}, **{o: "close" for o in CLOSE_OPS},
         **{o: "stat" for o in STAT_OPS}, **{o: "meta" for o in META_OPS}}
METADATA_KINDS = ("open", "close", "stat", "meta")
TASK_FIELDS = {"task": str, "pid": int, "start": float, "end": float}
def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(
        path, encoding="utf-8")


def _args(record: dict) -> dict:
    args = record.get("args") or {}
    if not isinstance(args, dict):
        raise BadInputError("is not a JSON object", field="args")
    return args


@dataclass
class Process:
    """What a trace says about one traced process: its command, parent and working directory."""

    pid: int
    ppid: int | None = None
    command: str = ""
    cwd: str = ""
    first: float = float("inf")
    last: float = 0.0
    children: list = field(default_factory=list)  # pids it forked (strace %process)
    regions: list = field(default_factory=list)  # app annotations: (ts, end, name), dftracer

    def seen(self, ts: float, dur: float = 0.0) -> None:
        self.first = min(self.first, ts)
        self.last = max(self.last, ts + dur)


def _number(record: dict, key: str) -> float:
    value = record.get(key)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise BadInputError("missing or not a non-negative number", field=key)
    return value


_METADATA_EVENTS = frozenset({"FH", "SH", "HH", "CM", "PR", "thread_name", "process_name",
                              "start", "end"})


class _PfwState:
    """Per-file parse state: hash -> name, per-process cwd and per-descriptor offsets."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.procs: dict[int, Process] = {}
        self.cwd: dict[int, str] = {}  # pid -> cwd hash or literal path
        self.pos: dict[tuple[int, str], int] = {}
        self.rows: list[tuple] = []  # (pid, ts, dur, kind, bytes, fhash, cwd, offset, tid)

    def record(self, record: dict) -> None:
        name = record.get("name", "")
        if name in ("FH", "SH"):
            args = _args(record)
            self.names[str(args.get("value", ""))] = str(args.get("name", ""))
            return
        if name == "start" and record.get("cat") == "dftracer":
            args = _args(record)
            pid = int(_number(record, "pid"))
            proc = self.procs.setdefault(pid, Process(pid))
            ppid = args.get("ppid")
            proc.ppid = int(ppid) if isinstance(ppid, int) else None
            proc.command = str(args.get("cmd_hash") or args.get("exec_hash") or "")
            if args.get("cwd"):
                self.cwd[pid] = str(args["cwd"])
            return
        cat = record.get("cat")
        if cat not in ("POSIX", "STDIO"):
            self._region(record, cat, name)
            return
        args = _args(record)
        pid = int(_number(record, "pid"))
        ts, dur = _number(record, "ts") / 1e6, _number(record, "dur") / 1e6
        self.procs.setdefault(pid, Process(pid)).seen(ts, dur)
        fhash = str(args.get("fhash") or args.get("fname") or "")
        if name == "chdir" and fhash:
            self.cwd[pid] = fhash
            return
        kind = _KIND.get(name)
        ret = args.get("ret", 0)
        key = (pid, fhash)
        if name in SEEK_OPS:
            if isinstance(ret, int) and ret >= 0:
                self.pos[key] = ret
            return
        if kind is None:
            return
        nbytes = int(ret) if kind in ("read", "write") and isinstance(ret, int) and ret > 0 else 0
        offset = None
        if kind == "open":
            self.pos[key] = 0
        elif kind in ("read", "write"):
            given = args.get("offset")
            if isinstance(given, int) and given >= 0 and name.startswith("p"):
                offset = given
            else:
                offset = self.pos.get(key)
                if offset is not None:
                    self.pos[key] = offset + nbytes
        tid = record.get("tid")
        self.rows.append((pid, ts, dur, kind, nbytes, fhash, self.cwd.get(pid, ""), offset,
                          int(tid) if isinstance(tid, int) else pid))

    def _region(self, record: dict, cat, name) -> None:
        """An application annotation (dftracer's ``dft_fn`` regions, its AI epoch/step
        events, any category other than the I/O ones and dftracer's own metadata) that
        lasted: a phase of its process (``infer_tasks``). Malformed ones are ignored."""
        if cat in (None, "dftracer") or name in _METADATA_EVENTS or not name:
            return
        pid, ts, dur = record.get("pid"), record.get("ts"), record.get("dur")
        ok = all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
                 for v in (pid, ts, dur))
        if ok and dur > 0:
            self.procs.setdefault(int(pid), Process(int(pid))).regions.append(
                (ts / 1e6, (ts + dur) / 1e6, str(name)))

    def resolved(self) -> list[tuple]:
        """Rows with names resolved and relative paths joined to the process's cwd."""
        out = []
        for pid, ts, dur, kind, nbytes, fhash, cwd, offset, tid in self.rows:
            path = self.names.get(fhash, fhash)
            if path and not path.startswith("/") and cwd:
                base = self.names.get(cwd, cwd)
                if base.startswith("/"):
                    path = os.path.normpath(os.path.join(base, path))
            out.append((pid, ts, dur, kind, nbytes, path, offset, 1, tid))
        for proc in self.procs.values():
            proc.command = self.names.get(proc.command, proc.command)
            proc.cwd = self.names.get(self.cwd.get(proc.pid, ""), "")
        return out


def _pfw_lines(path: Path):
    with _open_text(path) as handle:
        yield from enumerate(handle, start=1)


def parse_pfw(path: str | Path, strict: bool = True) -> tuple[list[tuple], dict, TraceIssue | None]:
    """Parse one dftracer / Chrome-trace JSON-lines file.

    Returns (rows, processes, issue). Rows are (pid, ts, dur, kind, bytes, path, offset, calls,
    tid). With ``strict`` the first bad line raises :class:`BadInputError` naming file, line
    and field; otherwise bad lines are skipped, every good line is kept and ``issue`` names the
    first line that broke (a truncated file: its last line).
    """
    path = Path(path)
    state = _PfwState()
    issue: TraceIssue | None = None
    bad = 0
    lineno = 0
    try:
        for lineno, line in _pfw_lines(path):  # noqa: B007 (used on error)
            text = line.strip().rstrip(",")
            if not text or text in ("[", "]"):
                continue
            try:
                record = json.loads(text)
                if not isinstance(record, dict):
                    raise BadInputError("record is not a JSON object")
                state.record(record)
            except (BadInputError, json.JSONDecodeError, TypeError, ValueError) as exc:
                field = getattr(exc, "field", None)
                what = getattr(exc, "message", None) or "truncated or corrupt record"
                if strict:
                    raise BadInputError(what, path=path, line=lineno, field=field) from exc
                bad += 1
                if issue is None:
                    issue = TraceIssue(str(path), lineno, field, what)
    except (UnicodeDecodeError, EOFError, OSError, gzip.BadGzipFile, zlib.error) as exc:
        what = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        if isinstance(exc, EOFError | zlib.error):
            what = f"truncated compressed stream ({what})"
        if strict:
            raise BadInputError(what, path=path, line=lineno + 1) from exc
        issue = issue or TraceIssue(str(path), lineno + 1, None, what)
        bad += 1
    if issue is not None and bad > 1:
        issue = TraceIssue(issue.path, issue.line, issue.field,
                           f"{issue.message} ({bad} bad lines skipped, the rest kept)")
    elif issue is not None:
        issue = TraceIssue(issue.path, issue.line, issue.field,
                           f"{issue.message} (line skipped, the rest kept)")
    return state.resolved(), state.procs, issue


def read_pfw(path: str | Path) -> list[tuple]:
    """Parse one dftracer file into (pid, ts, dur, kind, bytes, path) rows; raises
    BadInputError naming file/line/field when malformed."""
    rows, _, _ = parse_pfw(path, strict=True)
    return [r[:6] for r in rows]


_STRACE = re.compile(r"^(?P<ts>\d+\.\d+) (?P<call>\w+)\((?P<args>.*)\)\s+= "
                     r"(?P<ret>-?\d+)(?P<rpath><[^>]*>)?(?P<rest>.*?) <(?P<dur>\d+\.\d+)>$")
_STRACE_START = re.compile(r"^\d+\.\d+ \w+\(")
_COMPLETE = re.compile(r"\)\s+= (?:\?|-?\d+|0x[0-9a-f]+)")
_FD_PATH = re.compile(r"^(?P<fd>\d+)<(?P<path>[^>]*)>")
_DIRFD = re.compile(r'^(?:AT_FDCWD|\d+)<(?P<dir>[^>]*)>, "(?P<name>(?:[^"\\]|\\.)*)"')
_FIRST_STR = re.compile(r'^"(?P<name>(?:[^"\\]|\\.)*)"')
_LAST_NUM = re.compile(r", (?P<off>\d+)$")
_SYSTEM = ("/proc", "/sys", "/dev/", "/usr/", "/lib", "/etc/", "/bin/", "/sbin/", "/run/")


def _strace_path(call: str, args: str, kind: str, rpath: str | None, cwd: str) -> str:
    """The absolute path a call is about: the descriptor strace -y decoded, else the name
    argument joined to its directory descriptor or the process's working directory."""
    if kind == "open" and rpath:
        return rpath[1:-1]
    fd = _FD_PATH.match(args)
    if fd and not args[fd.end():].startswith(', "') or (fd and kind in ("read", "write")):
        return fd["path"]
    named = _DIRFD.match(args)
    if named:
        name = named["name"]
        if not name:
            return named["dir"]
        return name if name.startswith("/") else os.path.normpath(
            os.path.join(named["dir"], name))
    first = _FIRST_STR.match(args)
    if first:
        name = first["name"]
        if name.startswith("/"):
            return name
        return os.path.normpath(os.path.join(cwd, name)) if cwd else name
    return fd["path"] if fd else ""


def read_strace(path: str | Path, pid: int | None = None,
                roots: tuple[str, ...] = ()) -> list[tuple]:
    """Parse one ``strace -ttt -T -y`` output file into I/O calls.

    Rows are (pid, ts, dur, kind, bytes, path, offset). Every path is traced and filtered
    here: only files under ``roots`` are kept (all non-system files when none are given);
    relative names are resolved against the directory descriptor strace decoded
    (``AT_FDCWD</cwd>``) or the last working directory seen. Failed calls are dropped; a call
    line cut short is reported as a truncated record.
    """
    rows, _, issue = parse_strace(path, pid, roots, strict=True)
    return rows


def parse_strace(path: str | Path, pid: int | None = None, roots: tuple[str, ...] = (),
                 strict: bool = True) -> tuple[list[tuple], Process, TraceIssue | None]:
    """read_strace's parser; without ``strict`` a bad line is skipped and reported."""
    path = Path(path)
    if pid is None:
        suffix = path.name.rsplit(".", 1)[-1]
        pid = int(suffix) if suffix.isdigit() else 0
    proc = Process(pid)
    rows: list[tuple] = []
    cwd = ""
    pos: dict[str, int] = {}
    issue = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, start=1):
            line = line.rstrip("\n")
            match = _STRACE.match(line)
            if match is None:
                if (_STRACE_START.match(line) and "<unfinished" not in line
                        and not _COMPLETE.search(line)):  # e.g. exit_group(0) = ?
                    if strict:
                        raise BadInputError("truncated or corrupt strace record", path=path,
                                            line=lineno)
                    issue = issue or TraceIssue(str(path), lineno, None,
                                                "truncated or corrupt strace record "
                                                "(line skipped, the rest kept)")
                continue  # signals, exits, resumed halves
            call, args = match["call"], match["args"]
            ts, dur = float(match["ts"]), float(match["dur"])
            proc.seen(ts, dur)
            at = re.search(r"AT_FDCWD<([^>]*)>", args)
            if at:
                cwd = at.group(1)
            ret = int(match["ret"])
            if call in ("clone", "clone3", "fork", "vfork") and ret > 0:
                proc.children.append(ret)
                continue
            if call == "execve" and ret == 0:
                first = _FIRST_STR.match(args)
                proc.command = first["name"] if first else proc.command
                continue
            if call in ("chdir", "fchdir") and ret == 0:
                target = _strace_path(call, args, "meta", None, cwd)
                cwd = target or cwd
                continue
            if call in ("dup", "dup2", "dup3") and ret >= 0:  # the copy shares the offset
                fd = _FD_PATH.match(args)
                if fd:
                    pos[str(ret)] = pos.get(fd["fd"], 0)
                continue
            if call in SEEK_OPS and ret >= 0:
                fd = _FD_PATH.match(args)
                if fd:
                    pos[fd["fd"]] = ret
                continue
            kind = _KIND.get(call)
            if kind is None or ret < 0:
                continue
            where = _strace_path(call, args, kind, match["rpath"], cwd)
            if kind == "open" and match["rpath"]:
                pos[str(ret)] = 0
            nbytes = ret if kind in ("read", "write") else 0
            offset = None
            if kind in ("read", "write"):
                fd = _FD_PATH.match(args)
                if call.startswith("p") and (last := _LAST_NUM.search(args)):
                    offset = int(last["off"])
                elif fd and fd["fd"] in pos:
                    offset = pos[fd["fd"]]
                    pos[fd["fd"]] = offset + nbytes
            if not where or not _wanted(where, roots):
                continue
            rows.append((pid, ts, dur, kind, nbytes, where, offset))
    proc.cwd = cwd
    return rows, proc, issue


def _wanted(path: str, roots: tuple[str, ...]) -> bool:
    if roots:
        return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)
    return path.startswith("/") and not path.startswith(_SYSTEM) and "site-packages" not in path


def _task_record(line: str, lineno: int) -> dict | None:
    if not line.strip():
        return None
    record = json_record(line, lineno)
    for key, kind in TASK_FIELDS.items():
        value = record.get(key)
        ok = isinstance(value, str) if kind is str else (
            isinstance(value, int | float) and not isinstance(value, bool))
        if not ok:
            raise BadInputError(f"missing or not a {kind.__name__}", field=key)
    if record["end"] < record["start"]:
        raise BadInputError("task ends before it starts", field="end")
    record.setdefault("group", record["task"])
    record.setdefault("ready", record["start"])
    return record


def read_tasks(path: Path, issues: list[TraceIssue], strict: bool) -> list[dict]:
    """Task events; a bad line is reported and skipped (or raised when ``strict``)."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, start=1):
            try:
                record = _task_record(line, lineno)
            except BadInputError as exc:
                if strict:
                    raise BadInputError(exc.message, path=path, line=lineno,
                                        field=exc.field) from exc
                issues.append(TraceIssue(str(path), lineno, exc.field, exc.message))
                continue
            if record is not None:
                records.append(record)
    return records


def _roots(meta: dict) -> tuple[str, ...]:
    return tuple(str(t.get("root")) for t in (meta.get("tiers") or {}).values()
                 if isinstance(t, dict) and t.get("root"))


def read_trace(directory: str | Path, strict: bool = False) -> TraceData:
    """Read a trace: a directory written by ``schedlab dataflowdrs trace`` or the runner, a
    folder of bare dftracer / Chrome-trace ``*.pfw[.gz]`` or ``strace-*`` files (tasks are
    then inferred per process, or per thread where a process has several doing I/O), or
    Darshan logs (a ``.darshan`` file or a folder of them; needs PyDarshan)."""
    directory = Path(directory)
    darshan_logs = ([directory] if directory.is_file() and directory.suffix == ".darshan"
                    else sorted(directory.glob("*.darshan")) if directory.is_dir() else [])
    if darshan_logs and not (directory.is_dir() and [*directory.glob("*.pfw*")]):
        from schedlab.dataflowdrs.darshan import read_darshan_logs

        return read_darshan_logs(darshan_logs, strict=strict)
    if not directory.is_dir():
        raise BadInputError("is not a trace directory or a .darshan log", path=directory)
    issues: list[TraceIssue] = []
    rows: list[tuple] = []
    procs: dict[int, Process] = {}
    tasks_path = directory / "tasks.jsonl"
    records = read_tasks(tasks_path, issues, strict) if tasks_path.is_file() else []
    meta = _read_meta(directory / "meta.json", issues, strict)
    roots = _roots(meta)
    files = sorted([*directory.glob("*.pfw"), *directory.glob("*.pfw.gz")])
    cwd = str(meta.get("cwd") or "")
    for pfw in files:
        found, seen, issue = parse_pfw(pfw, strict=strict)
        if cwd:  # forked children (no start record of their own) inherit the command's cwd
            found = [(*r[:5], os.path.normpath(os.path.join(cwd, r[5])), *r[6:])
                     if r[5] and not r[5].startswith("/") else r for r in found]
        rows.extend(r for r in found if _wanted(r[5], roots))
        procs.update(seen)
        if issue is not None:
            issues.append(issue)
    straces = sorted(directory.glob("strace-*"))
    infer = not records or (len(records) == 1 and int(records[0]["pid"]) < 0)
    rows.extend(_read_straces(straces, [] if infer else records, roots, issues, strict, procs))
    if not files and not straces and not records:
        raise BadInputError("holds no *.pfw trace files and no readable tasks.jsonl records",
                            path=directory)
    for proc in list(procs.values()):  # strace: each fork/clone names a child's parent
        for child in proc.children:
            if child in procs and procs[child].ppid is None:
                procs[child].ppid = proc.pid
    runtime = [r for r in rows if is_runtime_file(r[5])]
    if runtime:  # MPI shm, /proc, /dev ...: not the workflow's storage I/O (tracedata.py)
        rows = [r for r in rows if not is_runtime_file(r[5])]
        meta = {**meta, "runtime_files": runtime_summary([r[5] for r in runtime],
                                                         sum(r[2] for r in runtime))}
    if infer and procs:
        argv0 = (meta.get("command") or [None])[0]
        inferred, rows = infer_tasks(rows, procs, records[0]["task"] if records else None,
                                     argv0)
        if inferred:
            records = inferred
            meta = {**meta, "tasks_inferred": "per process",
                    "parallelism": max(int(meta.get("parallelism") or 1),
                                       peak_concurrency(inferred))}
            meta.pop("makespan", None)
            meta.pop("t0", None)
    ops = ops_frame([r[:8] for r in rows])
    return TraceData(ops=ops, tasks=tasks_frame(records), meta=meta, issues=issues,
                     directory=directory)


def infer_tasks(rows: list[tuple], procs: dict[int, Process], command: str | None = None,
                argv0: str | None = None) -> tuple[list[dict], list[tuple]]:
    """One task per traced process that did I/O on kept files (per thread where a process
    has two or more threads doing data I/O); returns the task records and the rows, whose
    pid is the thread id for threads made tasks of their own (Linux thread ids are unique
    system-wide, like process ids)."""
    threads: dict[int, set[int]] = {}
    for r in rows:
        if len(r) > 8 and r[3] in ("read", "write"):
            threads.setdefault(r[0], set()).add(r[8])
    split = {pid for pid, tids in threads.items() if len(tids) >= 2}
    out_rows = [(r[8], *r[1:]) if len(r) > 8 and r[0] in split else r for r in rows]
    span: dict[int, list[float]] = {}
    owner: dict[int, int] = {}
    for r in out_rows:
        entry = span.setdefault(r[0], [r[1], r[1] + r[2]])
        entry[0], entry[1] = min(entry[0], r[1]), max(entry[1], r[1] + r[2])
    for r in rows:
        if len(r) > 8 and r[0] in split:
            owner[r[8]] = r[0]
    records = []
    for key, (first, last) in sorted(span.items(), key=lambda kv: kv[1][0]):
        pid = owner.get(key, key)
        proc = procs.get(pid) or Process(pid)
        name = PurePath(proc.command.split(";")[0]).name or "process"
        task = f"{name}-{pid}" + (f".{key}" if key != pid else "")
        start = min(first, proc.first) if key == pid else first
        end = max(last, proc.last) if key == pid else last
        records.append(dict(task=task, group=name, pid=key, ready=start, start=start, end=end,
                            ppid=proc.ppid))
    parents = {r["ppid"] for r in records if r.get("ppid") is not None}
    records, out_rows = _phases(records, out_rows, procs)
    # a process that waits on traced children (a shell running a pipeline or script) is a
    # container, not a step: it lives across the whole run, so it would always be the last
    # to finish. Its own I/O outside its children's lifetimes became tasks of their own
    # (``_phases``); what is left becomes an instant at its first call.
    for r in records:
        if r["pid"] in parents and r["pid"] in procs and not r.get("phase"):
            r["end"] = r["start"]
            r["container"] = True
    pids = {r["pid"] for r in records}
    exe = PurePath(str(argv0)).name if argv0 else None
    roots = [r for r in records if r["ppid"] not in pids and r["pid"] in procs
             and (exe is None or r["group"] == exe or r["group"] == "process")]
    if command and roots:  # the traced command itself keeps the name it was given
        roots[0]["task"] = roots[0]["group"] = command
    return records, out_rows


_PHASE_PID = 1 << 40  # synthetic ids of phase tasks: above any Linux pid or thread id
MIN_OWN_CALLS = 64  # a container's own stretch is a task from this many data calls ...
MIN_OWN_BYTES = 1 << 20  # ... or this many bytes


def _top_level(regions: list[tuple]) -> list[tuple]:
    """Annotation regions not inside another one (epochs, not their steps), by start."""
    out: list[tuple] = []
    for reg in sorted(regions, key=lambda g: (g[0], -g[1])):
        if out and reg[0] >= out[-1][0] and reg[1] <= out[-1][1]:
            continue  # nested in the previous top-level region
        out.append(reg)
    return out


def _phases(records: list[dict], rows: list[tuple],
            procs: dict[int, Process]) -> tuple[list[dict], list[tuple]]:
    """Split processes into phases, so no process's own I/O disappears into a container.

    * a process with app annotations (dftracer regions, epochs, steps): each top-level
      region that holds I/O calls is a task (``<region>-<pid>``, group = the region's name);
    * a process that waits on traced children: its calls outside the children's lifetimes,
      one task per stretch between them (``<exe>-<pid>.own<k>``), e.g. a multiprocessing
      parent reading its data before starting the pool and reducing after it.
    The calls move to synthetic ids (``_PHASE_PID`` + ...); the rest stay with the process.
    """
    import bisect

    children: dict[int, list[tuple[float, float]]] = {}
    for r in records:
        if r.get("ppid") is not None:
            children.setdefault(r["ppid"], []).append((r["start"], r["end"]))
    assign: dict[tuple[int, int], tuple[int, str, str]] = {}  # (pid, row) -> phase
    by_pid: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        by_pid.setdefault(row[0], []).append(i)
    made: dict[int, dict] = {}
    for r in records:
        pid = r["pid"]
        proc = procs.get(pid)
        if proc is None or pid not in by_pid:
            continue
        regions = _top_level(proc.regions)
        starts = [g[0] for g in regions]
        lives = _union(children.get(pid, []))
        ends = [e for _, e in lives]
        names: dict[str, int] = {}
        for i in by_pid[pid]:
            ts = rows[i][1]
            k = bisect.bisect_right(starts, ts) - 1
            if k >= 0 and ts <= regions[k][1]:
                key = ("region", k)
                label, group = regions[k][2], regions[k][2]
            elif lives:
                j = bisect.bisect_right(ends, ts)
                if j < len(lives) and lives[j][0] <= ts:
                    continue  # during a child's life: stays with the container
                key = ("own", j)
                label, group = None, r["group"]
            else:
                continue
            phase = made.get((pid, key))
            if phase is None:
                n = names[label or ""] = names.get(label or "", 0) + 1
                task = (f"{label}-{pid}" + (f".{n}" if n > 1 else "") if label
                        else f"{r['task']}.own{n}")
                phase = made[(pid, key)] = dict(
                    task=task, group=group, pid=_PHASE_PID + len(made) + 1, ppid=pid,
                    ready=float("inf"), start=float("inf"), end=0.0, phase=True)
            phase["start"] = phase["ready"] = min(phase["start"], ts)
            phase["end"] = max(phase["end"], ts + rows[i][2])
            if rows[i][3] in ("read", "write") and rows[i][4] > 0:
                phase["_calls"] = phase.get("_calls", 0) + 1
                phase["_bytes"] = phase.get("_bytes", 0) + rows[i][4]
            assign[(pid, i)] = phase["pid"]
    # a shell reading the next lines of its script between commands is not a step: a
    # container's own stretch is a task only when it moved real data
    small = {p["pid"] for (_, key), p in made.items() if key[0] == "own"
             and p.get("_calls", 0) < MIN_OWN_CALLS and p.get("_bytes", 0) < MIN_OWN_BYTES}
    made = {k: p for k, p in made.items() if p["pid"] not in small}
    assign = {k: v for k, v in assign.items() if v not in small}
    for p in made.values():
        p.pop("_calls", None)
        p.pop("_bytes", None)
    if not made:
        return records, rows
    moved = {i: new for (_, i), new in assign.items()}
    rows = [(moved[i], *row[1:]) if i in moved else row for i, row in enumerate(rows)]
    left = {row[0] for row in rows}
    keep = [r for r in records if r["pid"] in left or r["pid"] in children]
    return sorted(keep + list(made.values()), key=lambda r: r["start"]), rows


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def peak_concurrency(records: list[dict]) -> int:
    """Most inferred steps (containers excluded) running at once: the parallelism the
    traced workflow itself used."""
    events = sorted([(r["start"], 1) for r in records if not r.get("container")]
                    + [(r["end"], -1) for r in records if not r.get("container")],
                    key=lambda e: (e[0], e[1]))
    peak = running = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return max(1, peak)


def _read_straces(files: list[Path], records: list[dict], roots: tuple[str, ...],
                  issues: list[TraceIssue], strict: bool,
                  procs: dict[int, Process]) -> list[tuple]:
    """strace-<task>.<pid> files; with task records, calls go to the task the file name
    gives, else to the process (pid from the file name)."""
    pid_of = {r["task"]: int(r["pid"]) for r in records}
    rows: list[tuple] = []
    for path in files:
        task = path.name[len("strace-"):].rsplit(".", 1)[0]
        try:
            found, proc, issue = parse_strace(path, pid_of.get(task), roots, strict)
        except (BadInputError, ValueError) as exc:
            if strict:
                raise
            line = getattr(exc, "line", None)
            issues.append(TraceIssue(str(path), line, None, getattr(exc, "message", str(exc))))
            continue
        procs[proc.pid] = proc
        rows.extend(found)
        if issue is not None:
            issues.append(issue)
    return rows


def _read_meta(path: Path, issues: list[TraceIssue], strict: bool) -> dict:
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        return meta
    except (ValueError, UnicodeDecodeError) as exc:
        if strict:
            raise BadInputError(f"corrupt run metadata: {exc}", path=path) from exc
        issues.append(TraceIssue(str(path), None, None, f"corrupt run metadata: {exc}"))
        return {}
