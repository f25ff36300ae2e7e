"""Where sweeps run: a local process pool (default) or a Ray cluster (``--executor ray``).

Both expose ``map_unordered(fn, items)`` yielding ``(index, value)`` as work finishes, so a
progress bar can advance per item and the caller re-orders by index. ``fn`` must be a
module-level function (it is pickled by reference). There is deliberately no home-made
distribution layer: beyond one machine, use Ray.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, Literal, Protocol

from schedlab.core.errors import ConfigError, MissingDependencyError

ExecutorKind = Literal["local", "ray"]


class Executor(Protocol):
    name: str

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]: ...

    def close(self) -> None: ...


def default_jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def _ignore_sigint() -> None:
    """Workers leave Ctrl-C to the parent, which cancels the sweep once, cleanly."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _children_born_ignoring_sigint() -> Iterator[None]:
    """The pool starts its workers on the first submit; a Ctrl-C that reaches a worker before
    its initializer runs would print a KeyboardInterrupt traceback from ``spawn_main``. An
    ignored SIGINT survives exec, so workers started in this window ignore it from birth (the
    parent's Ctrl-C is deferred for the few milliseconds the submits take)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class LocalExecutor:
    """A process pool of ``jobs`` workers; ``jobs=1`` runs in-process (easy to debug, no spawn)."""

    name = "local"

    def __init__(self, jobs: int | None = None) -> None:
        if jobs is not None and jobs < 1:
            raise ConfigError("must be at least 1", field="jobs")
        self.jobs = jobs or default_jobs()

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        if self.jobs == 1 or len(items) <= 1:
            for index, item in enumerate(items):
                yield index, fn(item)
            return
        # spawn, not fork: Polars/NumPy thread pools in the parent make fork deadlock-prone.
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(max_workers=min(self.jobs, len(items)), mp_context=context,
                                   initializer=_ignore_sigint)
        pending: dict[Future, int] = {}
        try:
            with _children_born_ignoring_sigint():
                pending = {pool.submit(fn, item): i for i, item in enumerate(items)}
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    index = pending.pop(future)
                    yield index, future.result()
        finally:
            for future in pending:
                future.cancel()
            pool.shutdown(wait=not pending, cancel_futures=True)

    def close(self) -> None:
        return None


class RayExecutor:
    """Runs each item as a Ray task; connects to ``address`` or starts a local Ray instance."""

    name = "ray"

    def __init__(self, jobs: int | None = None, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as exc:
            raise MissingDependencyError(
                "the ray executor needs Ray", hint="pip install 'schedlab[ray]'"
            ) from exc
        self._ray = ray
        self._started_here = False
        if not ray.is_initialized():
            options: dict[str, Any] = dict(
                ignore_reinit_error=True,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            if address:
                options["address"] = address
            else:
                options["num_cpus"] = jobs or default_jobs()
            data = os.environ.get("SCHEDLAB_DATA")
            if data:  # --data reaches the workers on any node
                options["runtime_env"] = {"env_vars": {"SCHEDLAB_DATA": data}}
            ray.init(**options)
            self._started_here = True

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        ray = self._ray
        remote = ray.remote(num_cpus=1)(fn)
        refs = {remote.remote(item): i for i, item in enumerate(items)}
        try:
            while refs:
                done, _ = ray.wait(list(refs), num_returns=1)
                for ref in done:
                    yield refs.pop(ref), ray.get(ref)
        finally:
            for ref in refs:
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._started_here:
            self._ray.shutdown()
            self._started_here = False


def make_executor(
    kind: str = "local", jobs: int | None = None, address: str | None = None
) -> Executor:
    """Build the executor a CLI's ``--executor/--jobs/--ray-address`` options describe."""
    if kind == "local":
        if address:
            raise ConfigError("only applies to --executor ray", field="ray-address")
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(jobs, address)
    raise ConfigError(f"unknown executor '{kind}'; valid: local, ray", field="executor")
