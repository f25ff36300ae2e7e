"""The gateway side of the runtime: worker processes, the supervisor that retries, ``invoke``.

``Platform`` is the Python API (``schedlab arcus serve`` puts an HTTP front on the same object).
Workers are forked from a fork server that has already imported the runtime, so restarting a
crashed worker costs milliseconds, not an interpreter start - that is what lets the tests kill
hundreds of workers.

Exactly-once across the API, in the terms Restate, Temporal and Durable Functions use:

* every request is one function **instance**; its id keys the instance's log, so a retry with
  the same id replays instead of re-applying. Pass ``idempotency_key=`` (HTTP: the
  ``Idempotency-Key`` header) and a client retry after a timeout, a 503 or a lost connection is
  the same instance: it returns the first execution's result. Reusing a key for a different
  request (another function or argument) is refused. Without a key every call is a new
  request, as with any HTTP API;
* :meth:`Platform.submit` starts an instance and returns its id at once; :meth:`Platform.status`
  says ``pending``, ``done`` (with the value) or ``failed``;
* a namespace is bound to the protocol that first used it; mixing is refused;
* finished instances' logs are garbage-collected after ``retention_s`` (a retry with the same
  key after that runs again: keep the retention above your clients' retry horizon).

The supervisor survives Redis outages: anything it cannot do while Redis is down (redelivering a
dead worker's messages, GC) is retried until Redis answers again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from schedlab.arcus.iobase import dumps, fence_key, loads, text
from schedlab.arcus.policies import bind_protocol, bound_protocol, protocol_class
from schedlab.arcus.runtime import (
    CHILD_CHECK_S,
    Invocation,
    InvocationError,
    _validate,
    dispatch,
    enqueue,
    lease_key,
    redeliver,
    slot_of,
    worker_main,
    workers_key,
)
from schedlab.arcus.scripts import scripts_for
from schedlab.arcus.store import IOStats, connect
from schedlab.core.errors import (
    BadInputError,
    ConfigError,
    MissingServiceError,
    UnknownNameError,
)

log = logging.getLogger(__name__)

#: set while user modules are imported by :func:`load_modules`: a Platform started then is a
#: module without a ``__main__`` guard
_IMPORTING: list[str] = []


def load_modules(specs: tuple[str, ...] | list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Import user function modules (dotted names or ``path/to/file.py``).

    Returns ``(module names, sys.path entries)`` to hand to :class:`Platform`. A module that
    cannot be imported, or that starts a platform at import time (no ``if __name__ ==
    "__main__":`` guard; the workers import it again), is a one-line BadInputError.
    """
    names, paths = [], []
    for spec in specs:
        name, path = spec, None
        if spec.endswith(".py") or os.sep in spec:
            path = Path(spec)
            if not path.is_file():
                raise BadInputError("no such file", path=path, field="module")
            directory = str(path.resolve().parent)
            name = path.stem
            loaded = sys.modules.get(name)
            if loaded is not None and _origin(loaded) != path.resolve():
                raise BadInputError(f"the name '{name}' is taken by the module already loaded "
                                    f"from {_origin(loaded) or 'a built-in'}; rename the file",
                                    path=path, field="module")
        else:  # a dotted name resolves from the working directory, as with `python -m`
            directory = os.getcwd()
        if directory not in sys.path:
            sys.path.insert(0, directory)
        if directory not in paths:
            paths.append(directory)
        _IMPORTING.append(name)
        try:
            importlib.import_module(name)
        except ConfigError:
            raise
        except ImportError as exc:
            raise BadInputError(f"cannot import module '{name}': {exc}", field="module") from None
        except SyntaxError as exc:
            raise BadInputError(f"module '{name}' does not parse: {exc.msg}",
                                path=exc.filename, line=exc.lineno, field="module") from None
        except Exception as exc:  # noqa: BLE001 - user code at import time
            raise BadInputError(f"module '{name}' failed at import: {type(exc).__name__}: {exc}",
                                field="module") from None
        finally:
            _IMPORTING.pop()
        names.append(name)
    return tuple(names), tuple(paths)


def functions_of(modules: tuple[str, ...]) -> tuple[str, ...]:
    """The registered function names whose code lives in ``modules`` (what ``serve --module``
    exposes; the built-in demos are not among them)."""
    from schedlab.arcus.apps import FUNCTIONS

    return tuple(sorted(name for name, fn in FUNCTIONS.items()
                        if getattr(fn, "__module__", None) in modules))


