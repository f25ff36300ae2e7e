"""X-Bucket inside Parsl: ``XBucketExecutor``, a Parsl executor that sizes every app by X-Bucket.

X-Bucket (../shared/papers/15-xbucket.md) was built into WorkQueue/TaskVine; a Parsl user gets
cctools' own bucketing from ``TaskVineManagerConfig(autolabel=True,
autolabel_algorithm='bucketing')``. This module is the same idea without a TaskVine manager:
each app invocation runs as a subprocess of this machine under the allocation the chosen
allocator predicts for its *category*, enforced as in :class:`~schedlab.xbucket.executor.
LocalExecutor` (cgroup v2 where writable, else an RSS watchdog; disk = sandbox bytes), killed
and retried upward when it exceeds it, and its measured peaks are fed back per category. The
future Parsl gets resolves with the app's return value (or raises its exception) once an
attempt fits.

Category: ``parsl_resource_specification={"category": "blast"}`` on the call, else the app's
function name. Apps travel to a fresh interpreter by pickle, or by dill as Parsl's own executors
send them (so ``@python_app``/``@bash_app``-decorated functions, closures and functions of
``__main__`` work; the latter import what they use inside their body, Parsl's rule). A
``bash_app`` runs through Parsl's own ``remote_side_bash_executor`` in the child (so ``stdout``/
``stderr`` redirection, ``BashExitFailure`` and ``MissingOutputs`` are Parsl's), its command's
memory is enforced with the rest of the attempt's process tree, and the interpreter that starts
bash (about 55 MB with Parsl loaded) counts in its peak, as under Parsl's own workers.
``join_app`` runs in Parsl's internal thread pool, never here; the apps it returns and every
dependency between apps are resolved by Parsl's DataFlowKernel before ``submit``. The app's
exception reaches its future as the same exception type (the child's traceback as a note).
Parsl's ``wrap_error`` and ``walltime`` wrappers are unwrapped; ``walltime`` (the app's keyword,
as Parsl defines it) is enforced here instead: each attempt past it has its whole process tree
killed, and the task fails at once (no retry) with :class:`AppWalltimeExceeded`, a Parsl
``AppTimeout`` naming the task and the limit.

A task whose attempt at the worker's cap (``machine``) still exceeds it fails at once with
:class:`~schedlab.xbucket.executor.TaskTooLargeError` through its future. Should the dispatch
thread itself fail, every future it holds or has queued fails with :class:`DispatchError` (and
later submissions fail at once): nothing is left pending.

    from parsl import Config, python_app, load
    from schedlab.xbucket.parsl import XBucketExecutor
    load(Config(executors=[XBucketExecutor(algorithm="pe-bucket", parallel=4)]))
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any

from parsl.app.errors import AppTimeout
from parsl.executors.base import ParslExecutor

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.xbucket.executor import (
    ExecutionRecord,
    LocalExecutor,
    TaskSpec,
    WalltimeExceededError,
    _Attempt,
    _cap,
)
from schedlab.xbucket.policies import Allocator, make_allocator
from schedlab.xbucket.types import Defaults, Machine, ResourceReport


class AppFailed(RuntimeError):
    """The app failed and its own exception could not be rebuilt here (or a command exited
    non-zero); the child's traceback is the message."""


class AppWalltimeExceeded(WalltimeExceededError, AppTimeout):
    """An app ran past its ``walltime``: killed, with its children (Parsl's ``AppTimeout``)."""


class DispatchError(SchedlabError):
    """The executor's dispatch thread died; every task it held fails with this."""


def _resolve(future: Future, value: Any = None, error: BaseException | None = None) -> None:
    """Settle a future once; a cancelled or already-settled one is left alone."""
    if future.done():
        return
    with contextlib.suppress(InvalidStateError):
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)


