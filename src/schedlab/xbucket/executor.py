"""Run real tasks under the allocations an allocator predicts; kill, retry and learn.

The real-execution half of X-Bucket (../shared/papers/15-xbucket.md: the paper runs inside
WorkQueue/TaskVine). Each attempt is a subprocess started in its own sandbox directory:

* memory, as real monitors do it (resident memory, never address space):

  - cgroup v2, where this process may create a child cgroup with the memory controller
    (detected once: a cgroup2 mount, ``memory`` in our cgroup's controllers, a probe child
    that gets a ``memory.max``): each attempt runs in its own child cgroup with ``memory.max``
    = the allocation and swap off; the kernel OOM-kills it above that (``memory.events``
    ``oom_kill``) and ``memory.peak`` gives its exact peak;
  - always, a psutil watchdog that samples the RSS of the task's process tree every ``poll``
    seconds (plus the kernel's VmHWM of the top process) and kills it above the allocation;
  - RLIMIT_AS (allocation + ``as_headroom`` MB) only when asked (``rlimit=True``): off by
    default, because a task that *reserves* far more address space than it uses (JVM, Go,
    CUDA, PyTorch, a large ``mmap``) would fail as an ordinary error.

  ``ExecutionRecord.enforcement`` (and ``LocalExecutor.memory_enforcement``) says which path
  ran, e.g. ``cgroup v2 memory.max + memory.peak + psutil RSS watchdog`` or
  ``psutil RSS watchdog (cgroup v2 unavailable: ...)``;
* cores: CPU affinity to ceil(cores) CPUs. A task cannot exceed it, so cores never fail an
  attempt; the measured usage is CPU time / wall time (as cctools' resource monitor reports);
* disk: bytes under the sandbox, checked every ``disk_every`` samples; above the allocation
  the task is killed.

The measured peaks go back to the allocator through ``observe``; a killed attempt is retried
with ``last_failed`` so the next allocation grows. Python callables run in a fresh interpreter
(``runner.py``, started by path), so they must be importable (module-level), the same
rule as multiprocessing's spawn and Ray.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.xbucket import runner
from schedlab.xbucket.policies import Allocator
from schedlab.xbucket.runner import MEMORY_ERROR_EXIT
from schedlab.xbucket.types import Machine, ResourceReport, Resources


@dataclass
class TaskSpec:
    """A real task: a command (argv list) or an importable Python callable with its arguments."""

    task_id: str
    category: str = "default"
    command: Sequence[str] | None = None
    function: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.command is None) == (self.function is None):
            raise BadInputError("give exactly one of command or function", field="task")


@dataclass
class ExecutionRecord:
    """Every attempt of one task and its outcome (return value or exit code, and output)."""

    task_id: str
    attempts: list[ResourceReport] = field(default_factory=list)
    returncode: int | None = None
    value: Any = None
    stdout: str = ""
    stderr: str = ""
    enforcement: str = ""  # how memory was enforced on its last attempt

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0


def _sandbox_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _high_water_mb(pid: int) -> float:
    """VmHWM of a live process: its exact peak RSS since exec, even between two samples."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def _cgroup_parent(root: Path = Path("/sys/fs/cgroup")) -> tuple[Path | None, str]:
    """Our own cgroup v2 directory when we may create children with a memory controller, or
    None and why not."""
    try:
        if not (root / "cgroup.controllers").exists():
            return None, f"no cgroup2 mount at {root}"
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        unified = [line.split("::", 1)[1] for line in lines if line.startswith("0::")]
        if not unified:
            return None, "this process has no cgroup v2 entry"
        own = root / unified[0].lstrip("/")
        if "memory" not in (own / "cgroup.controllers").read_text().split():
            return None, f"memory controller not delegated to {own}"
        probe = own / f"xbucket-probe-{os.getpid()}"
        probe.mkdir()
        try:
            if not (probe / "memory.max").exists():
                return None, f"memory controller not enabled in {own}/cgroup.subtree_control"
            (probe / "memory.max").write_text("max")
        finally:
            probe.rmdir()
        return own, ""
    except (OSError, IndexError) as exc:
        return None, f"cgroup v2 not writable ({exc.strerror or exc})"


