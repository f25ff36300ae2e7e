"""Darshan logs as DataFlowDrs input, through PyDarshan (``pip install darshan``).

Darshan is the I/O characterisation tool HPC centres run on every job. A log holds, per module
(POSIX, MPI-IO, STDIO, H5F/H5D), one counter record per (file, rank) -- rank -1 for a shared
file whose records Darshan reduced across ranks -- and, when DXT was on, every read/write
segment (offset, length, start, end). This module turns a log into the same
:class:`~schedlab.dataflowdrs.traces.TraceData` the dftracer and strace readers produce:

* tasks: one per MPI rank (``<exe>-rank<N>``, group ``<exe>``), running from the job's start
  to its end (a log has no per-rank start events); ``all-ranks`` stands for rank -1 records;
* ops: the DXT segments when the log has them (one row per call, with its offset), else one
  row per counter record and direction, standing for ``*_READS``/``*_WRITES`` calls
  (``calls`` column) and ``*_F_READ_TIME``/``*_F_WRITE_TIME`` seconds; opens/stats become
  ``open``/``stat`` rows carrying ``*_F_META_TIME``;
* ``profile``: the counters themselves (opens, stats, small and misaligned requests, bytes,
  times, shared-file flag, module) -- what the metadata / small / misaligned / shared-file
  findings and the Drishti-style baseline read.

Layers are not double counted: POSIX carries the bytes that reached the file system; MPI-IO
and HDF5 records are kept in ``profile`` (their interface is what Drishti's MPI-IO rules
inspect) and become ops only for files POSIX did not see; STDIO records are ops of their own.
"""

from __future__ import annotations

from pathlib import Path, PurePath

import polars as pl

from schedlab.core.errors import BadInputError, MissingDependencyError
from schedlab.dataflowdrs.tracedata import TraceData, TraceIssue, ops_frame, tasks_frame

SMALL = 1 << 20  # Drishti: a request under 1 MB is small
_SMALL_BINS = ("0_100", "100_1K", "1K_10K", "10K_100K", "100K_1M")
PROFILE_SCHEMA = {
    "task": pl.String, "rank": pl.Int64, "path": pl.String, "module": pl.String,
    "opens": pl.Int64, "stats": pl.Int64, "meta_ops": pl.Int64, "reads": pl.Int64,
    "writes": pl.Int64, "bytes_read": pl.Int64, "bytes_written": pl.Int64,
    "small_reads": pl.Int64, "small_writes": pl.Int64, "misaligned": pl.Int64,
    "mem_misaligned": pl.Int64, "seq_reads": pl.Int64, "seq_writes": pl.Int64,
    "max_byte_read": pl.Int64, "max_byte_written": pl.Int64,
    "read_time": pl.Float64, "write_time": pl.Float64, "meta_time": pl.Float64,
    "coll_ops": pl.Int64, "indep_ops": pl.Int64, "slowest_time": pl.Float64,
    "fastest_time": pl.Float64, "shared": pl.Boolean,
    "osts": pl.String,  # Lustre OST ids the file is striped over ("" when unknown)
}
_PREFIX = {"POSIX": "POSIX", "MPI-IO": "MPIIO", "STDIO": "STDIO", "H5D": "H5D", "H5F": "H5F"}


def _darshan():
    try:
        import darshan
    except ImportError as exc:
        raise MissingDependencyError("reading Darshan logs needs PyDarshan",
                                     hint="pip install darshan") from exc
    return darshan


def _frames(raw: dict, module: str) -> tuple[list[dict], list[dict]]:
    try:
        return raw["records"][module]
    except KeyError as exc:
        raise BadInputError(f"unreadable {module} records", field=module) from exc


