"""Run real tasks under the allocations an allocator predicts; kill, retry and learn.

The real-execution half of X-Bucket (../shared/papers/15-xbucket.md: the paper runs inside
WorkQueue/TaskVine). Each attempt is a subprocess started in its own sandbox directory:

* memory, as real monitors do it (resident memory, never address space):

  - a kernel memory cgroup per attempt where this process may create one (``cgroups.py``):
    cgroup v2 (``memory.max``, swap off) where the v2 memory controller is delegated to us,
    else cgroup v1 (``memory.limit_in_bytes`` and ``memory.memsw.limit_in_bytes``); the kernel
    OOM-kills the attempt at its allocation, which marks it exceeded, and the group's peak is
    what the killed attempt reports. The group covers every descendant, so a short spike in a
    grandchild between two samples is still caught;
  - always, a psutil sampler of the RSS of the task's process tree every ``poll`` seconds
    (plus each process's kernel VmHWM): the peak a successful attempt reports (a cgroup's own
    peak also counts page cache, which the kernel reclaims rather than kill for), and, where no
    cgroup could be made, the enforcement itself (it kills the tree above the allocation);
  - RLIMIT_AS (allocation + ``as_headroom`` MB) only when asked (``rlimit=True``): off by
    default, because a task that *reserves* far more address space than it uses (JVM, Go,
    CUDA, PyTorch, a large ``mmap``) would fail as an ordinary error.

  ``ExecutionRecord.enforcement`` (and ``LocalExecutor.memory_enforcement``) says which path
  ran, e.g. ``cgroup v1 memory.limit_in_bytes + memory.max_usage_in_bytes + psutil RSS
  sampler (cgroup v2 unavailable: ...)`` or ``psutil RSS watchdog (no memory cgroup: ...)``;
* cores: CPU affinity to ceil(cores) CPUs. A task cannot exceed it, so cores never fail an
  attempt; the measured usage is CPU time / wall time (as cctools' resource monitor reports);
* disk: bytes under the sandbox, checked every ``disk_every`` samples; above the allocation
  the task is killed.

The measured peaks go back to the allocator through ``observe``; a killed attempt is retried
with ``last_failed`` so the next allocation grows. An attempt killed while it already held the
whole worker of the exceeded type cannot grow: the task fails at once with
:class:`TaskTooLargeError` (task, type, measured peak, cap) instead of being retried at the same
cap. A task with a ``walltime`` has each attempt's tree killed past it and fails with
:class:`WalltimeExceededError` (no retry). Python callables run in a fresh interpreter
(``runner.py``, started by path): sent with pickle, or with dill (as Parsl sends apps) when
pickle cannot, e.g. a decorated function.
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
from schedlab.xbucket.cgroups import MemoryCgroups, detect
from schedlab.xbucket.policies import Allocator
from schedlab.xbucket.runner import MEMORY_ERROR_EXIT
from schedlab.xbucket.types import RESOURCES, Machine, ResourceReport, Resources


class TaskTooLargeError(SchedlabError):
    """A task exceeded an allocation that was already the whole worker: no retry can fit it."""

    def __init__(self, task_id: str, resource: str, peak: float, cap: float) -> None:
        unit = "" if resource == "cores" else " MB"
        super().__init__(f"task {task_id} needs more {resource} than a worker has: its attempt "
                         f"at the cap of {cap:g}{unit} was killed at a peak of {peak:.0f}{unit}",
                         field=resource)
        self.task_id, self.resource, self.peak, self.cap = task_id, resource, peak, cap

    def __reduce__(self):
        return (TaskTooLargeError, (self.task_id, self.resource, self.peak, self.cap))


class WalltimeExceededError(SchedlabError):
    """An attempt ran past its task's walltime: its process tree was killed; not retried."""

    def __init__(self, task_id: str, walltime: float, elapsed: float) -> None:
        super().__init__(f"task {task_id} exceeded its walltime of {walltime:g} s: killed "
                         f"after {elapsed:.2f} s", field="walltime")
        self.task_id, self.walltime, self.elapsed = task_id, walltime, elapsed

    def __reduce__(self):
        return (type(self), (self.task_id, self.walltime, self.elapsed))


