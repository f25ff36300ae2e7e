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
function name. Apps must be importable module-level functions (``python_app(module.func)``), the
same rule as multiprocessing's spawn: the function travels to a fresh interpreter by reference.
Parsl's own wrappers around the function (error wrapping, file staging, ``walltime``) are
unwrapped, so file staging and ``walltime`` are not supported here.

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
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from parsl.executors.base import ParslExecutor

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.xbucket.executor import (
    ExecutionRecord,
    LocalExecutor,
    TaskSpec,
    _Attempt,
    _cap,
)
from schedlab.xbucket.policies import Allocator, make_allocator
from schedlab.xbucket.types import Defaults, Machine, ResourceReport


class AppFailed(RuntimeError):
    """The app raised (or exited non-zero); the child's traceback is the message."""


class XBucketExecutor(ParslExecutor):
    """Run Parsl apps under X-Bucket allocations on this machine, with kill-and-retry.

    ``algorithm`` names an allocator (``pe-bucket``, ``de-bucket``, ...; see
    ``schedlab.xbucket.ALLOCATORS``) or ``allocator`` passes one. ``parallel`` attempts run at
    once; the other arguments are those of :class:`LocalExecutor`. ``records`` keeps every
    task's attempts (allocation, usage, exceeded) for inspection.
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
        category = spec_in.pop("category", None) or getattr(inspect.unwrap(func), "__name__",
                                                            "default")
        if spec_in:
            raise BadInputError(f"unsupported keys {sorted(spec_in)}; only 'category'",
                                field="parsl_resource_specification")
        task_id = f"{category}-{next(self._ids)}"
        future: Future = Future()
        future.parsl_executor_task_id = task_id  # type: ignore[attr-defined]
        # Parsl hands us its wrappers (wrap_error, staging, walltime), made with functools.wraps:
        # the child runs the app's own function; its exception comes back through the future
        target = inspect.unwrap(func)
        kwargs.pop("parsl_resource_specification", None)  # Parsl leaves it in the app's kwargs
        spec = TaskSpec(task_id, str(category), function=target, args=tuple(args),
                        kwargs=dict(kwargs))
        with self._lock:
            self.records[task_id] = ExecutionRecord(task_id)
            self._queue.append((spec, None, future))
        if self._thread is None:
            self.start()
        self._wake.set()
        return future

    def _loop(self) -> None:
        assert self._tmp is not None
        workdir = Path(self._tmp.name)
        running: list[tuple[_Attempt, Future]] = []
        local = self.local
        while True:
            with self._lock:
                if self._stop and not running:
                    pending = list(self._queue)
                    self._queue.clear()
                    break
                while self._queue and len(running) < local.parallel and not self._stop:
                    spec, failed, future = self._queue.popleft()
                    try:
                        allocation = _cap(local.allocator.allocate(spec.category, failed),
                                          local.machine.resources)
                        cpus = local._cpus_for(allocation.cores, len(running))
                        running.append((_Attempt(spec, allocation, workdir, cpus, local),
                                        future))
                    except (SchedlabError, OSError) as exc:
                        future.set_exception(exc)
            if not running:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            time.sleep(local.poll)
            for item in list(running):
                attempt, future = item
                if self._stop and attempt.poll():  # shutting down: drop, do not retry
                    running.remove(item)
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
        except SchedlabError as exc:
            attempt.close(False)
            future.set_exception(exc)
            return
        if retry is not None:
            with self._lock:
                self._queue.appendleft((attempt.spec, retry, future))
            return
        if record.succeeded:
            future.set_result(record.value)
        else:
            future.set_exception(AppFailed(record.stderr.strip() or
                                           f"exit status {record.returncode}"))

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
