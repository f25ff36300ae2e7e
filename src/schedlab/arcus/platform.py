"""The gateway side of the runtime: worker processes, the supervisor that retries, ``invoke``.

``Platform`` is the Python API (``schedlab arcus serve`` puts an HTTP front on the same object).
Workers are forked from a fork server that has already imported the runtime, so restarting a
crashed worker costs milliseconds, not an interpreter start - that is what lets the tests kill
hundreds of workers.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import threading
import time
import uuid
import zlib
from typing import Any

import redis

from schedlab.arcus.runtime import (
    Invocation,
    _validate,
    dispatch,
    proc_key,
    queue_key,
    worker_main,
)
from schedlab.arcus.store import connect
from schedlab.core.errors import ConfigError, MissingServiceError


class Platform:
    """A gateway, ``workers`` worker processes and a supervisor; a context manager."""

    def __init__(self, redis_url: str, workers: int = 4, threads: int = 32,
                 modules: tuple[str, ...] = (), wait_s: float = 0.0003,
                 reply_timeout: float = 60.0) -> None:
        if workers < 2:
            raise ConfigError("the platform needs at least 2 workers (dispersed dispatch)",
                              field="workers")
        self.url = redis_url
        self.workers = workers
        self.threads = threads
        self.modules = tuple(modules)
        self.wait_s = wait_s
        self.reply_timeout = reply_timeout
        self.plat = f"arcus-{uuid.uuid4().hex[:8]}"
        self.client: redis.Redis | None = None
        self.procs: dict[int, Any] = {}
        self.crashes = 0
        self.failed_starts = 0
        self.broken: str | None = None
        self.tokens: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._mp = mp.get_context("forkserver")

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> Platform:
        self.client = connect(self.url)
        self._mp.set_forkserver_preload(["schedlab.arcus.runtime", *self.modules])
        for slot in range(self.workers):
            self._spawn(slot)
        self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                            name="arcus-supervisor")
        self._supervisor.start()
        return self

    def _spawn(self, slot: int) -> None:
        process = self._mp.Process(
            target=worker_main, daemon=True, name=f"arcus-worker-{slot}",
            args=(slot, self.url, self.plat, self.threads, self.modules, self.wait_s))
        process.start()
        self.procs[slot] = process

    def _supervise(self) -> None:
        while not self._stop.is_set():
            by_sentinel = {p.sentinel: slot for slot, p in self.procs.items()}
            ready = multiprocessing.connection.wait(list(by_sentinel), timeout=0.2)
            for sentinel in ready:
                if self._stop.is_set():
                    return
                self._recover(by_sentinel[sentinel])

    def _recover(self, slot: int) -> None:
        """Retry a dead worker's in-flight invocations elsewhere, then replace the worker."""
        process = self.procs[slot]
        process.join()
        with self._lock:
            self.crashes += 1
            if process.exitcode is not None and process.exitcode > 0:
                self.failed_starts += 1  # a broken worker, not a crash: do not loop forever
                if self.failed_starts > 3 * self.workers:
                    self.broken = f"worker {slot} keeps failing (exit {process.exitcode})"
                    self._stop.set()
                    return
        pending = self.client.lrange(proc_key(self.plat, slot), 0, -1)
        self.client.delete(proc_key(self.plat, slot))
        for raw in pending:
            inv = Invocation.from_json(raw)
            inv.attempt += 1
            inv.replay = True
            others = [s for s in range(self.workers) if s != slot]
            target = others[(inv.attempt + zlib.crc32(inv.instance.encode())) % len(others)]
            self.client.rpush(queue_key(self.plat, target), inv.to_json())
        self._spawn(slot)

    def close(self) -> None:
        self._stop.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        for process in self.procs.values():
            if process.is_alive():
                process.terminate()
        for process in self.procs.values():
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        if self.client is not None:
            with contextlib.suppress(redis.RedisError):
                keys = list(self.client.scan_iter(f"{self.plat}:*", count=1000))
                if keys:
                    self.client.delete(*keys)
            self.client.close()
        self.procs.clear()

    def __enter__(self) -> Platform:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the gateway --------------------------------------------------------------------------
    def invoke(self, fn: str, arg: Any = None, *, protocol: str = "arcus", ns: str = "default",
               rtt_ms: float = 0.0, crash_rate: float = 0.0, crash_seed: int = 0,
               crash_attempts: int = 2, instance: str | None = None) -> dict[str, Any]:
        """Run ``fn(arg)`` as a new request; returns ``{value, seq, stats, latency_s}``."""
        _validate(protocol, fn)
        if not 0.0 <= crash_rate < 1.0:
            raise ConfigError("crash rate must be in [0, 1)", field="crash_rate")
        if self.client is None:
            raise ConfigError("the platform is not started; use `with Platform(...)`")
        if self.broken:
            raise MissingServiceError(f"the platform is down: {self.broken}")
        inv = Invocation(call_id=uuid.uuid4().hex, instance=instance or uuid.uuid4().hex,
                         fn=fn, arg=arg, protocol=protocol, ns=ns, token=self.tokens.get(ns, 0),
                         rtt_ms=rtt_ms, crash_rate=crash_rate, crash_seed=crash_seed,
                         crash_attempts=crash_attempts, plat=self.plat, slots=self.workers)
        start = time.perf_counter()
        try:
            reply = dispatch(self.client, inv, None, self.reply_timeout)
        except redis.RedisError as exc:  # nothing was acknowledged: the caller must retry
            raise MissingServiceError(f"Redis failed during the request: {exc}",
                                      hint="the request was not acknowledged") from exc
        reply["latency_s"] = time.perf_counter() - start
        with self._lock:  # later requests must see what this one saw or wrote
            self.tokens[ns] = max(self.tokens.get(ns, 0), int(reply["seq"]))
        return reply

    def alive(self) -> int:
        return sum(p.is_alive() for p in self.procs.values())
