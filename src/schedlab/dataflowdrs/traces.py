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
import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.core.io import json_record

OPEN_OPS = {"open", "open64", "openat", "openat64", "fopen", "fopen64", "creat", "creat64"}
# copy_file_range/sendfile are recorded against their input file (cp uses them)
READ_OPS = {"read", "pread", "pread64", "readv", "preadv", "copy_file_range", "sendfile",
            "sendfile64"}
WRITE_OPS = {"write", "pwrite", "pwrite64", "writev", "pwritev"}
CLOSE_OPS = {"close", "fclose"}
_KIND = {**{o: "open" for o in OPEN_OPS}, **{o: "read" for o in READ_OPS},
         **{o: "write" for o in WRITE_OPS}, **{o: "close" for o in CLOSE_OPS}}
TASK_FIELDS = {"task": str, "pid": int, "start": float, "end": float}
OPS_SCHEMA = {"pid": pl.Int64, "ts": pl.Float64, "dur": pl.Float64, "op": pl.String,
              "bytes": pl.Int64, "path": pl.String}


@dataclass(frozen=True)
class TraceIssue:
    """A problem found in one trace file; the file (or line) was skipped."""

    path: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.path + (f":{self.line}" if self.line else "")
        return f"{where}: " + (f"field '{self.field}': " if self.field else "") + self.message


@dataclass
class TraceData:
    """Everything one run's trace says: I/O calls, task events, run metadata, issues."""

    ops: pl.DataFrame
    tasks: pl.DataFrame
    meta: dict
    issues: list[TraceIssue] = field(default_factory=list)
    directory: Path | None = None


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(
        path, encoding="utf-8")


def _args(record: dict) -> dict:
    args = record.get("args") or {}
    if not isinstance(args, dict):
        raise BadInputError("is not a JSON object", field="args")
    return args


def _event(record: dict, names: dict[str, str]) -> tuple | None:
    """One I/O call as (pid, ts_s, dur_s, kind, bytes, path), or None for other records."""
    kind = _KIND.get(record.get("name", ""))
    if kind is None or record.get("cat") not in ("POSIX", "STDIO"):
        return None
    args = _args(record)
    for key in ("pid", "ts", "dur"):
        if not isinstance(record.get(key), int | float) or record[key] < 0:
            raise BadInputError("missing or not a non-negative number", field=key)
    fhash = str(args.get("fhash") or args.get("fname") or "")
    path = names.get(fhash, fhash)
    ret = args.get("ret", 0)
    nbytes = int(ret) if kind in ("read", "write") and isinstance(ret, int) and ret > 0 else 0
    return (int(record["pid"]), record["ts"] / 1e6, record["dur"] / 1e6, kind, nbytes, path)


def read_pfw(path: str | Path) -> list[tuple]:
    """Parse one dftracer file; raises BadInputError naming file/line/field when malformed."""
    path = Path(path)
    names: dict[str, str] = {}
    rows: list[tuple] = []
    lineno = 0
    try:
        with _open_text(path) as handle:
            for lineno, line in enumerate(handle, start=1):  # noqa: B007 (used on error)
                text = line.strip().rstrip(",")
                if not text or text in ("[", "]"):
                    continue
                record = json.loads(text)
                if not isinstance(record, dict):
                    raise BadInputError("record is not a JSON object")
                if record.get("name") == "FH":
                    args = _args(record)
                    names[str(args.get("value", ""))] = str(args.get("name", ""))
                    continue
                event = _event(record, names)
                if event is not None:
                    rows.append(event)
    except BadInputError as exc:
        raise BadInputError(exc.message, path=path, line=lineno, field=exc.field) from exc
    except (json.JSONDecodeError, UnicodeDecodeError, EOFError, OSError, TypeError,
            ValueError) as exc:
        what = "truncated or corrupt record" if isinstance(exc, json.JSONDecodeError) else str(
            exc).splitlines()[0][:120] or type(exc).__name__
        raise BadInputError(what, path=path, line=lineno or None) from exc
    return [(p, ts, d, k, b, names.get(f, f)) for p, ts, d, k, b, f in rows]


_STRACE = re.compile(r"^(?P<ts>\d+\.\d+) (?P<call>\w+)\((?P<args>.*)\)\s+= "
                     r"(?P<ret>-?\d+)(?P<rpath><[^>]*>)?(?P<rest>.*?) <(?P<dur>\d+\.\d+)>$")
_STRACE_START = re.compile(r"^\d+\.\d+ \w+\(")
_FD_PATH = re.compile(r"^\d+<(?P<path>[^>]*)>")
_SYSTEM = ("/proc", "/sys", "/dev/", "/usr/", "/lib", "/etc/", "/bin/", "/sbin/")