@dataclass
class TaskSpec:
    """A real task: a command (argv list) or an importable Python callable with its arguments.

    ``walltime`` (seconds, optional): each attempt's limit; past it the attempt's process tree
    is killed and the task fails with :class:`WalltimeExceededError` (no retry)."""

    task_id: str
    category: str = "default"
    command: Sequence[str] | None = None
    function: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    walltime: float | None = None

    def __post_init__(self) -> None:
        if (self.command is None) == (self.function is None):
            raise BadInputError("give exactly one of command or function", field="task")
        if self.walltime is not None:
            try:
                self.walltime = float(self.walltime)
            except (TypeError, ValueError):
                raise BadInputError(f"task {self.task_id}: must be a number of seconds, got "
                                    f"{self.walltime!r}", field="walltime") from None
            if not self.walltime > 0:
                raise BadInputError(f"task {self.task_id}: must be positive, got "
                                    f"{self.walltime:g}", field="walltime")


@dataclass
class ExecutionRecord:
    """Every attempt of one task and its outcome (return value or exit code, and output).

    ``exception``: what the callable raised (rebuilt in this process, its remote traceback as a
    note), or why the executor gave up on the task (:class:`TaskTooLargeError`, too many
    attempts); None on success."""

    task_id: str
    attempts: list[ResourceReport] = field(default_factory=list)
    returncode: int | None = None
    value: Any = None
    stdout: str = ""
    stderr: str = ""
    enforcement: str = ""  # how memory was enforced on its last attempt
    exception: BaseException | None = None

    @property
    def succeeded(self) -> bool:
        return self.returncode == 0 and self.exception is None


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


def _payload(spec: TaskSpec) -> bytes:
    """The callable and its arguments for the child: pickle (by reference, light to load), else
    dill (by value, as Parsl serialises apps: decorated functions, closures, ``__main__``)."""
    call = (spec.function, spec.args, spec.kwargs)
    try:
        return b"P" + pickle.dumps(call)
    except (pickle.PicklingError, AttributeError, TypeError) as first:
        try:
            import dill
        except ImportError:
            raise BadInputError(f"cannot send the callable to a subprocess ({first}); use a "
                                "module-level function or install dill",
                                field=spec.task_id) from first
        try:
            return b"D" + dill.dumps(call)
        except Exception as exc:  # dill raises many kinds
            raise BadInputError(f"cannot send the callable to a subprocess ({exc})",
                                field=spec.task_id) from exc


def _outcome(path: Path) -> tuple[str, Any, float]:
    """What the runner wrote: ("ok", value, peak MB), ("error", (traceback, exception bytes),
    peak MB), or ("none", None, 0) for a command or a child that died before writing."""
    try:
        raw = path.read_bytes()
    except OSError:
        return "none", None, 0.0
    try:
        status, value, peak = pickle.loads(raw)
        return str(status), value, float(peak)
    except Exception as exc:  # e.g. the value's class does not import here
        return "error", (f"cannot read the task's result: {exc!r}", None), 0.0


def _rebuild(payload: Any) -> tuple[BaseException | None, str]:
    """The child's exception (pickled bytes) rebuilt here, and its traceback text."""
    text, raw = payload if isinstance(payload, tuple) else (str(payload), None)
    if raw is None:
        return None, text
    try:
        exc = pickle.loads(raw)
    except Exception:  # its class may not import here: keep the text
        return None, text
    if isinstance(exc, BaseException):
        exc.add_note(f"remote traceback:\n{text.rstrip()}")
        return exc, text
    return None, text