class _Attempt:
    """One running attempt: the process, its limits and the peaks measured so far."""

    def __init__(self, spec: TaskSpec, allocation: Resources, workdir: Path, cpus: list[int],
                 executor: LocalExecutor) -> None:
        self.spec, self.allocation = spec, allocation
        self.sandbox = Path(tempfile.mkdtemp(prefix="task-", dir=workdir))
        self.result_file = self._beside(".result")
        self.out = open(self._beside(".out"), "w+b")  # noqa: SIM115
        self.err = open(self._beside(".err"), "w+b")  # noqa: SIM115
        self.peak_rss = 0.0
        self.peak_disk = 0
        self.killed_for: tuple[str, ...] = ()
        self.samples = 0
        self.rusage: Any = None
        self.wall = 0.0
        self.cgroup = executor._new_cgroup(allocation)
        argv = self._argv()
        limit = None
        if executor.rlimit:
            limit = int((allocation.memory + executor.as_headroom) * 2**20)
        self.enforcement = executor.describe(self.cgroup is not None, limit is not None)
        self.started = time.perf_counter()
        env = dict(os.environ)  # the child must import the callable's module as we do
        paths = (os.path.abspath(p or ".") for p in sys.path)
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if os.path.isdir(p))
        try:
            self.proc = subprocess.Popen(argv, cwd=self.sandbox, stdout=self.out,
                                         stderr=self.err, env=env,
                                         preexec_fn=_limits(limit, cpus, self.cgroup))
        except OSError as exc:  # no such program, not executable, ...
            self.close(False)
            raise BadInputError(f"cannot start {argv[0]!r}: {exc.strerror or exc}",
                                field="command") from None
        self.ps = psutil.Process(self.proc.pid)

    def _argv(self) -> list[str]:
        if self.spec.command is not None:
            return [str(a) for a in self.spec.command]
        payload = self._beside(".call")
        try:
            payload.write_bytes(pickle.dumps((self.spec.function, self.spec.args,
                                              self.spec.kwargs)))
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise BadInputError(f"cannot send the callable to a subprocess ({exc}); use a "
                                "module-level function", field=self.spec.task_id) from exc
        # by path, not -m: importing the schedlab package would inflate the child's baseline.
        # -P: without it the script's folder (this package, which has a types.py) would shadow
        # the standard library's ``types`` in the child.
        return [sys.executable, "-P", str(Path(runner.__file__)), str(payload),
                str(self.result_file)]

    def _beside(self, suffix: str) -> Path:
        """A file next to (not inside) the sandbox, so it does not count as the task's disk."""
        return self.sandbox.parent / (self.sandbox.name + suffix)

    def sample(self, disk_every: int) -> None:
        """Measure the tree's RSS (and every ``disk_every`` samples the sandbox); kill if over."""
        rss = 0
        for proc in _tree(self.ps):
            with contextlib.suppress(psutil.Error):
                rss += proc.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss / 2**20, _high_water_mb(self.proc.pid))
        self.samples += 1
        if self.samples % disk_every == 0:
            self.peak_disk = max(self.peak_disk, _sandbox_bytes(self.sandbox))
        over = []
        if self.peak_rss > self.allocation.memory:
            over.append("memory")
        if self.peak_disk / 2**20 > self.allocation.disk:
            over.append("disk")
        if over and not self.killed_for:
            self.killed_for = tuple(over)
            self.kill()

    def kill(self) -> None:
        for proc in reversed(_tree(self.ps)):
            with contextlib.suppress(psutil.Error):
                proc.kill()

    def poll(self) -> bool:
        """Reap the process if it ended (wait4 also gives its CPU time and max RSS)."""
        if self.rusage is not None:
            return True
        pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        if pid == 0:
            return False
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.wall = time.perf_counter() - self.started
        self.rusage = usage
        return True

    def finish(self, semantics: str) -> tuple[ResourceReport, int]:
        """The attempt's report (usage as the monitor saw it) and the exit code."""
        while not self.poll():
            time.sleep(0.001)
        code, wall, usage_info = self.proc.returncode, self.wall, self.rusage
        self.peak_disk = max(self.peak_disk, _sandbox_bytes(self.sandbox))
        # CPU time from wait4; not ru_maxrss, which counts the parent's pages copied at fork
        cpu = usage_info.ru_utime + usage_info.ru_stime
        if self.result_file.exists():  # the callable's own exact peak (VmHWM)
            with contextlib.suppress(Exception):
                self.peak_rss = max(self.peak_rss, pickle.loads(self.result_file.read_bytes())[2])
        self.peak_rss = max(self.peak_rss, self._cgroup_peak_mb())
        exceeded = set(self.killed_for)
        if (code == MEMORY_ERROR_EXIT or self._cgroup_oom()
                or self.peak_rss > self.allocation.memory):
            exceeded.add("memory")
        if self.peak_disk / 2**20 > self.allocation.disk:
            exceeded.add("disk")
        usage = Resources(cpu / wall if wall > 0 else 0.0, self.peak_rss, self.peak_disk / 2**20)
        if exceeded and semantics == "allocation":
            usage = Resources(*(self.allocation.get(n) if n in exceeded else usage.get(n)
                                for n in ("cores", "memory", "disk")))
        ordered = tuple(n for n in ("cores", "memory", "disk") if n in exceeded)
        return ResourceReport(self.allocation, usage, wall, ordered), code

    def _cgroup_peak_mb(self) -> float:
        """The cgroup's exact peak (``memory.peak``, Linux >= 5.19), 0 when unavailable."""
        if self.cgroup is None:
            return 0.0
        with contextlib.suppress(OSError, ValueError):
            return int((self.cgroup / "memory.peak").read_text().split()[0]) / 2**20
        return 0.0

    def _cgroup_oom(self) -> bool:
        if self.cgroup is None:
            return False
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in (self.cgroup / "memory.events").read_text().splitlines():
                key, value = line.split()
                if key == "oom_kill" and int(value) > 0:
                    return True
        return False

    def close(self, keep_output: bool) -> tuple[str, str]:
        texts = []
        for handle in (self.out, self.err):
            handle.seek(0)
            texts.append(handle.read().decode(errors="replace") if keep_output else "")
            handle.close()
            with contextlib.suppress(OSError):
                os.unlink(handle.name)
        shutil.rmtree(self.sandbox, ignore_errors=True)
        for suffix in (".call", ".result"):
            with contextlib.suppress(OSError):
                os.unlink(self._beside(suffix))
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.rmdir()
        return texts[0], texts[1]