def read_strace(path: str | Path, pid: int | None = None,
                roots: tuple[str, ...] = ()) -> list[tuple]:
    """Parse one ``strace -ttt -T -y`` output file into I/O calls (same rows as read_pfw).

    Only files under ``roots`` are kept (all non-system files when none are given); calls
    that failed are dropped; a call line cut short is reported as a truncated record.
    """
    path = Path(path)
    if pid is None:
        suffix = path.name.rsplit(".", 1)[-1]
        pid = int(suffix) if suffix.isdigit() else 0
    rows: list[tuple] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, start=1):
            line = line.rstrip("\n")
            match = _STRACE.match(line)
            if match is None:
                if _STRACE_START.match(line) and "<unfinished" not in line:
                    raise BadInputError("truncated or corrupt strace record", path=path,
                                        line=lineno)
                continue  # signals, exits, resumed halves
            kind = _KIND.get(match["call"])
            ret = int(match["ret"])
            if kind is None or ret < 0:
                continue
            where = (match["rpath"] or "<>")[1:-1] if kind == "open" else (
                _FD_PATH.match(match["args"]) or {"path": ""})["path"]
            if not where or not _wanted(where, roots):
                continue
            nbytes = ret if kind in ("read", "write") else 0
            rows.append((pid, float(match["ts"]), float(match["dur"]), kind, nbytes, where))
    return rows


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


def _cpu(record: dict) -> float | None:
    """The task's measured CPU seconds (runner: wait4), or None when not recorded."""
    value = record.get("cpu")
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


def _tasks_frame(records: list[dict]) -> pl.DataFrame:
    cols = dict(task=[r["task"] for r in records], group=[str(r["group"]) for r in records],
                pid=[int(r["pid"]) for r in records],
                ready=[float(r["ready"]) for r in records],
                start=[float(r["start"]) for r in records],
                end=[float(r["end"]) for r in records],
                cpu=[_cpu(r) for r in records],
                inputs=[list(r.get("inputs", [])) for r in records],
                outputs=[list(r.get("outputs", [])) for r in records])
    return pl.DataFrame(cols, schema={"task": pl.String, "group": pl.String, "pid": pl.Int64,
                                      "ready": pl.Float64, "start": pl.Float64,
                                      "end": pl.Float64, "cpu": pl.Float64,
                                      "inputs": pl.List(pl.String),
                                      "outputs": pl.List(pl.String)})


def read_trace(directory: str | Path, strict: bool = False) -> TraceData:
    """Read a trace directory written by ``schedlab dataflowdrs trace`` or the runner."""
    directory = Path(directory)
    if not directory.is_dir():
        raise BadInputError("is not a trace directory", path=directory)
    issues: list[TraceIssue] = []
    rows: list[tuple] = []
    tasks_path = directory / "tasks.jsonl"
    records = read_tasks(tasks_path, issues, strict) if tasks_path.is_file() else []
    meta = _read_meta(directory / "meta.json", issues, strict)
    files = sorted([*directory.glob("*.pfw"), *directory.glob("*.pfw.gz")])
    for pfw in files:
        try:
            rows.extend(read_pfw(pfw))
        except BadInputError as exc:
            if strict:
                raise
            issues.append(TraceIssue(str(pfw), exc.line, exc.field, exc.message))
    straces = sorted(directory.glob("strace-*"))
    rows.extend(_read_straces(straces, records, meta, issues, strict))
    if not files and not straces and not records:
        raise BadInputError("holds no *.pfw trace files and no readable tasks.jsonl records",
                            path=directory)
    ops = pl.DataFrame(rows, schema=OPS_SCHEMA, orient="row")
    return TraceData(ops=ops, tasks=_tasks_frame(records), meta=meta, issues=issues,
                     directory=directory)


def _read_straces(files: list[Path], records: list[dict], meta: dict,
                  issues: list[TraceIssue], strict: bool) -> list[tuple]:
    """strace-<task>.<pid> files; calls are attributed to the task the file name gives."""
    pid_of = {r["task"]: int(r["pid"]) for r in records}
    roots = tuple(str(t.get("root")) for t in (meta.get("tiers") or {}).values()
                  if isinstance(t, dict) and t.get("root"))
    rows: list[tuple] = []
    for path in files:
        task = path.name[len("strace-"):].rsplit(".", 1)[0]
        try:
            rows.extend(read_strace(path, pid_of.get(task), roots))
        except (BadInputError, ValueError) as exc:
            if strict:
                raise
            line = getattr(exc, "line", None)
            issues.append(TraceIssue(str(path), line, None, getattr(exc, "message", str(exc))))
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
