"""A small serverless runtime with real worker processes and real crashes (Arcus, paper 12).

Shape of a serverless platform, kept deliberately plain:

* **queues** - each worker slot has a Redis list ``P:q:SLOT``; a worker moves a message to its
  ``P:proc:SLOT`` list atomically (``BLMOVE``) before running it, so a crash never loses it;
* **dispersed dispatch** - every invocation, including a function's call to another function,
  goes to a worker chosen at random among the *other* slots, so consecutive steps of a request
  rarely share a worker (the pattern FCCache is designed for);
* **retries** - a supervisor thread in the gateway process waits on worker process sentinels; when
  one dies it re-dispatches everything in that worker's ``proc`` list to another worker with
  ``attempt + 1`` and ``replay = True``, then starts a fresh process in the slot;
* **crash injection** - a seeded oracle decides, per (instance, attempt, step, point), whether the
  worker SIGKILLs itself before or after an operation, after a background flush, or after the
  result is logged but before it is returned. Only attempts below ``crash_attempts`` crash, so
  every request finishes.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import random
import signal
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

import redis

from schedlab.arcus.apps import FUNCTIONS
from schedlab.arcus.fccache import FCCache, Subscriber
from schedlab.arcus.iobase import Conflict, Env, dumps
from schedlab.arcus.policies import make_protocol, protocol_class
from schedlab.arcus.scripts import scripts_for
from schedlab.arcus.store import IOStats, Store, connect
from schedlab.core.errors import BadInputError, SchedlabError, UnknownNameError

MAX_RERUNS = 4  # conflict re-runs of one execution before giving up


class InvocationError(SchedlabError):
    """A function raised, or its reply did not come back in time."""


@dataclass
class Invocation:
    """One message on a worker queue: plain JSON so any process can read it."""

    call_id: str
    instance: str
    fn: str
    arg: Any
    protocol: str
    ns: str
    attempt: int = 0
    replay: bool = False
    token: int = 0
    rtt_ms: float = 0.0
    crash_rate: float = 0.0
    crash_seed: int = 0
    crash_attempts: int = 2
    plat: str = "arcus"
    slots: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Invocation:
        return cls(**json.loads(raw))


def queue_key(plat: str, slot: int) -> str:
    return f"{plat}:q:{slot}"


def proc_key(plat: str, slot: int) -> str:
    return f"{plat}:proc:{slot}"


def reply_key(plat: str, call_id: str) -> str:
    return f"{plat}:reply:{call_id}"


def maybe_crash(inv: Invocation, point: str, step: int) -> None:
    """SIGKILL this worker if the seeded oracle says so: a real, abrupt crash."""
    if inv.crash_rate <= 0 or inv.attempt >= inv.crash_attempts:
        return
    digest = hashlib.blake2b(
        f"{inv.crash_seed}|{inv.instance}|{inv.attempt}|{step}|{point}".encode(), digest_size=8
    ).digest()
    if int.from_bytes(digest, "big") / 2**64 < inv.crash_rate:
        os.kill(os.getpid(), signal.SIGKILL)


def dispatch(client: redis.Redis, inv: Invocation, exclude: int | None,
             timeout: float) -> dict[str, Any]:
    """Send ``inv`` to a random worker other than ``exclude`` and wait for its reply."""
    choices = [s for s in range(inv.slots) if s != exclude] or list(range(inv.slots))
    rng = random.Random(zlib.crc32(f"{inv.instance}|{inv.attempt}".encode()))
    client.rpush(queue_key(inv.plat, rng.choice(choices)), inv.to_json())
    got = client.blpop([reply_key(inv.plat, inv.call_id)], timeout=max(1, int(timeout)))
    if got is None:
        raise InvocationError(f"no reply from '{inv.fn}' within {timeout:.0f} s",
                              field="timeout", hint="are the workers alive?")
    reply = json.loads(got[1])
    if "error" in reply:
        if reply.get("kind") == "unknown_function":
            raise UnknownNameError("function", inv.fn, sorted(FUNCTIONS))
        raise InvocationError(f"function '{inv.fn}' failed: {reply['error']}")
    return reply


class WorkerResources:
    """What one worker process shares among its invocations: client, cache, flush pool."""

    def __init__(self, client: redis.Redis, slot: int, wait_s: float = 0.0003) -> None:
        self.client = client
        self.slot = slot
        self.wait_s = wait_s
        self.scripts = scripts_for(client)
        self.cache = FCCache()
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="flush")
        self.memo: dict[str, Any] = {}
        self.subscriber = Subscriber(client, self.cache)

    def start(self) -> WorkerResources:
        self.subscriber.start()
        return self

    def close(self) -> None:
        self.subscriber.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)


class Ctx:
    """What a function sees: ``read``, ``write`` and ``invoke``, each one numbered step."""

    def __init__(self, io: Any, inv: Invocation, resources: WorkerResources, stats: IOStats,
                 replay: bool, timeout: float) -> None:
        self.io, self.inv, self.resources, self.stats = io, inv, resources, stats
        self.replay, self.timeout = replay, timeout
        self.step = 0

    def _next(self) -> int:
        self.step += 1
        maybe_crash(self.inv, "pre", self.step)
        return self.step

    def read(self, key: str) -> Any:
        """The value of ``key`` (None when never written)."""
        _check_key(key)
        step = self._next()
        start = time.perf_counter()
        value = self.io.read(step, key)
        self.stats.reads.append(time.perf_counter() - start)
        maybe_crash(self.inv, "post", step)
        return value

    def write(self, key: str, value: Any) -> None:
        """Set ``key`` to a JSON-serialisable ``value``."""
        _check_key(key)
        dumps(value)  # reject what cannot be stored before anything is logged
        step = self._next()
        start = time.perf_counter()
        self.io.write(step, key, value)
        self.stats.writes.append(time.perf_counter() - start)
        maybe_crash(self.inv, "post", step)

    def invoke(self, fn: str, arg: Any) -> Any:
        """Call another function (on another worker) and return its result."""
        step = self._next()
        self.io.sync()
        child = replace(self.inv, call_id=uuid.uuid4().hex, instance=f"{self.inv.instance}.{step}",
                        fn=fn, arg=arg, attempt=0, replay=self.replay, token=self.io.seq)
        reply = dispatch(self.resources.client, child, self.resources.slot, self.timeout)
        self.io.observe(int(reply["seq"]))
        self.stats.merge(reply["stats"])
        maybe_crash(self.inv, "post", step)
        return reply["value"]


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key or "|" in key:
        raise BadInputError(f"state keys are non-empty strings without '|', got {key!r}",
                            field="key")


def execute(resources: WorkerResources, inv: Invocation, timeout: float = 60.0) -> dict:
    """Run one invocation to completion (re-running on conflicts); the reply as a dict."""
    fn = FUNCTIONS.get(inv.fn)
    if fn is None:
        return {"error": f"unknown function '{inv.fn}'", "kind": "unknown_function"}
    stats = IOStats()
    for rerun in range(MAX_RERUNS):
        replay = inv.replay or rerun > 0
        env = Env(inv.instance, inv.ns, replay=replay, token=inv.token, resources=resources,
                  crash=lambda point, step: maybe_crash(inv, point, step))
        io = make_protocol(inv.protocol, Store(resources.client, stats, inv.rtt_ms), env)
        try:
            done, result = io.begin()
            if not done:
                ctx = Ctx(io, inv, resources, stats, replay, timeout)
                result = io.finish(fn(ctx, inv.arg))
            return {"value": result, "seq": io.seq, "stats": stats.to_dict()}
        except Conflict:
            continue
        except SchedlabError as exc:
            return {"error": str(exc), "kind": type(exc).__name__}
        except Exception as exc:  # a bug in a user function: report it, do not retry forever
            return {"error": f"{type(exc).__name__}: {exc}", "kind": "function_error"}
    return {"error": f"gave up after {MAX_RERUNS} conflicting re-runs", "kind": "conflict"}


def _handle(resources: WorkerResources, raw: bytes) -> None:
    inv = Invocation.from_json(raw)
    reply = execute(resources, inv)
    maybe_crash(inv, "end", 0)  # result logged, reply not yet sent
    key = reply_key(inv.plat, inv.call_id)
    pipe = resources.client.pipeline(transaction=False)
    pipe.rpush(key, json.dumps(reply, separators=(",", ":")))
    pipe.expire(key, 120)
    pipe.lrem(proc_key(inv.plat, resources.slot), 1, raw)
    pipe.execute()


def worker_main(slot: int, url: str, plat: str, threads: int, modules: tuple[str, ...],
                wait_s: float) -> None:
    """A worker process: take messages from its queue, run each in a thread, reply."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the gateway's to handle
    for module in modules:
        importlib.import_module(module)
    client = redis.Redis.from_url(url, socket_timeout=None)
    resources = WorkerResources(client, slot, wait_s).start()
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="invoke")
    parent = os.getppid()
    while os.getppid() == parent:  # the gateway (or its fork server) died: stop too
        try:
            raw = client.blmove(queue_key(plat, slot), proc_key(plat, slot), 0.5, "LEFT", "RIGHT")
        except redis.ConnectionError:
            time.sleep(0.1)
            continue
        if raw is not None:
            pool.submit(_handle, resources, raw)
    os._exit(0)


def _validate(protocol: str, fn: str) -> None:
    protocol_class(protocol)
    if fn not in FUNCTIONS:
        raise UnknownNameError("function", fn, sorted(FUNCTIONS))


__all__ = ["Ctx", "Invocation", "InvocationError", "WorkerResources", "connect", "dispatch",
           "execute", "worker_main", "_validate", "mp", "multiprocessing"]