def extract(path: str | Path) -> dict:
    """Everything this reader uses from a log, as plain Python (PyDarshan in this process)."""
    darshan = _darshan()
    report = darshan.DarshanReport(str(path), read_all=True)
    out = dict(job=dict(report.metadata["job"]), exe=str(report.metadata.get("exe") or ""),
               modules=list(report.records), records={}, dxt={},
               names={int(k): str(v) for k, v in dict(report.name_records).items()})
    out["skipped"] = []
    for module in ("POSIX", "MPI-IO", "STDIO", "H5F", "H5D"):
        if module in report.records:
            try:  # one module PyDarshan cannot frame must not lose the others
                frames = report.records[module].to_df()
                out["records"][module] = (frames["counters"].to_dict("records"),
                                          frames["fcounters"].to_dict("records"))
            except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as exc:
                out["skipped"].append(f"{module} records unreadable ({str(exc)[:60]})")
    for module in ("DXT_POSIX",):
        if module in report.records:
            try:
                out["dxt"][module] = [
                    dict(rank=int(d["rank"]), id=int(d["id"]), **{
                        k: d[k][["offset", "length", "start_time", "end_time"]].values.tolist()
                        for k in ("read_segments", "write_segments")
                        if d.get(k) is not None and len(d[k])})
                    for d in report.records[module].to_df()]
            except (KeyError, ValueError, TypeError, RuntimeError) as exc:
                out["skipped"].append(f"{module} segments unreadable ({str(exc)[:60]})")
    out["lustre"] = {}
    if "LUSTRE" in report.records:
        try:
            for rec in report.records["LUSTRE"].to_df()["components"].to_dict("records"):
                ids = out["lustre"].setdefault(int(rec["id"]), [])
                ids.extend(int(o) for o in rec["LUSTRE_OST_IDS"] if int(o) not in ids)
        except (KeyError, ValueError, TypeError, RuntimeError, AttributeError) as exc:
            out["skipped"].append(f"LUSTRE records unreadable ({str(exc)[:60]})")
    used = {"POSIX", "MPI-IO", "STDIO", "H5F", "H5D", "DXT_POSIX"}
    if not used & set(out["modules"]):
        out["skipped"].append("no POSIX, MPI-IO, STDIO, HDF5 or DXT_POSIX records (modules: "
                              f"{', '.join(out['modules']) or 'none'}): nothing to analyse")
    return out


def _extract_isolated(path: Path, timeout: float = 300.0) -> dict:
    """extract() in a child process: libdarshan-util aborts or crashes the interpreter on
    some corrupt logs, which must become one clear error, not a dead analysis."""
    import pickle
    import subprocess
    import sys

    _darshan()  # the missing-dependency message, here rather than from the child
    code = ("import pickle,sys;from schedlab.dataflowdrs.darshan import extract;"
            "sys.stdout.buffer.write(pickle.dumps(extract(sys.argv[1])))")
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BadInputError(f"reading it took over {timeout:.0f} s", path=path) from exc
    errors = [ln.strip() for ln in proc.stderr.decode("utf-8", "replace").splitlines()
              if ln.strip()]
    if proc.returncode != 0:
        first = next((e for e in errors if e.startswith("Error")), errors[-1] if errors else "")
        how = (f"libdarshan-util crashed on it (signal {-proc.returncode})"
               if proc.returncode < 0 else "not a readable Darshan log")
        raise BadInputError(f"{how}: {first[:120]}".rstrip(": "), path=path)
    try:
        raw = pickle.loads(proc.stdout)  # noqa: S301 (our own child's output)
    except (pickle.UnpicklingError, EOFError) as exc:
        raise BadInputError("not a readable Darshan log", path=path) from exc
    raw["warnings"] = [e for e in errors if e.startswith("Error")]
    return raw


