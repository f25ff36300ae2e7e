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
from schedlab.dataflowdrs.tracedata import (
    OPS_SCHEMA,
    TraceData,
    TraceIssue,
    is_runtime_file,
    runtime_summary,
    tasks_frame,
)

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
    """Everything this reader uses from a log (PyDarshan in this process): see
    ``darshan_extract.py``, which the isolated reader runs as a script."""
    _darshan()
    from schedlab.dataflowdrs.darshan_extract import extract as run

    return run(path)


_CACHE: dict[str, dict] = {}  # sha-256 of a log's bytes -> what extract() returned
_CACHE_SIZE = 16


def _extract_isolated(path: Path, timeout: float = 300.0) -> dict:
    """extract() in a child process: libdarshan-util aborts or crashes the interpreter on
    some corrupt logs, which must become one clear error, not a dead analysis. A log read
    before in this process (same bytes) is not read again: the child's start-up (Python and
    PyDarshan, ~1 s of CPU) is most of a small log's cost, and experiments and diagnosers
    read the same logs many times."""
    import copy
    import hashlib

    try:
        key = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise BadInputError(f"cannot read it ({exc.strerror})", path=path) from exc
    if key not in _CACHE:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = _extract_child(path, timeout)
    return copy.deepcopy(_CACHE[key])


