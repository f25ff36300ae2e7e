"""What a read trace is: the ops and tasks tables, run metadata and the issues found.

Why a module of its own: every trace reader (dftracer/strace in ``traces``, Darshan logs in
``darshan``, the seeded generator in ``synthetic``) builds these, and ``traces.read_trace``
dispatches to the Darshan reader; with the shared types below both readers there is no import
cycle between them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

# offset: file offset of a read/write when known (pread, lseek-tracked, DXT); calls: how many
# calls the row stands for (1 for a traced call; a Darshan counter record stands for many)
OPS_SCHEMA = {"pid": pl.Int64, "ts": pl.Float64, "dur": pl.Float64, "op": pl.String,
              "bytes": pl.Int64, "path": pl.String, "offset": pl.Int64, "calls": pl.Int64}


def ops_frame(rows: list[tuple]) -> pl.DataFrame:
    """The ops table from 6-tuples (pid, ts, dur, kind, bytes, path) or longer rows."""
    full = [r if len(r) == 8 else (*r[:6], r[6] if len(r) > 6 else None, 1) for r in rows]
    return pl.DataFrame(full, schema=OPS_SCHEMA, orient="row")


# The runtime's own files: an MPI library's shared-memory segments and session directories
# (OpenMPI /tmp/ompi.* and /tmp/prte.*, vader/sm segments, MPICH, Intel MPI, UCX, PSM2 in
# /dev/shm), kernel and device files (/proc, /sys, /dev other than /dev/shm) and Darshan's
# standard streams. Their calls are not the job's storage I/O: readers set them aside (counted
# in meta["runtime_files"]) so they never become shared-file, pack-files or I/O-share findings.
# /dev/shm itself is not excluded: a workflow may keep its data there (our tmpfs tier does).
RUNTIME_FILE = re.compile(
    r"^(?:/proc/|/sys/|/dev/(?!shm/)|<STD(?:IN|OUT|ERR)>$"
    r"|(?:/tmp|/var/tmp|/dev/shm)/(?:\.?ompi\.|openmpi-sessions|prte\.|pmix[._-]"
    r"|vader_segment|sm_segment|mpich_shar|shm-col-space|Intel_MPI|ucx_shm|psm2?_shm|knem"
    r"|hwloc[-.]|sem\.mpi))")


def is_runtime_file(path: str | None) -> bool:
    """True for the MPI runtime's shared-memory and session files, /proc, /sys, /dev (not
    /dev/shm data) and <STDIN>/<STDOUT>/<STDERR> (see RUNTIME_FILE)."""
    return bool(path) and RUNTIME_FILE.match(path) is not None


def runtime_summary(paths: list[str], seconds: float) -> dict:
    """What meta["runtime_files"] says: how many, the time in their calls, a few names."""
    unique = sorted(set(paths))
    return dict(files=len(unique), seconds=float(seconds), examples=unique[:3])


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
    profile: pl.DataFrame | None = None  # I/O counters per (task, file, module): Darshan


def _cpu(record: dict) -> float | None:
    """The task's measured CPU seconds (runner: wait4), or None when not recorded."""
    value = record.get("cpu")
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


def tasks_frame(records: list[dict]) -> pl.DataFrame:
    """The tasks table from task records (the runner's ``tasks.jsonl``, Darshan's ranks)."""
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