class _Attempt:
    """One running attempt: the process, its limits and the peaks measured so far."""

    def __init__(self, spec: TaskSpec, allocation: Resources, workdir: Path, cpus: list[int],
                 executor: LocalExecutor) -> None:
        self.spec, self.allocation = spec, allocation
        self.cgroups = executor._cgroups
        self.cgroup: Path | None = None
        self._closed = False
        self.sandbox = Path(tempfile.mkdtemp(prefix="task-", dir=workdir))
        self.result_file = self._beside(".result")
        self.out = open(self._beside(".out"), "w+b")  # noqa: SIM115
        self.err = open(self._beside(".err"), "w+b")  # noqa: SIM115
        self.peak_rss = 0.0
        self.peak_disk = 0
        self.killed_for: tuple[str, ...] = ()
        self.timed_out = False  # killed at its walltime
        self.samples = 0
        self.rusage: Any = None
        self.wall = 0.0
        self.measured = Resources(0.0, 0.0, 0.0)  # what the monitor saw, before semantics
        self.outcome: tuple[str, Any, float] = ("none", None, 0.0)
        try:
            argv = self._argv()
            self.cgroup = executor._new_cgroup(allocation)
            limit = None
            if executor.rlimit:
                limit = int((allocation.memory + executor.as_headroom) * 2**20)
            self.enforcement = executor.describe(self.cgroup is not None, limit is not None)
            self.started = time.perf_counter()
            env = dict(os.environ)  # the child must import the callable's module as we do
            paths = (os.path.abspath(p or ".") for p in sys.path)
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if os.path.isdir(p))
            self.proc = subprocess.Popen(argv, cwd=self.sandbox, stdout=self.out,
                                         stderr=self.err, env=env,
                                         preexec_fn=_limits(limit, cpus, self.cgroup))
        except OSError as exc:  # no such program, not executable, ...
            self.close(False)
            program = spec.command[0] if spec.command else sys.executable
            raise BadInputError(f"cannot start {program!r}: {exc.strerror or exc}",
                                field="command") from None
        except BaseException:
            self.close(False)
            raise
        self.ps = psutil.Process(self.proc.pid)

    def _argv(self) -> list[str]:
        if self.spec.command is not None:
            return [str(a) for a in self.spec.command]
        payload = self._beside(".call")
        payload.write_bytes(_payload(self.spec))
        # by path, not -m: importing the schedlab package would inflate the child's baseline.
        # -P: without it the script's folder (this package, which has a types.py) would shadow
        # the standard library's ``types`` in the child.
        return [sys.executable, "-P", str(Path(runner.__file__)), str(payload),
                str(self.result_file)]

    def _beside(self, suffix: str) -> Path:
        """A file next to (not inside) the sandbox, so it does not count as the task's disk."""
        return self.sandbox.parent / (self.sandbox.name + suffix)

    def sample(self, disk_every: int) -> None:
        """Measure the tree's RSS (and every ``disk_every`` samples the sandbox); kill if over.

        Memory is only killed for here when no cgroup enforces it: a tree's summed RSS counts
        shared pages once per process, so it may overstate what the kernel charges.
        Past the task's walltime the whole tree is killed (``timed_out``)."""
        walltime = self.spec.walltime
        if walltime is not None and not self.timed_out \
                and time.perf_counter() - self.started > walltime:
            self.timed_out = True
            self.kill()
            return
        rss, high = 0, 0.0
        for proc in _tree(self.ps):
            with contextlib.suppress(psutil.Error):
                rss += proc.memory_info().rss
                high = max(high, _high_water_mb(proc.pid))
        self.peak_rss = max(self.peak_rss, rss / 2**20, high)
        self.samples += 1
        if self.samples % disk_every == 0:
            self.peak_disk = max(self.peak_disk, _sandbox_bytes(self.sandbox))
        over = []
        if self.cgroup is None and self.peak_rss > self.allocation.memory:
            over.append("memory")
        if self.peak_disk / 2**20 > self.allocation.disk:
            over.append("disk")
        if over and not self.killed_for:
            self.killed_for = tuple(over)
            self.kill()

    def kill(self) -> None:
        """Stop the whole tree, parents first, then kill it: a shell whose child died first
        must not go on to its next command (``sleep 60; echo late`` printed ``late``)."""
        tree = _tree(self.ps)
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.suspend()
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                proc.kill()

    def poll(self) -> bool:
        """Reap the process if it ended (wait4 also gives its CPU time and max RSS)."""
        if self.rusage is not None:
            return True
        try:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: count it as ended, without usage
            self.proc.returncode, self.rusage = -1, resource.struct_rusage((0.0,) * 16)
            self.wall = time.perf_counter() - self.started
            return True
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
        self.outcome = _outcome(self.result_file)
        self.peak_rss = max(self.peak_rss, self.outcome[2])  # the callable's own VmHWM
        exceeded = set(self.killed_for)
        if self.cgroup is not None and self.cgroups is not None:
            if self.cgroups.oom_killed(self.cgroup):
                exceeded.add("memory")
                self.peak_rss = max(self.peak_rss, self.cgroups.peak_mb(self.cgroup))
        elif self.peak_rss > self.allocation.memory:
            exceeded.add("memory")
        if code == MEMORY_ERROR_EXIT:
            exceeded.add("memory")
        if self.peak_disk / 2**20 > self.allocation.disk:
            exceeded.add("disk")
        memory = self.peak_rss
        if "memory" not in exceeded:  # a cgroup let it through: it fitted, whatever RSS says
            memory = min(memory, self.allocation.memory)
        usage = Resources(cpu / wall if wall > 0 else 0.0, memory, self.peak_disk / 2**20)
        self.measured = usage
        if exceeded and semantics == "allocation":
            usage = Resources(*(self.allocation.get(n) if n in exceeded else usage.get(n)
                                for n in RESOURCES))
        ordered = tuple(n for n in RESOURCES if n in exceeded)
        return ResourceReport(self.allocation, usage, wall, ordered), code

    def close(self, keep_output: bool) -> tuple[str, str]:
        """Output texts (when kept), then every file, the sandbox and the cgroup removed.
        Idempotent, and never raises: a cleanup error must not kill the dispatcher."""
        if self._closed:
            return "", ""
        self._closed = True
        texts = []
        for handle in (self.out, self.err):
            text = ""
            with contextlib.suppress(OSError, ValueError):
                handle.seek(0)
                text = handle.read().decode(errors="replace") if keep_output else ""
            texts.append(text)
            with contextlib.suppress(OSError, ValueError):
                handle.close()
            with contextlib.suppress(OSError):
                os.unlink(handle.name)
        shutil.rmtree(self.sandbox, ignore_errors=True)
        for suffix in (".call", ".result"):
            with contextlib.suppress(OSError):
                os.unlink(self._beside(suffix))
        if self.cgroup is not None and self.cgroups is not None:
            self.cgroups.remove(self.cgroup)
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
    A task that cannot fit a worker, or exceeds ``max_attempts`` times, ends with its
    ``ExecutionRecord.exception`` set; the other tasks go on.
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
        if max_attempts < 1:
            raise BadInputError("must be at least 1", field="max_attempts")
        self.allocator, self.parallel, self.poll = allocator, parallel, poll
        cpus = sorted(os.sched_getaffinity(0))
        self.machine = machine or Machine(float(len(cpus)),
                                          psutil.virtual_memory().total / 2**20, 65536.0)
        self.cpus, self.disk_every, self.rlimit = cpus, disk_every, rlimit
        self.as_headroom, self.semantics, self.max_attempts = as_headroom, semantics, max_attempts
        self.workdir, self.keep_output = workdir, keep_output
        self._cgroups: MemoryCgroups | None
        self._cgroups, self._no_cgroup = detect() if cgroups else (None, "not asked")
        self._serial = 0

    def describe(self, cgroup: bool, rlimit: bool) -> str:
        """The memory-enforcement path, in words (what ``ExecutionRecord.enforcement`` holds)."""
        parts = [self._cgroups.describe()] if cgroup and self._cgroups is not None else []
        parts.append("psutil RSS sampler" if parts else "psutil RSS watchdog")
        if rlimit:
            parts.append("RLIMIT_AS")
        text = " + ".join(parts)
        if self._cgroups is None:
            text += f" (no memory cgroup: {self._no_cgroup})"
        elif not cgroup:
            text += " (this attempt's cgroup could not be created)"
        elif self._no_cgroup:  # v1 ran: say why v2 did not
            text += " (" + self._no_cgroup.replace("v2: ", "cgroup v2 unavailable: ") + ")"
        return text

    @property
    def memory_enforcement(self) -> str:
        return self.describe(self._cgroups is not None, self.rlimit)

    def _new_cgroup(self, allocation: Resources) -> Path | None:
        if self._cgroups is None:
            return None
        self._serial += 1
        return self._cgroups.create(f"xbucket-{os.getpid()}-{self._serial}", allocation.memory)

    def _cpus_for(self, cores: float, slot: int) -> list[int]:
        want = max(1, min(len(self.cpus), math.ceil(cores)))
        start = (slot * want) % len(self.cpus)
        return [self.cpus[(start + i) % len(self.cpus)] for i in range(want)]

    def run(self, tasks: Sequence[TaskSpec]) -> list[ExecutionRecord]:
        """Run every task to success or to a final failure; one record per task, in order."""
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
                    with contextlib.suppress(Exception):
                        attempt.finish(self.semantics)
                    attempt.close(False)
        return [records[t.task_id] for t in tasks]

    def _settle(self, attempt: _Attempt, record: ExecutionRecord) -> ResourceReport | None:
        """Record a finished attempt, teach the allocator; the report to retry with, if any.

        A task ends here (``record.exception`` set, no retry) when it exceeded a type whose
        allocation already was the worker's cap, or after ``max_attempts`` attempts."""
        report, code = attempt.finish(self.semantics)
        record.attempts.append(report)
        record.enforcement = attempt.enforcement
        if attempt.timed_out:  # cut short: its peaks are a lower bound, not a record to learn
            record.returncode = code
            record.exception = WalltimeExceededError(record.task_id, attempt.spec.walltime or 0,
                                                     attempt.wall)
            out, err = attempt.close(self.keep_output)
            record.stdout, record.stderr = out, err
            return None
        try:
            self.allocator.observe(attempt.spec.category, report)
        finally:
            if report.exceeded:
                attempt.close(False)
        if report.exceeded:
            record.exception = self._give_up(attempt, record, report)
            return None if record.exception is not None else report
        record.returncode = code
        status, value, _ = attempt.outcome
        if status == "ok":
            record.value = value
        elif status == "error":
            record.exception, record.stderr = _rebuild(value)
        out, err = attempt.close(self.keep_output)
        record.stdout, record.stderr = out, record.stderr or err
        return None

    def _give_up(self, attempt: _Attempt, record: ExecutionRecord,
                 report: ResourceReport) -> SchedlabError | None:
        """Why the task must not be retried, or None."""
        cap = self.machine.resources
        for name in report.exceeded:
            if attempt.allocation.get(name) >= cap.get(name):
                peak = max(attempt.measured.get(name), attempt.allocation.get(name))
                return TaskTooLargeError(record.task_id, name, peak, cap.get(name))
        if len(record.attempts) >= self.max_attempts:
            return SchedlabError(f"task {record.task_id} exceeded its allocation "
                                 f"{len(record.attempts)} times", field="max_attempts")
        return None


def _cap(allocation: Resources, machine: Resources) -> Resources:
    return Resources(*(min(max(a, 0.0), m) for a, m in
                       zip(allocation.as_tuple(), machine.as_tuple(), strict=True)))
