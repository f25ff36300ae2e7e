"""Tracers: how a run's processes are instrumented (DataFlowDrs, paper 09, part (a)).

The measurement is LD_PRELOAD interception of unmodified programs with dftracer's preload
library (``libdftracer_preload.so`` from the ``dftracer`` PyPI wheel), which records every
open/read/write/close on files under the tier directories with byte counts and microsecond
timestamps into one ``*.pfw`` JSON-lines file per process. ``untraced`` runs the same processes
with only the tier throttle, which is what the tracing-overhead claim compares against.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Protocol

from schedlab.core.errors import MissingDependencyError
from schedlab.core.registry import lookup
from schedlab.dataflowdrs.tiers import TierLayout, throttle_library


class Tracer(Protocol):
    """Instruments a task process: through its environment and/or a command prefix."""

    name: str

    def environment(self, out_dir: Path, layout: TierLayout) -> dict[str, str]: ...

    def prefix(self, out_dir: Path, layout: TierLayout, task_id: str) -> list[str]: ...


class _NoPrefix:
    def prefix(self, out_dir: Path, layout: TierLayout, task_id: str) -> list[str]:
        return []


def dftracer_library() -> Path:
    """The dftracer preload library shipped in the dftracer wheel."""
    try:
        import dftracer
    except ImportError as exc:
        raise MissingDependencyError("tracing needs the 'dftracer' package",
                                     hint="pip install dftracer") from exc
    root = Path(dftracer.__file__).parent
    for candidate in (root / "lib64" / "libdftracer_preload.so",
                      root / "lib" / "libdftracer_preload.so"):
        if candidate.is_file():
            return candidate
    raise MissingDependencyError(f"no libdftracer_preload.so under {root}",
                                 hint="pip install --force-reinstall dftracer")


def _base_env(layout: TierLayout) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    spec = layout.throttle_spec()
    if spec:
        env["SCHEDLAB_THROTTLE"] = spec
    return env


class Untraced(_NoPrefix):
    """Only the storage-tier model: the baseline for measuring tracing overhead."""

    name = "untraced"

    def environment(self, out_dir: Path, layout: TierLayout) -> dict[str, str]:
        env = _base_env(layout)
        if "SCHEDLAB_THROTTLE" in env:
            env["LD_PRELOAD"] = str(throttle_library())
        return env


class Dftracer(_NoPrefix):
    """dftracer's LD_PRELOAD interception of POSIX (and optionally STDIO) I/O calls.

    STDIO interception is off by default for workflow tasks, which use POSIX calls: binding
    the STDIO wrappers costs every process start-up time (about a third of dftracer's fixed
    cost here) and adds nothing for them. Arbitrary commands get ``dftracer-stdio``.
    """

    name = "dftracer"
    stdio = False
    all_paths = False  # True: DFTRACER_DATA_DIR=all, files are filtered after the run

    def environment(self, out_dir: Path, layout: TierLayout) -> dict[str, str]:
        env = _base_env(layout)
        # dftracer first (the other order crashes at start-up); its GOT wrappers then call
        # the throttle's read/write, so the recorded duration includes the tier's cost
        preload = [str(dftracer_library())]
        if "SCHEDLAB_THROTTLE" in env:
            preload.append(str(throttle_library()))
        env.update(
            LD_PRELOAD=":".join(preload),
            DFTRACER_ENABLE="1",
            DFTRACER_INIT="PRELOAD",
            DFTRACER_INC_METADATA="1",
            DFTRACER_TRACE_COMPRESSION="0",
            DFTRACER_LOG_FILE=str(Path(out_dir).resolve() / "trace"),
            DFTRACER_DATA_DIR="all" if self.all_paths else ":".join(
                str(r) for r in layout.roots.values()),
        )
        if not self.stdio:
            env["DFTRACER_DISABLE_STDIO"] = "1"
        return env


class DftracerStdio(Dftracer):
    """dftracer with POSIX and STDIO interception, every path traced (for arbitrary commands).

    dftracer's own prefix filter compares the name a program passed, so ``cat a.txt`` under
    a data directory never matched; tracing every path and filtering afterwards (relative
    names joined to the process's cwd, which dftracer records at start and on chdir) sees
    them. Child processes inherit LD_PRELOAD, so pipelines and multiprocessing are followed.
    """

    name = "dftracer-stdio"
    stdio = True
    all_paths = True


class Strace:
    """Fallback tracer: ``strace -ff -ttt -T -y`` on each task (no dftracer needed).

    ptrace stops the task at every traced call, so it costs far more than dftracer; the files
    (``strace-<task>.<pid>``) name their task, so no pid mapping is needed.
    """

    name = "strace"
    # every file-name and descriptor call (open/stat/unlink/mkdir/... and read/write/lseek):
    # all paths are traced, the reader keeps those under the data directories
    CALLS = "%file,%desc,%process"  # %process: fork/clone give each child's parent

    def environment(self, out_dir: Path, layout: TierLayout) -> dict[str, str]:
        return Untraced().environment(out_dir, layout)

    def prefix(self, out_dir: Path, layout: TierLayout, task_id: str) -> list[str]:
        binary = shutil.which("strace")
        if binary is None:
            raise MissingDependencyError("the strace tracer needs strace",
                                         hint="apt-get install strace")
        return [binary, "-f", "-ff", "-ttt", "-T", "-y", "-qq", "-e", f"trace={self.CALLS}",
                "-o", str(Path(out_dir).resolve() / f"strace-{task_id}")]


TRACERS: dict[str, type] = {"dftracer": Dftracer, "dftracer-stdio": DftracerStdio,
                            "strace": Strace, "untraced": Untraced}


def dftracer_installed() -> bool:
    """Whether dftracer's preload library can be found (the ``dftracer`` wheel)."""
    try:
        return dftracer_library().is_file()
    except (MissingDependencyError, OSError):
        return False


def make_tracer(name: str) -> Tracer:
    """A tracer by name. ``auto`` (arbitrary commands) is dftracer with STDIO where the
    dftracer wheel is installed -- an LD_PRELOAD tracer, +19 to +70 % CPU on syscall-heavy
    tools against strace's +380 to +660 % (open_world experiment) -- else strace. strace is
    the complete one: it also sees descriptors a shell dup2()s (``sort > b``, dd), mmap'd
    reads and children that _exit() before dftracer flushes; ``--tracer strace`` asks for it.
    Which tracer ran is written to meta.json and printed by ``trace`` and ``analyze``."""
    if name == "auto":
        if dftracer_installed() or not shutil.which("strace"):
            return DftracerStdio()
        return Strace()
    return lookup(TRACERS, "tracer", name)()