class XBucketExecutor(ParslExecutor):
    """Run Parsl apps under X-Bucket allocations on this machine, with kill-and-retry.

    ``algorithm`` names an allocator (``pe-bucket``, ``de-bucket``, ...; see
    ``schedlab.xbucket.ALLOCATORS``) or ``allocator`` passes one. ``parallel`` attempts run at
    once; the other arguments are those of :class:`LocalExecutor` (``machine`` is the worker:
    the cap of every allocation). ``records`` keeps every task's attempts (allocation, usage,
    exceeded) for inspection.
    """

    def __init__(self, label: str = "xbucket", algorithm: str = "pe-bucket",
                 allocator: Allocator | None = None, defaults: Defaults | None = None,
                 machine: Machine | None = None, parallel: int = 1, poll: float = 0.01,
                 semantics: str = "allocation", max_attempts: int = 16,
                 workdir: str | Path | None = None, seed: int = 0,
                 **local: Any) -> None:
        super().__init__()
        self.label = label
        allocator = allocator or make_allocator(algorithm, defaults=defaults, seed=seed)
        self.local = LocalExecutor(allocator, machine=machine, parallel=parallel, poll=poll,
                                   semantics=semantics, max_attempts=max_attempts,
                                   workdir=workdir, **local)
        self.records: dict[str, ExecutionRecord] = {}
        self._queue: deque[tuple[TaskSpec, ResourceReport | None, Future]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._broken: DispatchError | None = None
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None

    @property
    def allocator(self) -> Allocator:
        return self.local.allocator

    @property
    def memory_enforcement(self) -> str:
        return self.local.memory_enforcement

    def monitor_resources(self) -> bool:
        return False  # we measure the process tree ourselves

    def start(self) -> None:
        if self._thread is not None:
            return
        self._tmp = tempfile.TemporaryDirectory(prefix="xbucket-parsl-",
                                                dir=self.local.workdir)
        self._thread = threading.Thread(target=self._loop, name=f"{self.label}-dispatch",
                                        daemon=True)
        self._thread.start()

    def submit(self, func: Callable, resource_specification: dict[str, Any], *args: Any,
               **kwargs: Any) -> Future:
        spec_in = dict(resource_specification or {})
        # Parsl hands us its wrappers (wrap_error, walltime) made with functools.wraps; a bash
        # app's is partial(remote_side_bash_executor, func), named after the user's function
        target = inspect.unwrap(func)
        category = spec_in.pop("category", None) or getattr(target, "__name__", "default")
        if spec_in:
            raise BadInputError(f"unsupported keys {sorted(spec_in)}; only 'category'",
                                field="parsl_resource_specification")
        task_id = f"{category}-{next(self._ids)}"
        future: Future = Future()
        future.parsl_executor_task_id = task_id  # type: ignore[attr-defined]
        kwargs.pop("parsl_resource_specification", None)  # Parsl leaves it in the app's kwargs
        # walltime stays in the kwargs: Parsl passes it on to the app (and a bash app's own
        # remote side reads it); we enforce it on the attempt's whole process tree
        try:
            spec = TaskSpec(task_id, str(category), function=target, args=tuple(args),
                            kwargs=dict(kwargs), walltime=kwargs.get("walltime"))
        except BadInputError as exc:
            _resolve(future, error=exc)
            return future
        with self._lock:
            if self._broken is not None:
                _resolve(future, error=self._broken)
                return future
            self.records[task_id] = ExecutionRecord(task_id)
            self._queue.append((spec, None, future))
        if self._thread is None:
            self.start()
        self._wake.set()
        return future

    def _loop(self) -> None:
        running: list[tuple[_Attempt, Future]] = []
        try:
            self._dispatch(running)
        except BaseException as exc:  # the safety net: no future may be stranded
            self._fail_all(running, exc)

    def _fail_all(self, running: list[tuple[_Attempt, Future]], exc: BaseException) -> None:
        error = DispatchError(f"the {self.label} dispatch thread failed: {exc!r}")
        error.__cause__ = exc
        with self._lock:
            self._broken = error
            queued = [future for _spec, _failed, future in self._queue]
            self._queue.clear()
        for attempt, future in running:
            with contextlib.suppress(Exception):
                attempt.kill()
            with contextlib.suppress(Exception):
                attempt.finish(self.local.semantics)
            attempt.close(False)
            _resolve(future, error=error)
        for future in queued:
            _resolve(future, error=error)

    def _start_one(self, spec: TaskSpec, failed: ResourceReport | None, future: Future,
                   running: list[tuple[_Attempt, Future]], workdir: Path) -> None:
        """Allocate and start one attempt; a failure here fails that task alone."""
        local = self.local
        try:
            allocation = _cap(local.allocator.allocate(spec.category, failed),
                              local.machine.resources)
            cpus = local._cpus_for(allocation.cores, len(running))
            running.append((_Attempt(spec, allocation, workdir, cpus, local), future))
        except Exception as exc:
            _resolve(future, error=exc)

    def _dispatch(self, running: list[tuple[_Attempt, Future]]) -> None:
        assert self._tmp is not None
        workdir = Path(self._tmp.name)
        local = self.local
        while True:
            with self._lock:
                if self._stop and not running:
                    pending = list(self._queue)
                    self._queue.clear()
                    break
                starts = []
                while self._queue and len(running) + len(starts) < local.parallel \
                        and not self._stop:
                    starts.append(self._queue.popleft())
            for spec, failed, future in starts:
                self._start_one(spec, failed, future, running, workdir)
            if not running:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            time.sleep(local.poll)
            for item in list(running):
                attempt, future = item
                if self._stop and attempt.poll():  # shutting down: drop, do not retry
                    running.remove(item)
                    with contextlib.suppress(Exception):
                        attempt.finish(local.semantics)
                    attempt.close(False)
                    future.cancel()
                    continue
                if not attempt.poll():
                    if self._stop:
                        attempt.kill()
                    else:
                        attempt.sample(local.disk_every)
                    continue
                running.remove(item)
                self._settle(attempt, future)
        for _spec, _failed, future in pending:
            future.cancel()

    def _settle(self, attempt: _Attempt, future: Future) -> None:
        record = self.records[attempt.spec.task_id]
        try:
            retry = self.local._settle(attempt, record)
        except Exception as exc:  # e.g. an allocator's observe raised: this task fails
            attempt.close(False)
            _resolve(future, error=exc)
            return
        if retry is not None:
            with self._lock:
                self._queue.appendleft((attempt.spec, retry, future))
            return
        if isinstance(record.exception, WalltimeExceededError):
            error = record.exception
            record.exception = AppWalltimeExceeded(error.task_id, error.walltime, error.elapsed)
        if record.succeeded:
            _resolve(future, record.value)
        else:
            _resolve(future, error=record.exception or AppFailed(
                record.stderr.strip() or f"exit status {record.returncode}"))

    def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()
            self._tmp = None
        super().shutdown()