def _origin(module: Any) -> Path | None:
    where = getattr(module, "__file__", None)
    return Path(where).resolve() if where else None


def check_retention(retention_s: float | None, lease_s: float) -> None:
    """Refuse a log retention shorter than the worker lease: a log could then go while an
    execution of its instance is still legitimately running (it is fenced, not corrupted, but
    every such run would fail)."""
    if retention_s is not None and retention_s < lease_s:
        raise ConfigError(f"retention {retention_s:g} s is shorter than the lease {lease_s:g} s; "
                          "use a retention >= the lease", field="retention")


def instance_for_key(key: str) -> str:
    """The instance id an idempotency key maps to (a digest: no '.' or '|', fixed length)."""
    if not isinstance(key, str) or not 1 <= len(key) <= 255 or not key.isprintable():
        raise BadInputError("an idempotency key is 1-255 printable characters",
                            field="idempotency_key")
    return "k" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def _digest(fn: str, arg: Any) -> str:
    return hashlib.blake2b(f"{fn}|{dumps(arg)}".encode(), digest_size=12).hexdigest()


class Platform:
    """A gateway, ``workers`` worker processes and a supervisor; a context manager.

    ``lease_s``: a worker's lease; a registered worker silent for that long has its in-flight
    messages redelivered. ``retention_s``: finished instances' logs are deleted this long after
    they finished (``None``: never). ``name``: the Redis prefix of queues and processing lists;
    give a stable one (``serve`` uses ``arcus``) and a restarted gateway picks up what a dead
    or stopped one left queued or in flight (an unnamed platform deletes its keys at close).
    ``child_check_s``: a parent waits for its child's reply without a deadline, and checks
    this often that the child's message still exists (sent again if it was lost).
    """

    def __init__(self, redis_url: str, workers: int = 4, threads: int = 32,
                 modules: tuple[str, ...] = (), wait_s: float = 0.0003,
                 reply_timeout: float = 60.0, *, lease_s: float = 5.0,
                 retention_s: float | None = 3600.0, name: str | None = None,
                 paths: tuple[str, ...] = (), functions: tuple[str, ...] | None = None,
                 child_check_s: float = CHILD_CHECK_S) -> None:
        if _IMPORTING:
            raise ConfigError(f"module '{_IMPORTING[-1]}' starts a Platform when it is imported; "
                              "put that code under `if __name__ == \"__main__\":` (the workers "
                              "import the module again)", field="module")
        if workers < 2:
            raise ConfigError("the platform needs at least 2 workers (dispersed dispatch)",
                              field="workers")
        if not lease_s > 0:
            raise ConfigError("must be > 0", field="lease_s")
        if retention_s is not None and not retention_s >= 0:
            raise ConfigError("must be >= 0 (or None: keep logs forever)", field="retention_s")
        check_retention(retention_s, lease_s)
        if not child_check_s > 0:
            raise ConfigError("must be > 0", field="child_check_s")
        #: a parent waits for its child without a deadline, checking this often that the
        #: child's message still exists (``runtime.call_child``)
        self.child_check_s = child_check_s
        self.url = redis_url
        #: the functions a client may call (None: every registered one); a function calling
        #: another through ``ctx.invoke`` is the module's own code and is not restricted
        self.functions = None if functions is None else tuple(sorted(functions))
        self.workers = workers
        self.threads = threads
        self.modules = tuple(modules)
        self.paths = tuple(paths)
        self.wait_s = wait_s
        self.reply_timeout = reply_timeout
        self.lease_s = lease_s
        self.retention_s = retention_s
        self.plat = name or f"arcus-{uuid.uuid4().hex[:8]}"
        self.ephemeral = name is None  # a named platform leaves its queues for its successor
        self.client: redis.Redis | None = None
        self.procs: dict[int, Any] = {}
        self.wids: dict[int, str] = {}
        #: dead workers -> when to sweep their processing lists again. A worker killed while
        #: blocked in BLMOVE may still receive one message after it died (Redis serves the
        #: blocked call before it sees the closed socket), so a list is swept at death, soon
        #: after, and finally by the lease scan once the dead worker's lease has expired
        self.orphans: dict[str, list[float]] = {}
        self.crashes = 0
        self.failed_starts = 0
        self.redelivered = 0
        self.redis_errors = 0
        self.collected = 0
        self.broken: str | None = None
        self.tokens: dict[str, int] = {}
        self.bound: dict[str, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._mp = mp.get_context("forkserver")

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> Platform:
        if _IMPORTING:
            raise ConfigError(f"module '{_IMPORTING[-1]}' starts a Platform when it is "
                              "imported; guard it with `if __name__ == \"__main__\":`",
                              field="module")
        self.client = connect(self.url)
        self._mp.set_forkserver_preload(["schedlab.arcus.runtime", *self.modules])
        for slot in range(self.workers):
            self._spawn(slot)
        self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                            name="arcus-supervisor")
        self._supervisor.start()
        return self

    def _spawn(self, slot: int) -> None:
        wid = f"{slot}-{uuid.uuid4().hex[:10]}"
        process = self._mp.Process(
            target=worker_main, daemon=True, name=f"arcus-worker-{slot}",
            args=(slot, self.url, self.plat, self.threads, self.modules, self.wait_s, wid,
                  self.lease_s, self.paths, os.getpid(), self.child_check_s))
        process.start()
        self.procs[slot] = process
        self.wids[slot] = wid

    def _supervise(self) -> None:
        """Never dies: a Redis outage is waited out; everything left undone is retried."""
        last_scan = last_gc = time.monotonic()
        while not self._stop.is_set():
            try:
                by_sentinel = {p.sentinel: slot for slot, p in self.procs.items()}
                ready = multiprocessing.connection.wait(list(by_sentinel), timeout=0.2)
                for sentinel in ready:
                    if self._stop.is_set():
                        return
                    self._reap(by_sentinel[sentinel])
                if self.orphans:
                    self._redeliver_orphans()
                now = time.monotonic()
                if now - last_scan > self.lease_s / 2:
                    last_scan = now
                    self._scan_leases()
                if self.retention_s is not None and now - last_gc > self._gc_every():
                    last_gc = now
                    for ns in list(self.bound):
                        self.gc(ns)
            except redis.RedisError:
                self.redis_errors += 1
                self._stop.wait(0.2)
            except Exception:  # noqa: BLE001 - the supervisor must outlive any one failure
                log.exception("arcus supervisor")
                self._stop.wait(0.2)

    def _gc_every(self) -> float:
        return min(60.0, max(1.0, (self.retention_s or 0.0) / 4))

    def _reap(self, slot: int) -> None:
        """A worker died: start its replacement, then redeliver what it held (when Redis can)."""
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
        now = time.monotonic()
        self.orphans[self.wids[slot]] = [now, now + 0.1, now + 0.5]
        self._spawn(slot)

    def _redeliver_orphans(self) -> None:
        now = time.monotonic()
        for wid in sorted(self.orphans):
            due = self.orphans[wid]
            if due[0] > now:
                continue
            self.redelivered += max(0, redeliver(self.client, self.plat, wid, self.workers,
                                                 force=True))
            due.pop(0)
            if not due:
                del self.orphans[wid]

    def _scan_leases(self) -> None:
        """Backstop: registered workers whose lease expired get their messages redelivered."""
        stale = [text(w) for w in self.client.smembers(workers_key(self.plat))]
        if not stale:
            return
        pipe = self.client.pipeline(transaction=False)
        for wid in stale:
            pipe.exists(lease_key(self.plat, wid))
        for wid, exists in zip(stale, pipe.execute(), strict=True):
            if not exists and slot_of(wid) < self.workers:
                moved = redeliver(self.client, self.plat, wid, self.workers, force=False)
                self.redelivered += max(0, moved)
                self.orphans.pop(wid, None)

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
                if self.ephemeral:
                    keys = list(self.client.scan_iter(f"{self.plat}:*", count=1000))
                    if keys:
                        self.client.delete(*keys)
                # a named platform keeps queued and in-flight messages: the next gateway with
                # the same name redelivers them once the stopped workers' leases expire
            self.client.close()
        self.procs.clear()

    def __enter__(self) -> Platform:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.procs.values() if p.is_alive() and p.pid]

    def alive(self) -> int:
        return sum(p.is_alive() for p in self.procs.values())

    # --- the gateway --------------------------------------------------------------------------
    def bind(self, ns: str, protocol: str) -> None:
        """Bind ``ns`` to ``protocol`` (cached; Redis decides the first time)."""
        if self.bound.get(ns) == protocol:
            return
        if ns in self.bound:
            raise ConfigError(f"namespace '{ns}' is bound to protocol '{self.bound[ns]}', not "
                              f"'{protocol}' (each protocol keeps its own state layout and "
                              "logs)", field="protocol")
        bind_protocol(self.client, ns, protocol)
        self.bound[ns] = protocol

    def _prepare(self, fn: str, arg: Any, protocol: str, ns: str, rtt_ms: float,
                 crash_rate: float, crash_seed: int, crash_attempts: int,
                 instance: str | None, idempotency_key: str | None,
                 track: bool) -> tuple[Invocation, str]:
        if self.functions is not None and fn not in self.functions:
            raise UnknownNameError("function", fn, self.functions)  # hides everything else
        _validate(protocol, fn)
        if not 0.0 <= crash_rate < 1.0:
            raise ConfigError("crash rate must be in [0, 1)", field="crash_rate")
        if self.client is None:
            raise ConfigError("the platform is not started; use `with Platform(...)`")
        if self.broken:
            raise MissingServiceError(f"the platform is down: {self.broken}")
        if not isinstance(ns, str) or not ns or any(c in ns for c in ":|"):
            raise BadInputError(f"a namespace is a non-empty name without ':' or '|', got "
                                f"{ns!r:.40}", field="ns")
        try:
            dumps(arg)
        except (TypeError, ValueError) as exc:
            raise BadInputError(f"the argument is not JSON-serialisable: {exc}",
                                field="arg") from None
        if idempotency_key is not None:
            if instance is not None:
                raise ConfigError("give an instance id or an idempotency key, not both",
                                  field="idempotency_key")
            instance = instance_for_key(idempotency_key)
            track = True
        elif instance is not None and (not isinstance(instance, str) or not instance
                                       or "." in instance or "|" in instance):
            raise BadInputError("an instance id is a non-empty string without '.' or '|'",
                                field="instance")
        self._guard_redis(lambda: self.bind(ns, protocol))
        fresh = instance is None
        inv = Invocation(call_id=uuid.uuid4().hex, instance=instance or uuid.uuid4().hex,
                         fn=fn, arg=arg, protocol=protocol, ns=ns, token=self.tokens.get(ns, 0),
                         rtt_ms=rtt_ms, crash_rate=crash_rate, crash_seed=crash_seed,
                         crash_attempts=crash_attempts, plat=self.plat, slots=self.workers,
                         track=track, replay=idempotency_key is not None,
                         gen=uuid.uuid4().hex[:16])
        fence = fence_key(ns, inv.instance)
        if track:
            reply = self._guard_redis(lambda: scripts_for(self.client)["request_begin"](
                keys=[f"{ns}:req:{inv.instance}", fence],
                args=[_digest(fn, arg), fn, protocol, f"{time.time():.6f}", inv.gen],
                client=self.client))
            if text(reply[0]) == "mismatch":
                raise BadInputError("this idempotency key was already used for a different "
                                    "request (another function or argument)",
                                    field="idempotency_key")
            inv.gen = text(reply[2]) or inv.gen  # '' only once answered (then not dispatched)
            return inv, text(reply[0])
        if fresh:  # the generation key is set with the message (dispatch(admit=True))
            return inv, "fresh"
        inv.gen = text(self._guard_redis(lambda: scripts_for(self.client)["admit"](
            keys=[fence], args=[inv.gen], client=self.client)))
        return inv, "new"

    def _guard_redis(self, call: Any) -> Any:
        try:
            return call()
        except redis.RedisError as exc:  # nothing was acknowledged: the caller must retry
            raise MissingServiceError(f"Redis failed during the request: {exc}",
                                      hint="the request was not acknowledged; retry it, with "
                                           "the same idempotency key") from exc

    def invoke(self, fn: str, arg: Any = None, *, protocol: str = "arcus", ns: str = "default",
               rtt_ms: float = 0.0, crash_rate: float = 0.0, crash_seed: int = 0,
               crash_attempts: int = 2, instance: str | None = None,
               idempotency_key: str | None = None,
               timeout: float | None = None) -> dict[str, Any]:
        """Run ``fn(arg)`` as one instance; returns ``{value, seq, stats, latency_s, id}``.

        With ``idempotency_key`` (or an explicit ``instance``) a retry of the same request is
        the same instance: it returns the first execution's result and applies nothing twice.
        Raises MissingServiceError when Redis fails (not acknowledged: retry with the key) and
        InvocationError when no reply came within ``timeout`` (the instance may still finish).
        """
        inv, state = self._prepare(fn, arg, protocol, ns, rtt_ms, crash_rate, crash_seed,
                                   crash_attempts, instance, idempotency_key, False)
        start = time.perf_counter()
        done = self.status(inv.instance, ns) if state == "done" else None
        if done is not None and done["state"] == "done":  # answered before: the same answer
            reply = {"value": done["value"], "seq": self.tokens.get(ns, 0),
                     "stats": IOStats().to_dict()}
        else:
            reply = self._guard_redis(lambda: dispatch(self.client, inv, None,
                                                       timeout or self.reply_timeout,
                                                       admit=state == "fresh"))
        reply["latency_s"] = time.perf_counter() - start
        reply["id"] = inv.instance
        with self._lock:  # later requests must see what this one saw or wrote
            self.tokens[ns] = max(self.tokens.get(ns, 0), int(reply["seq"]))
        return reply

    def submit(self, fn: str, arg: Any = None, *, protocol: str = "arcus", ns: str = "default",
               rtt_ms: float = 0.0, idempotency_key: str | None = None) -> str:
        """Start ``fn(arg)`` and return its instance id at once; poll :meth:`status`.

        Submitting again with the same key returns the same id and runs nothing twice.
        """
        inv, _ = self._prepare(fn, arg, protocol, ns, rtt_ms, 0.0, 0, 0, None,
                               idempotency_key, True)
        state = self.status(inv.instance, ns)
        if state["state"] == "pending":  # new, or a retry of one not finished: (re)start it
            slot = int(inv.call_id[:8], 16) % self.workers

            def send() -> None:  # behind the FCCache barrier, as in dispatch()
                pipe = self.client.pipeline(transaction=False)
                enqueue(pipe, inv, slot)
                pipe.execute()
            self._guard_redis(send)
        return inv.instance

    def status(self, instance: str, ns: str = "default") -> dict[str, Any]:
        """``{id, state, value?, error?}``; state is pending, done, failed or unknown."""
        if self.client is None:
            raise ConfigError("the platform is not started; use `with Platform(...)`")
        raw = self._guard_redis(lambda: self.client.hgetall(f"{ns}:req:{instance}"))
        record = {text(k): text(v) for k, v in raw.items()}
        out: dict[str, Any] = {"id": instance, "state": record.get("state", "unknown")}
        if out["state"] == "done":
            out["value"] = loads(record.get("value"))
            with self._lock:
                self.tokens[ns] = max(self.tokens.get(ns, 0), int(record.get("seq") or 0))
        elif out["state"] == "failed":
            out["error"] = record.get("error")
        return out

    def gc(self, ns: str, retention_s: float | None = None, limit: int = 1000) -> int:
        """Delete the logs of instances in ``ns`` that finished ``retention_s`` ago or more
        (default: the platform's retention). A child's log goes only with its root instance,
        so a parent still running can never re-run a child whose log is gone.

        Each root goes in one transaction that first deletes its generation key (the fence every
        state-changing script checks), so any execution of it still running or stalled anywhere
        is fenced at that instant: none can apply a write whose log record is gone. The request
        record of a keyed instance (its answer) is kept ``max(retention, 1 day)`` longer, so a
        late retry with the same key still gets the first answer instead of running again."""
        retention = self.retention_s if retention_s is None else retention_s
        if retention is None or self.client is None:
            return 0
        check_retention(retention, self.lease_s)
        protocol = self.bound.get(ns) or bound_protocol(self.client, ns)
        if protocol is None:
            return 0
        cls = protocol_class(protocol)
        cutoff = time.time() - retention
        done_key = f"{ns}:done"
        members = [text(m) for m in self.client.zrangebyscore(done_key, "-inf", cutoff,
                                                              start=0, num=limit)]
        roots = {m.split(".", 1)[0] for m in members}
        pipe = self.client.pipeline(transaction=False)
        for root in sorted(roots):
            pipe.zscore(done_key, root)
        finished = {r for r, score in zip(sorted(roots), pipe.execute(), strict=True)
                    if score is not None and score <= cutoff}
        victims = [m for m in members if m.split(".", 1)[0] in finished]
        keep = int(max(retention, 86400.0))
        for root in sorted(finished):
            mine = [m for m in victims if m.split(".", 1)[0] == root]
            logs = [k for m in mine for k in cls.log_keys(self.client, ns, m)]
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(fence_key(ns, root))  # first: fences every execution of the tree
            if logs:
                pipe.delete(*logs)
            for member in mine:
                pipe.expire(f"{ns}:req:{member}", keep)
            pipe.zrem(done_key, *mine)
            pipe.execute()
        self.collected += len(victims)
        return len(victims)


__all__ = ["InvocationError", "Platform", "check_retention", "functions_of", "instance_for_key",
           "load_modules"]