def _extract_child(path: Path, timeout: float) -> dict:
    import importlib.util
    import pickle
    import subprocess
    import sys

    if importlib.util.find_spec("darshan") is None:  # the message here, not from the child;
        _darshan()  # importing PyDarshan (pandas, cffi) in this process too would cost 0.5 s
    # run as a script, not through the package: the child imports PyDarshan and NumPy only
    script = Path(__file__).with_name("darshan_extract.py")
    try:
        proc = subprocess.run([sys.executable, str(script), str(path)], capture_output=True,
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


def _clean(frame: pl.DataFrame, name: str, default: float = 0) -> pl.Expr:
    """A counter column as floats; NaN and Darshan's -1 (not recorded) read as ``default``,
    a column the log does not have as ``default`` everywhere."""
    if name not in frame.columns:
        return pl.lit(float(default))
    col = pl.col(name).cast(pl.Float64)
    return pl.when(col.is_nan() | (col < 0) | col.is_null()).then(float(default)).otherwise(col)


def _profile_frame(raw: dict, module: str, names: pl.DataFrame, exe: str,
                   lustre: pl.DataFrame) -> pl.DataFrame:
    """One module's counter records as profile rows (PROFILE_SCHEMA plus ``_start``), all
    records at once: Polars expressions over the counter columns, no per-record loop."""
    counters, fcounters = _frames(raw, module)
    try:
        c = pl.DataFrame({k: v for k, v in counters.items()})
        f = pl.DataFrame({k: v for k, v in fcounters.items() if k not in ("id", "rank")})
    except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
        raise BadInputError(f"unreadable {module} records ({str(exc)[:60]})",
                            field=module) from exc
    if c.height != f.height:
        raise BadInputError(f"{module}: {c.height} counter rows but {f.height} timer rows",
                            field=module)
    frame = pl.concat([c, f.rename({k: f"f:{k}" for k in f.columns})], how="horizontal")
    p = _PREFIX[module]

    def g(k: str) -> pl.Expr:
        return _clean(frame, f"{p}_{k}").cast(pl.Int64)

    def gf(k: str) -> pl.Expr:
        return _clean(frame, f"f:{p}_F_{k}")

    reads = g("READS") + g("INDEP_READS") + g("COLL_READS") + g("SPLIT_READS") + g("NB_READS")
    writes = (g("WRITES") + g("INDEP_WRITES") + g("COLL_WRITES") + g("SPLIT_WRITES")
              + g("NB_WRITES"))
    agg = "_AGG" if module in ("MPI-IO", "H5D") else ""
    small_r = pl.sum_horizontal([g(f"SIZE_READ{agg}_{b}") for b in _SMALL_BINS])
    small_w = pl.sum_horizontal([g(f"SIZE_WRITE{agg}_{b}") for b in _SMALL_BINS])
    if module == "STDIO":  # no size histogram: small when the mean request is
        small_r = pl.when((reads > 0) & (g("BYTES_READ") < SMALL * reads)).then(reads) \
            .otherwise(0)
        small_w = pl.when((writes > 0) & (g("BYTES_WRITTEN") < SMALL * writes)).then(writes) \
            .otherwise(0)
    rank = pl.col("rank").cast(pl.Int64)
    out = frame.with_columns(pl.col("id").cast(pl.UInt64)).join(
        names, on="id", how="left").with_columns(
        pl.col("path").fill_null(pl.col("id").cast(pl.String)))
    if module == "H5D":
        out = out.with_columns(pl.col("path").str.split(":").list.first())
    out = out.join(lustre, on="id", how="left")
    return out.select(
        pl.when(rank < 0).then(pl.lit(f"{exe}-all-ranks"))
        .otherwise(pl.format(f"{exe}-rank{{}}", rank)).alias("task"),
        rank.alias("rank"), pl.col("path"), pl.lit(module).alias("module"),
        (g("OPENS") + g("INDEP_OPENS") + g("COLL_OPENS") + g("FDOPENS")).alias("opens"),
        g("STATS").alias("stats"),
        (g("RENAME_SOURCES") + g("FSYNCS") + g("FDSYNCS")).alias("meta_ops"),
        reads.alias("reads"), writes.alias("writes"), g("BYTES_READ").alias("bytes_read"),
        g("BYTES_WRITTEN").alias("bytes_written"),
        small_r.cast(pl.Int64).alias("small_reads"),
        small_w.cast(pl.Int64).alias("small_writes"),
        g("FILE_NOT_ALIGNED").alias("misaligned"), g("MEM_NOT_ALIGNED").alias("mem_misaligned"),
        g("SEQ_READS").alias("seq_reads"), g("SEQ_WRITES").alias("seq_writes"),
        g("MAX_BYTE_READ").alias("max_byte_read"),
        g("MAX_BYTE_WRITTEN").alias("max_byte_written"),
        gf("READ_TIME").alias("read_time"), gf("WRITE_TIME").alias("write_time"),
        gf("META_TIME").alias("meta_time"),
        (g("COLL_READS") + g("COLL_WRITES")).alias("coll_ops"),
        (g("INDEP_READS") + g("INDEP_WRITES")).alias("indep_ops"),
        gf("SLOWEST_RANK_TIME").alias("slowest_time"),
        gf("FASTEST_RANK_TIME").alias("fastest_time"), (rank == -1).alias("shared"),
        pl.col("osts").fill_null(""), gf("OPEN_START_TIMESTAMP").alias("_start"))


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
    runtime_files: dict = {}
    job = raw["job"]
    words = raw["exe"].split()
    exe = prefix + ((PurePath(words[0]).name if words else "") or "job")
    names = pl.DataFrame({"id": list(raw["names"]), "path": list(raw["names"].values())},
                         schema={"id": pl.UInt64, "path": pl.String})
    lustre = pl.DataFrame({"id": list(raw.get("lustre", {})),
                           "osts": [",".join(str(o) for o in v)
                                    for v in raw.get("lustre", {}).values()]},
                          schema={"id": pl.UInt64, "osts": pl.String})
    t0 = float(job.get("start_time_sec", 0)) + float(job.get("start_time_nsec", 0)) / 1e9
    t1 = float(job.get("end_time_sec", 0)) + float(job.get("end_time_nsec", 0)) / 1e9
    runtime = max(t1 - t0, float(job.get("run_time", 0) or 0), 1e-6)
    try:
        parts = [_profile_frame(raw, module, names, exe, lustre) for module in raw["records"]]
        profile = (pl.concat(parts) if parts else pl.DataFrame(
            schema={**PROFILE_SCHEMA, "_start": pl.Float64}))
        segments = {m: _segment_frame(v, names) for m, v in raw["dxt"].items()}
        # the MPI runtime's shm/session files, /proc, /dev, std streams: set aside (tracedata)
        aside_paths = [p for p in set(profile["path"].to_list()).union(
            *(set(v["path"].unique().to_list()) for v in segments.values()))
            if is_runtime_file(p)]
        if aside_paths:
            aside = profile.filter(pl.col("path").is_in(aside_paths))
            profile = profile.filter(~pl.col("path").is_in(aside_paths))
            segments = {m: v.filter(~pl.col("path").is_in(aside_paths))
                        for m, v in segments.items()}
            runtime_files = runtime_summary(aside_paths, float(aside.select(
                pl.sum_horizontal("read_time", "write_time", "meta_time").sum()).item() or 0))
        ops = _ops(profile, segments, t0)
    except BadInputError as exc:
        raise BadInputError(exc.message, path=path, field=exc.field) from exc
    except (TypeError, ValueError, KeyError, pl.exceptions.PolarsError) as exc:
        raise BadInputError(f"corrupt Darshan records: {str(exc)[:100]}", path=path) from exc
    ranks = sorted(set(profile["rank"].to_list()).union(
        *(set(v["rank"].to_list()) for v in segments.values())))
    tasks = [dict(task=_task(exe, r), group=exe, pid=_pid(r), ready=t0, start=t0,
                  end=t0 + runtime) for r in ranks]
    nprocs = int(job.get("nprocs", 1) or 1)
    meta = dict(source="darshan", log=str(path), exe=raw["exe"], nprocs=nprocs,
                runtime=runtime, t0=t0, makespan=runtime, parallelism=nprocs, cores=nprocs,
                modules=raw["modules"], dxt={m: v.height for m, v in segments.items()},
                tiers={}, file_groups={})
    if runtime_files:
        meta["runtime_files"] = runtime_files
    prof = profile.select([pl.col(k).cast(t) for k, t in PROFILE_SCHEMA.items()])
    issues = _issues(path, raw)
    return TraceData(ops=ops, tasks=tasks_frame(tasks), meta=meta, issues=issues,
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


def _segment_frame(seg: dict, names: pl.DataFrame) -> pl.DataFrame:
    """A DXT module's flat segment columns (from ``_segments``) with file names."""
    frame = pl.DataFrame({k: seg[k] for k in ("rank", "id", "write", "offset", "length",
                                               "start", "end")})
    frame = frame.with_columns(pl.col("rank").cast(pl.Int64), pl.col("id").cast(pl.UInt64),
                               pl.col("write").cast(pl.Int8), pl.col("offset").cast(pl.Int64),
                               pl.col("length").cast(pl.Int64),
                               pl.col("start").cast(pl.Float64), pl.col("end").cast(pl.Float64))
    return frame.join(names, on="id", how="left", maintain_order="left").with_columns(
        pl.col("path").fill_null(pl.col("id").cast(pl.String)))


def _pid_expr(rank: pl.Expr) -> pl.Expr:
    return pl.when(rank < 0).then(-2).otherwise(rank).cast(pl.Int64)  # see _pid


def _ops(profile: pl.DataFrame, segments: dict[str, pl.DataFrame], t0: float) -> pl.DataFrame:
    """Rows for the DFL: DXT segments where traced (POSIX; MPI-IO segments for files POSIX's
    DXT did not see), else counter records (see docstring); vectorised."""
    cols = list(OPS_SCHEMA)
    parts = []
    traced: set[str] = set()
    for module in ("DXT_POSIX", "DXT_MPIIO"):
        seg = segments.get(module)
        if seg is None or seg.height == 0:
            continue
        if traced:  # the same bytes one layer up: only files the POSIX layer missed
            seg = seg.filter(~pl.col("path").is_in(list(traced)))
        traced |= set(seg["path"].unique().to_list())
        parts.append(seg.select(
            _pid_expr(pl.col("rank")).alias("pid"), (pl.col("start") + t0).alias("ts"),
            (pl.col("end") - pl.col("start")).clip(lower_bound=0.0).alias("dur"),
            pl.when(pl.col("write") == 1).then(pl.lit("write")).otherwise(pl.lit("read"))
            .alias("op"), pl.col("length").alias("bytes"), pl.col("path"),
            pl.col("offset"), pl.lit(1, dtype=pl.Int64).alias("calls")))
    posix_files = profile.filter(pl.col("module") == "POSIX")["path"].unique().to_list()
    rec = profile.with_row_index("_i").filter(
        ~pl.col("module").is_in(["H5F", "H5D"])
        & ~((pl.col("module") == "MPI-IO") & pl.col("path").is_in(posix_files)))
    base = [_pid_expr(pl.col("rank")).alias("pid"), (pl.col("_start") + t0).alias("ts")]
    untraced = ~pl.col("path").is_in(list(traced))  # DXT has every segment of it, all ranks
    counted = []
    for j, (kind, calls, nbytes, time, where) in enumerate((
            ("read", "reads", "bytes_read", "read_time", untraced),
            ("write", "writes", "bytes_written", "write_time", untraced),
            ("open", "_meta", None, "meta_time", pl.lit(True)))):
        frame = rec.with_columns((pl.col("opens") + pl.col("stats")).alias("_meta"))
        counted.append(frame.filter(where & (pl.col(calls) > 0)).select(
            "_i", pl.lit(j).alias("_j"), *base, pl.col(time).alias("dur"),
            pl.lit(kind).alias("op"),
            (pl.col(nbytes) if nbytes else pl.lit(0)).cast(pl.Int64).alias("bytes"),
            pl.col("path"), pl.lit(None, dtype=pl.Int64).alias("offset"),
            pl.col(calls).cast(pl.Int64).alias("calls")))
    parts.append(pl.concat(counted).sort("_i", "_j").select(cols))
    return pl.concat([p.select([pl.col(c).cast(t) for c, t in OPS_SCHEMA.items()])
                      for p in parts])


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
    aside = [p.meta["runtime_files"] for p in parts if p.meta.get("runtime_files")]
    if aside:
        meta["runtime_files"] = dict(files=sum(a["files"] for a in aside),
                                     seconds=sum(a["seconds"] for a in aside),
                                     examples=[e for a in aside for e in a["examples"]][:3])
    return TraceData(ops=pl.concat(ops), tasks=pl.concat(tasks), meta=meta, issues=issues,
                     directory=Path(paths[0]).parent,
                     profile=pl.concat([p.profile for p in parts]))


__all__ = ["PROFILE_SCHEMA", "read_darshan", "read_darshan_logs"]