def _limits(as_bytes: int | None, cpus: list[int], cgroup: Path | None) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))
        if as_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
        if cpus:
            os.sched_setaffinity(0, cpus)

    return apply


class LocalExecutor:
    """Runs tasks as subprocesses under predicted allocations, retrying those that exceed them.

    ``parallel`` attempts run at once (first come, first served; a retry goes first). The
    allocator is any :class:`~schedlab.xbucket.policies.Allocator`; allocations are capped at
    ``machine``. ``semantics`` chooses what a killed attempt reports for the exceeded type:
    ``allocation`` (what a live monitor sees, the default) or ``peak`` (the most it measured).
    """

    def __init__(self, allocator: Allocator, machine: Machine | None = None, parallel: int = 1,
                 poll: float = 0.01, disk_every: int = 5, rlimit: bool = False,
                 as_headroom: float = 512.0, semantics: str = "allocation",
                 max_attempts: int = 16, workdir: str | Path | None = None,
                 keep_output: bool = True, cgroups: bool = True) -> None:
        if parallel < 1:
            raise BadInputError("must be at least 1", field="parallel")
        if semantics not in ("peak", "allocation"):
            raise BadInputError("must be 'peak' or 'allocation'", field="semantics")
        self.allocator, self.parallel, self.poll = allocator, parallel, poll
        cpus = sorted(os.sched_getaffinity(0))
        self.machine = machine or Machine(float(len(cpus)),
                                          psutil.virtual_memory().total / 2**20, 65536.0)
        self.cpus, self.disk_every, self.rlimit = cpus, disk_every, rlimit
        self.as_headroom, self.semantics, self.max_attempts = as_headroom, semantics, max_attempts
        self.workdir, self.keep_output = workdir, keep_output
        self._cgroups, self._no_cgroup = _cgroup_parent() if cgroups else (None, "not asked")
        self._serial = 0

    def describe(self, cgroup: bool, rlimit: bool) -> str:
        """The memory-enforcement path, in words (what ``ExecutionRecord.enforcement`` holds)."""
        parts = ["cgroup v2 memory.max + memory.peak"] if cgroup else []
        parts.append("psutil RSS watchdog")
        if rlimit:
            parts.append("RLIMIT_AS")
        text = " + ".join(parts)
        if not cgroup:
            text += f" (cgroup v2 unavailable: {self._no_cgroup or 'child cgroup creation failed'})"
        return text

    @property
    def memory_enforcement(self) -> str:
        return self.describe(self._cgroups is not None, self.rlimit)

    def _new_cgroup(self, allocation: Resources) -> Path | None:
        if self._cgroups is None:
            return None
        self._serial += 1
        group = self._cgroups / f"xbucket-{os.getpid()}-{self._serial}"
        try:
            group.mkdir()
            (group / "memory.max").write_text(str(int(allocation.memory * 2**20)))
            with contextlib.suppress(OSError):  # absent when swap accounting is off
                (group / "memory.swap.max").write_text("0")
        except OSError:
            with contextlib.suppress(OSError):
                group.rmdir()
            return None
        return group

    def _cpus_for(self, cores: float, slot: int) -> list[int]:
        want = max(1, min(len(self.cpus), math.ceil(cores)))
        start = (slot * want) % len(self.cpus)
        return [self.cpus[(start + i) % len(self.cpus)] for i in range(want)]

    def run(self, tasks: Sequence[TaskSpec]) -> list[ExecutionRecord]:
        """Run every task to success (or to a non-resource failure); one record per task."""
        records = {t.task_id: ExecutionRecord(t.task_id) for t in tasks}
        if len(records) != len(tasks):
            raise BadInputError("task ids must be unique", field="task_id")
        queue: list[tuple[TaskSpec, ResourceReport | None]] = [(t, None) for t in tasks]
        running: list[_Attempt] = []
        with tempfile.TemporaryDirectory(prefix="xbucket-", dir=self.workdir) as workdir:
            try:
                while queue or running:
                    while queue and len(running) < self.parallel:
                        spec, failed = queue.pop(0)
                        allocation = self.allocator.allocate(spec.category, failed)
                        allocation = _cap(allocation, self.machine.resources)
                        cpus = self._cpus_for(allocation.cores, len(running))
                        running.append(_Attempt(spec, allocation, Path(workdir), cpus, self))
                    time.sleep(self.poll)
                    for attempt in list(running):
                        if not attempt.poll():
                            attempt.sample(self.disk_every)
                            continue
                        running.remove(attempt)
                        retry = self._settle(attempt, records[attempt.spec.task_id])
                        if retry is not None:
                            queue.insert(0, (attempt.spec, retry))
            finally:
                for attempt in running:
                    attempt.kill()
                    attempt.finish(self.semantics)
                    attempt.close(False)
        return [records[t.task_id] for t in tasks]

    def _settle(self, attempt: _Attempt, record: ExecutionRecord) -> ResourceReport | None:
        """Record a finished attempt, teach the allocator; the report to retry with, if any."""
        report, code = attempt.finish(self.semantics)
        record.attempts.append(report)
        record.enforcement = attempt.enforcement
        self.allocator.observe(attempt.spec.category, report)
        if report.exceeded:
            attempt.close(False)
            if len(record.attempts) >= self.max_attempts:
                raise SchedlabError(f"task {record.task_id} exceeded its allocation "
                                    f"{len(record.attempts)} times", field="max_attempts")
            return report
        record.returncode = code
        if attempt.result_file.exists():
            status, value, _ = pickle.loads(attempt.result_file.read_bytes())
            if status == "ok":
                record.value = value
            else:
                record.stderr = value
        out, err = attempt.close(self.keep_output)
        record.stdout, record.stderr = out, record.stderr or err
        return None


def _cap(allocation: Resources, machine: Resources) -> Resources:
    return Resources(*(min(max(a, 0.0), m) for a, m in
                       zip(allocation.as_tuple(), machine.as_tuple(), strict=True)))