def _get(row: dict, key: str, default=0):
    value = row.get(key, default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return default if value != value or value < 0 else value  # NaN / -1 (not recorded)


def _profile_rows(raw: dict, module: str, names: dict, exe: str) -> list[dict]:
    counters, fcounters = _frames(raw, module)
    p = _PREFIX[module]
    rows = []
    for c, f in zip(counters, fcounters, strict=True):
        rank = int(c["rank"])
        path = names.get(int(c["id"]), str(c["id"]))
        if module == "H5D":
            path = path.split(":")[0]
        g = lambda k, d=0, row=c: int(_get(row, f"{p}_{k}", d))  # noqa: E731
        gf = lambda k, row=f: float(_get(row, f"{p}_F_{k}", 0.0))  # noqa: E731
        reads = g("READS") + g("INDEP_READS") + g("COLL_READS") + g("SPLIT_READS") + g(
            "NB_READS")
        writes = g("WRITES") + g("INDEP_WRITES") + g("COLL_WRITES") + g("SPLIT_WRITES") + g(
            "NB_WRITES")
        agg = "_AGG" if module in ("MPI-IO", "H5D") else ""
        small_r = sum(g(f"SIZE_READ{agg}_{b}") for b in _SMALL_BINS)
        small_w = sum(g(f"SIZE_WRITE{agg}_{b}") for b in _SMALL_BINS)
        if module == "STDIO":  # no size histogram: small when the mean request is
            small_r = reads if reads and g("BYTES_READ") / reads < SMALL else 0
            small_w = writes if writes and g("BYTES_WRITTEN") / writes < SMALL else 0
        rows.append(dict(
            task=_task(exe, rank), rank=rank, path=path, module=module,
            opens=g("OPENS") + g("INDEP_OPENS") + g("COLL_OPENS") + g("FDOPENS"),
            stats=g("STATS"),
            meta_ops=g("RENAME_SOURCES") + g("FSYNCS") + g("FDSYNCS"),
            reads=reads, writes=writes, bytes_read=g("BYTES_READ"),
            bytes_written=g("BYTES_WRITTEN"), small_reads=small_r, small_writes=small_w,
            misaligned=g("FILE_NOT_ALIGNED"), mem_misaligned=g("MEM_NOT_ALIGNED"),
            seq_reads=g("SEQ_READS"), seq_writes=g("SEQ_WRITES"),
            max_byte_read=g("MAX_BYTE_READ"), max_byte_written=g("MAX_BYTE_WRITTEN"),
            read_time=gf("READ_TIME"), write_time=gf("WRITE_TIME"), meta_time=gf("META_TIME"),
            coll_ops=g("COLL_READS") + g("COLL_WRITES"),
            indep_ops=g("INDEP_READS") + g("INDEP_WRITES"),
            slowest_time=gf("SLOWEST_RANK_TIME"), fastest_time=gf("FASTEST_RANK_TIME"),
            shared=rank == -1, _start=gf("OPEN_START_TIMESTAMP"),
            osts=",".join(str(o) for o in raw.get("lustre", {}).get(int(c["id"]), [])),
            _end=max(gf("CLOSE_END_TIMESTAMP"), gf("READ_END_TIMESTAMP"),
                     gf("WRITE_END_TIMESTAMP"))))
    return rows


def _task(exe: str, rank: int) -> str:
    return f"{exe}-all-ranks" if rank < 0 else f"{exe}-rank{rank}"


def _pid(rank: int) -> int:
    return -2 if rank < 0 else rank  # -1 is the single-command placeholder elsewhere


def read_darshan(path: str | Path, prefix: str = "") -> TraceData:
    """One Darshan log as a trace (see the module docstring); bad input names the file."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError("no such Darshan log", path=path)
    raw = _extract_isolated(path)
    job = raw["job"]
    words = raw["exe"].split()
    exe = prefix + ((PurePath(words[0]).name if words else "") or "job")
    names = raw["names"]
    t0 = float(job.get("start_time_sec", 0)) + float(job.get("start_time_nsec", 0)) / 1e9
    t1 = float(job.get("end_time_sec", 0)) + float(job.get("end_time_nsec", 0)) / 1e9
    runtime = max(t1 - t0, float(job.get("run_time", 0) or 0), 1e-6)
    profile: list[dict] = []
    try:
        for module in raw["records"]:
            profile.extend(_profile_rows(raw, module, names, exe))
        rows = _ops(profile, raw["dxt"].get("DXT_POSIX", []), names, t0)
    except BadInputError as exc:
        raise BadInputError(exc.message, path=path, field=exc.field) from exc
    except (TypeError, ValueError, KeyError) as exc:
        raise BadInputError(f"corrupt Darshan records: {str(exc)[:100]}", path=path) from exc
    ranks = sorted({r["rank"] for r in profile} | {d["rank"] for d in
                                                    raw["dxt"].get("DXT_POSIX", [])})
    tasks = [dict(task=_task(exe, r), group=exe, pid=_pid(r), ready=t0, start=t0,
                  end=t0 + runtime) for r in ranks]
    nprocs = int(job.get("nprocs", 1) or 1)
    meta = dict(source="darshan", log=str(path), exe=raw["exe"], nprocs=nprocs,
                runtime=runtime, t0=t0, makespan=runtime, parallelism=nprocs, cores=nprocs,
                modules=raw["modules"], dxt=sorted(raw["dxt"]), tiers={}, file_groups={})
    prof = pl.DataFrame([{k: r[k] for k in PROFILE_SCHEMA} for r in profile],
                        schema=PROFILE_SCHEMA)
    issues = _issues(path, raw)
    return TraceData(ops=ops_frame(rows), tasks=tasks_frame(tasks), meta=meta, issues=issues,
                     directory=path.parent, profile=prof)


def _issues(path: Path, raw: dict) -> list[TraceIssue]:
    """One line per damaged log: which modules broke (the log's ``field``), which were kept."""
    import re

    broken = []
    for line in [*raw.get("warnings", []), *raw.get("skipped", [])]:
        match = re.search(r"module (\S+) data|^(\S+) (?:records|segments) unreadable", line)
        name = match and (match.group(1) or match.group(2))
        if name and name not in broken:
            broken.append(name)
    if not broken and not raw.get("warnings") and not raw.get("skipped"):
        return []
    kept = [m for m in raw["records"] if m not in broken] + [
        m for m, v in raw["dxt"].items() if v and m not in broken]
    first = next(iter(raw.get("warnings", [])), "")
    if not broken:
        return [TraceIssue(str(path), None, None, "; ".join(raw.get("skipped", [])) or first)]
    return [TraceIssue(str(path), None, ",".join(broken),
                       f"truncated or corrupt log: {', '.join(broken)} unreadable, "
                       f"{', '.join(kept) or 'nothing'} kept ({first or 'PyDarshan error'})")]


def _ops(profile: list[dict], dxt_posix: list[dict], names: dict, t0: float) -> list[tuple]:
    """Rows for the DFL: DXT segments where traced, else counter records (see docstring)."""
    rows: list[tuple] = []
    traced = set()
    for rec in dxt_posix:
        rank, path = int(rec["rank"]), names.get(int(rec["id"]), str(rec["id"]))
        traced.add((rank, path))
        for kind, key in (("read", "read_segments"), ("write", "write_segments")):
            for off, length, start, end in rec.get(key) or []:
                rows.append((_pid(rank), t0 + float(start), max(0.0, float(end - start)), kind,
                             int(length), path, int(off), 1))
    posix_files = {r["path"] for r in profile if r["module"] == "POSIX"}
    traced_paths = {path for _, path in traced}
    for r in profile:
        if r["module"] in ("H5F", "H5D") or (r["module"] == "MPI-IO" and
                                             r["path"] in posix_files):
            continue
        pid, start = _pid(r["rank"]), t0 + r["_start"]
        if r["path"] not in traced_paths:  # DXT has every segment of it, all ranks
            for kind, calls, nbytes, time in (
                    ("read", r["reads"], r["bytes_read"], r["read_time"]),
                    ("write", r["writes"], r["bytes_written"], r["write_time"])):
                if calls > 0:
                    rows.append((pid, start, time, kind, nbytes, r["path"], None, calls))
        meta_calls = r["opens"] + r["stats"]
        if meta_calls > 0:
            rows.append((pid, start, r["meta_time"], "open", 0, r["path"], None, meta_calls))
    return rows


def read_darshan_logs(paths: list[Path], strict: bool = False) -> TraceData:
    """One or more Darshan logs (the jobs of a workflow) as one trace; a log that cannot be
    read is reported and skipped (raised with ``strict``), never the whole set."""
    if not paths:
        raise BadInputError("no Darshan logs given", field="paths")
    parts, issues = [], []
    for path in paths:
        try:
            parts.append(read_darshan(path, prefix=f"{Path(path).stem[:24]}:" if len(paths) > 1
                                      else ""))
        except BadInputError as exc:
            if strict or len(paths) == 1:
                raise
            issues.append(TraceIssue(str(path), None, exc.field, exc.message))
    if not parts:
        raise BadInputError("none of the Darshan logs could be read", path=paths[0].parent)
    if len(parts) == 1:
        parts[0].issues.extend(issues)
        return parts[0]
    t0 = min(p.meta["t0"] for p in parts)
    end = max(p.meta["t0"] + p.meta["runtime"] for p in parts)
    offset = 0
    ops, tasks = [], []
    for p in parts:  # distinct pids per log
        shift = offset + 2  # pids here are >= -2
        ops.append(p.ops.with_columns(pl.col("pid") + shift))
        tasks.append(p.tasks.with_columns(pl.col("pid") + shift))
        offset = int(max(ops[-1]["pid"].max() or 0, tasks[-1]["pid"].max() or 0)) + 1
    meta = dict(source="darshan", logs=[p.meta["log"] for p in parts], t0=t0,
                runtime=end - t0, makespan=end - t0,
                nprocs=max(p.meta["nprocs"] for p in parts),
                parallelism=max(p.meta["nprocs"] for p in parts), cores=max(
                    p.meta["nprocs"] for p in parts),
                modules=sorted({m for p in parts for m in p.meta["modules"]}), tiers={},
                file_groups={}, exe=parts[0].meta["exe"])
    return TraceData(ops=pl.concat(ops), tasks=pl.concat(tasks), meta=meta, issues=issues,
                     directory=Path(paths[0]).parent,
                     profile=pl.concat([p.profile for p in parts]))


__all__ = ["PROFILE_SCHEMA", "read_darshan", "read_darshan_logs"]
