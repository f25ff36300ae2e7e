"""A small serverless runtime with real worker processes and real crashes (Arcus, paper 12).

Shape of a serverless platform, kept deliberately plain:

* **queues** - each worker slot has a Redis list ``P:q:SLOT``; a worker moves a message to its
  own processing list ``P:proc:WID`` atomically (``BLMOVE``) before running it, so a crash
  never loses it. Every worker holds a lease ``P:lease:WID`` (refreshed by a heartbeat thread)
  and is registered in ``P:workers``;
* **dispersed dispatch** - every invocation, including a function's call to another function,
  goes to a worker chosen at random among the *other* slots, so consecutive steps of a request
  rarely share a worker (the pattern FCCache is designed for);
* **retries** - a supervisor thread in the gateway process waits on worker process sentinels; when
  one dies it starts a fresh process in the slot and moves everything in the dead worker's
  processing list to other workers' queues with ``attempt + 1`` (one Lua script, so a Redis
  failure half-way loses nothing; retried until Redis answers). As a backstop, any registered
  worker whose lease has expired (a gateway that died, a wedged worker, a recovery that could
  not reach Redis) has its processing list redelivered the same way;
* **Redis failures inside a worker** - an execution that hits a ``RedisError`` is not answered
  with an error: the worker waits for Redis and re-runs it in replay mode (the logs make that
  safe), so a Redis restart costs latency, not requests;
* **per-key serialisation** - a function registered with ``keys=`` takes every declared key at
  once (``ns:lock:KEY`` = instance id, all-or-nothing in one Lua script, so no deadlock between
  top-level instances) before it runs, and gives them back after its result is logged. The
  owner is the *instance*, so a retry or a duplicate execution of it, and its child
  invocations, pass through. Acquiring also returns the global commit sequence, which becomes
  the execution's FCCache token, so a cached read can never predate the previous holder;
* **crash injection** - a seeded oracle decides, per (instance, attempt, step, point), whether the
  worker SIGKILLs itself before or after an operation, after a background flush, or after the
  result is logged but before it is returned. Only attempts below ``crash_attempts`` crash, so
  every request finishes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import multiprocessing as mp
import multiprocessing.connection
import os
import random
import signal
import sys
import threading
import time
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

import redis

from schedlab.arcus.apps import FUNCTIONS, lock_keys
from schedlab.arcus.fccache import CHANNEL, SEQ_KEY, FCCache, Subscriber, channel_for
from schedlab.arcus.iobase import Conflict, Env, Fenced, dumps, fence_key
from schedlab.arcus.policies import make_protocol, protocol_class
from schedlab.arcus.scripts import scripts_for
from schedlab.arcus.store import IOStats, Store, connect, no_retry
from schedlab.core.errors import BadInputError, SchedlabError, UnknownNameError

MAX_RERUNS = 8  # conflict re-runs of one execution before giving up
LOCK_TIMEOUT_S = 60.0  # how long an invocation waits for its declared keys


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
    track: bool = False  # record state/result in ns:req:INSTANCE (idempotency keys, async)
    gen: str = ""  # the root instance's admission generation: every state change is fenced by it

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> Invocation:
        return cls(**json.loads(raw))

    def wire(self) -> str:
        """The queue message: ``a<delivery attempt>:<json>``; redelivery bumps the prefix only
        (in Lua, without re-encoding the body)."""
        return f"a{self.attempt}:{self.to_json()}"

    @classmethod
    def from_wire(cls, raw: str | bytes) -> Invocation:
        text = raw.decode() if isinstance(raw, bytes) else raw
        head, body = text.split(":", 1)
        inv = cls.from_json(body)
        inv.attempt = int(head[1:])
        inv.replay = inv.replay or inv.attempt > 0
        return inv


def queue_key(plat: str, slot: int) -> str:
    return f"{plat}:q:{slot}"


def proc_key(plat: str, wid: str) -> str:
    return f"{plat}:proc:{wid}"


def lease_key(plat: str, wid: str) -> str:
    return f"{plat}:lease:{wid}"


def workers_key(plat: str) -> str:
    return f"{plat}:workers"


def slot_of(wid: str) -> int:
    return int(wid.split("-", 1)[0])


def redeliver(client: redis.Redis, plat: str, wid: str, slots: int, *, force: bool) -> int:
    """Move a worker's processing list to other workers' queues (attempt + 1), atomically.

    Without ``force`` nothing happens while the worker's lease is live; returns the number of
    messages moved, or -1 when the lease was live.
    """
    script = scripts_for(client)["redeliver"]
    return int(script(keys=[proc_key(plat, wid), lease_key(plat, wid), workers_key(plat)],
                      args=[plat, slots, slot_of(wid), wid, "1" if force else "0"],
                      client=client))


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


def needs_barrier(protocol: str) -> bool:
    """Does ``protocol`` push commits only to the workers caching the key (``arcus-keys``)?

    Then a worker's watermark moves only with barriers. A broadcast (Arcus's default) moves it
    with every commit, and the other protocols' tokens count their own sequences (Halfmoon's
    and Boki's logs): a barrier with one would move the watermark past Arcus commits not yet
    applied (found by the side-by-side benchmark: a stale read)."""
    cls = protocol_class(protocol)
    return bool(getattr(cls, "use_cache", False)) and getattr(cls, "push", "all") == "keys"


def enqueue(pipe: Any, inv: Invocation, slot: int) -> None:
    """Queue ``inv`` on ``slot`` (in ``pipe``), behind an FCCache barrier for its token.

    The barrier goes ahead of the message on the target worker's channel: once its subscriber
    applied it, its cache has every commit up to the token that it may serve. Only for the
    protocols that need one (:func:`needs_barrier`)."""
    if needs_barrier(inv.protocol):
        pipe.publish(channel_for(inv.plat, slot), f"b|{inv.token}")
    pipe.rpush(queue_key(inv.plat, slot), inv.wire())


def send(client: redis.Redis, inv: Invocation, exclude: int | None,
         admit: bool = False) -> None:
    """Queue ``inv`` on a random worker other than ``exclude`` (one round trip).

    ``admit``: ``inv`` is a fresh root instance; its generation key (the fence) is set in the
    same round trip as the message is queued, ahead of it."""
    choices = [s for s in range(inv.slots) if s != exclude] or list(range(inv.slots))
    rng = random.Random(zlib.crc32(f"{inv.instance}|{inv.call_id}".encode()))
    slot = rng.choice(choices)
    pipe = client.pipeline(transaction=admit)
    if admit:
        pipe.set(fence_key(inv.ns, inv.instance), inv.gen)
    enqueue(pipe, inv, slot)
    pipe.execute()


def _parse_reply(inv: Invocation, raw: bytes) -> dict[str, Any]:
    reply = json.loads(raw)
    if "error" in reply:
        if reply.get("kind") == "unknown_function":
            raise UnknownNameError("function", inv.fn, sorted(FUNCTIONS))
        if reply.get("kind") == "BadInputError":
            raise BadInputError(f"function '{inv.fn}': {reply['error']}", field="arg")
        raise InvocationError(f"function '{inv.fn}' failed: {reply['error']}")
    return reply


def dispatch(client: redis.Redis, inv: Invocation, exclude: int | None,
             timeout: float, admit: bool = False) -> dict[str, Any]:
    """Send ``inv`` to a random worker other than ``exclude`` and wait for its reply.

    The client's call: ``timeout`` is the caller's own deadline (an :class:`InvocationError`
    with ``field="timeout"``); the instance itself goes on and finishes. A parent waiting for
    its child uses :func:`call_child` instead, which has no deadline."""
    send(client, inv, exclude, admit)
    got = client.blpop([reply_key(inv.plat, inv.call_id)], timeout=max(1, int(timeout)))
    if got is None:
        raise InvocationError(f"no reply from '{inv.fn}' within {timeout:.0f} s",
                              field="timeout", hint="are the workers alive?")
    return _parse_reply(inv, got[1])


#: how often a parent waiting for its child checks that the child's message still exists
CHILD_CHECK_S = 5.0


def call_child(resources: WorkerResources, inv: Invocation, exclude: int | None,
               check_s: float = CHILD_CHECK_S) -> dict[str, Any]:
    """Run child ``inv`` on another worker and wait for its reply, **without a deadline**.

    A child's message is durable (a queue, a processing list, redelivered when its worker dies
    or stalls), so a parent waits for it as long as it exists; giving up would leave a saga
    half done with no one to finish it (issue 44: 15 such sagas at load ~300, when this was a
    60 s timeout). Every ``check_s`` without a reply the parent asks Redis, in one script,
    where the child is: still queued or running -> wait on; the parent's own fence gone ->
    :class:`Fenced` (a newer execution or GC superseded it; nothing more may be written); the
    message nowhere and no reply (lost with a Redis that does not persist) -> send it again
    (the child's log makes a second execution replay what the first applied)."""
    client = resources.client
    key = reply_key(inv.plat, inv.call_id)
    send(client, inv, exclude)
    while True:
        got = client.blpop([key], timeout=check_s)
        if got is not None:
            return _parse_reply(inv, got[1])
        where = int(resources.scripts["child_where"](
            keys=[fence_key(inv.ns, inv.instance), key, workers_key(inv.plat)],
            args=[inv.gen, inv.plat, inv.slots, inv.call_id], client=client))
        if where < 0:
            raise Fenced(f"instance {inv.instance} was collected or re-admitted")
        if where == 0:
            resources.resent += 1
            send(client, replace(inv, replay=True), exclude)


class WorkerResources:
    """What one worker process shares among its invocations: client, cache, flush pool."""

    def __init__(self, client: redis.Redis, slot: int, wait_s: float = 0.0003,
                 subscriber_client: redis.Redis | None = None, plat: str | None = None,
                 child_check_s: float = CHILD_CHECK_S) -> None:
        self.client = client
        self.slot = slot
        self.child_check_s = child_check_s  # see call_child
        self.resent = 0  # child messages sent again because they were found nowhere
        # the FCCache channel: the slot's (dispatchers stamp it) or, outside a platform, the
        # shared one of standalone caches
        self.channel = channel_for(plat, slot) if plat is not None else CHANNEL
        self.wait_s = wait_s
        self.scripts = scripts_for(client)
        self.cache = FCCache()
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="flush")
        self.memo: dict[str, Any] = {}
        self.subscriber = Subscriber(subscriber_client or client, self.cache, self.channel)

    def start(self) -> WorkerResources:
        self.subscriber.start()
        return self

    def close(self) -> None:
        self.subscriber.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)


class Ctx:
    """What a function sees: ``read``, ``write`` and ``invoke``, each one numbered step."""

    def __init__(self, io: Any, inv: Invocation, resources: WorkerResources, stats: IOStats,
                 replay: bool) -> None:
        self.io, self.inv, self.resources, self.stats = io, inv, resources, stats
        self.replay = replay
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
        later = self.io.store.trips > 0
        start = time.perf_counter()
        self.io.write(step, key, value)
        elapsed = time.perf_counter() - start
        self.stats.writes.append(elapsed)
        if not getattr(self.io, "write_behind", False):  # durable when it returns
            self.stats.durable.append(elapsed)
            if later:
                self.stats.durable_later.append(elapsed)
        maybe_crash(self.inv, "post", step)

    def invoke(self, fn: str, arg: Any) -> Any:
        """Call another function (on another worker) and return its result."""
        step = self._next()
        self.io.sync()
        child = replace(self.inv, call_id=uuid.uuid4().hex, instance=f"{self.inv.instance}.{step}",
                        fn=fn, arg=arg, attempt=0, replay=self.replay, token=self.io.seq,
                        track=False)
        reply = call_child(self.resources, child, self.resources.slot,
                           self.resources.child_check_s)
        self.io.observe(int(reply["seq"]))
        self.stats.merge(reply["stats"])
        maybe_crash(self.inv, "post", step)
        return reply["value"]


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key or "|" in key:
        raise BadInputError(f"state keys are non-empty strings without '|', got {key!r}",
                            field="key")


def acquire(resources: WorkerResources, inv: Invocation, keys: list[str],
            timeout: float = LOCK_TIMEOUT_S) -> tuple[int, bool]:
    """Take every declared key for ``inv.instance`` (waiting while another instance holds one);
    returns the global commit sequence at acquisition (a lower bound for what must be seen) and
    whether the keys were taken (False: the instance's result is already logged, so this is a
    late execution that only replays it). A fenced execution takes nothing (:class:`Fenced`)."""
    if not keys:
        return 0, False
    script = resources.scripts["lock_acquire"]
    result = protocol_class(inv.protocol).result_key(inv.ns, inv.instance)
    lock_keys_ = [fence_key(inv.ns, inv.instance), SEQ_KEY, result,
                  *[f"{inv.ns}:lock:{k}" for k in keys]]
    deadline = time.monotonic() + timeout
    pause = 0.0005
    while True:
        channel = resources.channel if needs_barrier(inv.protocol) else ""
        got, detail = script(keys=lock_keys_, args=[inv.instance, inv.gen, channel],
                             client=resources.client)
        if int(got) in (1, 2):
            return int(detail), int(got) == 1
        if int(got) < 0:
            raise Fenced(f"instance {inv.instance} was collected or re-admitted")
        if time.monotonic() > deadline:
            raise InvocationError(f"keys {keys!r:.60} still held by another invocation after "
                                  f"{timeout:.0f} s", field="keys")
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, 0.02)


def release(resources: WorkerResources, inv: Invocation, keys: list[str]) -> None:
    if keys:
        resources.scripts["lock_release"](keys=[f"{inv.ns}:lock:{k}" for k in keys],
                                          args=[f"{inv.instance}|{inv.gen}"],
                                          client=resources.client)


def execute(resources: WorkerResources, inv: Invocation) -> dict:
    """Run one invocation to completion (re-running on conflicts); the reply as a dict.

    A ``redis.RedisError`` propagates: the caller (the worker loop) waits for Redis and runs the
    invocation again; a function's own error is the reply.
    """
    fn = FUNCTIONS.get(inv.fn)
    if fn is None:
        return {"error": f"unknown function '{inv.fn}'", "kind": "unknown_function"}
    stats = IOStats()
    try:
        keys = lock_keys(fn, inv.arg)
    except SchedlabError as exc:
        return {"error": str(exc), "kind": type(exc).__name__}
    try:
        floor, taken = acquire(resources, inv, keys)
        if keys and not taken:  # finished already: replay its result, hold nothing
            inv, keys = replace(inv, replay=True), []
    except InvocationError as exc:
        return {"error": str(exc), "kind": "lock_timeout"}
    except Fenced as exc:  # a lock this generation took before it was fenced goes back
        release(resources, inv, keys)
        return {"error": str(exc), "kind": "fenced"}
    finished = False
    try:
        for rerun in range(MAX_RERUNS):
            replay = inv.replay or rerun > 0
            env = Env(inv.instance, inv.ns, replay=replay, token=max(inv.token, floor),
                      resources=resources, crash=lambda point, step: maybe_crash(inv, point, step),
                      gen=inv.gen)
            io = make_protocol(inv.protocol, Store(resources.client, stats, inv.rtt_ms), env)
            try:
                try:
                    done, result = io.begin()
                    if not done:
                        ctx = Ctx(io, inv, resources, stats, replay)
                        value = fn(ctx, inv.arg)
                        start = time.perf_counter()
                        result = io.finish(value)
                        stats.finishes.append(time.perf_counter() - start)
                finally:
                    io.close()
                finished = True
                return {"value": result, "seq": io.seq, "stats": stats.to_dict()}
            except Conflict:
                continue
            except Fenced as exc:  # superseded: no state change may follow (the reply is dropped)
                finished = True
                return {"error": str(exc), "kind": "fenced"}
            except redis.RedisError:
                raise
            except SchedlabError as exc:
                finished = True
                return {"error": str(exc), "kind": type(exc).__name__}
            except Exception as exc:  # a bug in a user function: report it, do not retry forever
                finished = True
                return {"error": f"{type(exc).__name__}: {exc}", "kind": "function_error"}
        finished = True
        return {"error": f"gave up after {MAX_RERUNS} conflicting re-runs", "kind": "conflict"}
    finally:
        if finished:  # the instance is over (result logged, or failed): give the keys back
            release(resources, inv, keys)


def _reply(resources: WorkerResources, inv: Invocation, raw: bytes, wid: str,
           reply: dict) -> None:
    """Answer, mark the instance done (log GC), drop the message: one round trip, one script.
    A fenced execution (its instance collected or re-admitted) only drops its message."""
    state: dict[str, Any] = {}
    if inv.track:
        state = ({"state": "failed", "error": reply["error"]} if "error" in reply
                 else {"state": "done", "value": dumps(reply["value"]), "seq": reply["seq"]})
    pairs = [str(x) for item in state.items() for x in item]
    resources.scripts["reply"](
        keys=[fence_key(inv.ns, inv.instance), reply_key(inv.plat, inv.call_id),
              f"{inv.ns}:done", f"{inv.ns}:req:{inv.instance}", proc_key(inv.plat, wid)],
        args=[inv.gen, json.dumps(reply, separators=(",", ":")),
              "" if "error" in reply else inv.instance, repr(time.time()), len(state), *pairs,
              raw], client=resources.client)


def wait_for_redis(client: redis.Redis, stop: threading.Event | None = None) -> None:
    pause = 0.05
    while stop is None or not stop.is_set():
        try:
            client.ping()
            return
        except redis.RedisError:
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _handle(resources: WorkerResources, raw: bytes, wid: str) -> None:
    inv = Invocation.from_wire(raw)
    while True:
        try:
            reply = execute(resources, inv)
            maybe_crash(inv, "end", 0)  # result logged, reply not yet sent
            _reply(resources, inv, raw, wid, reply)
            return
        except redis.RedisError:
            # Redis went away mid-execution: nothing was acknowledged; run it again (replaying
            # what was logged) once Redis answers
            wait_for_redis(resources.client)
            inv = replace(inv, replay=True)


class Heartbeat(threading.Thread):
    """Keeps this worker's lease alive and its id registered; survives Redis outages."""

    def __init__(self, client: redis.Redis, plat: str, wid: str, lease_s: float) -> None:
        super().__init__(daemon=True, name="arcus-heartbeat")
        self.client, self.plat, self.wid, self.lease_s = client, plat, wid, lease_s
        self.beats = 0

    def beat(self) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.set(lease_key(self.plat, self.wid), os.getpid(), px=int(self.lease_s * 1000))
        pipe.sadd(workers_key(self.plat), self.wid)
        pipe.execute()
        self.beats += 1

    def run(self) -> None:
        while True:
            try:
                self.beat()
            except redis.RedisError:
                pass
            time.sleep(self.lease_s / 4)


def _gone(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def worker_main(slot: int, url: str, plat: str, threads: int, modules: tuple[str, ...],
                wait_s: float, wid: str = "", lease_s: float = 5.0,
                paths: tuple[str, ...] = (), gateway: int = 0,
                child_check_s: float = CHILD_CHECK_S) -> None:
    """A worker process: take messages from its queue, run each in its own thread, reply."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the gateway's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.path[:0] = [p for p in paths if p not in sys.path]
    for module in modules:
        importlib.import_module(module)
    wid = wid or f"{slot}-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(url, socket_timeout=None)
    listener = redis.Redis.from_url(url, socket_timeout=None, retry=no_retry())
    resources = WorkerResources(client, slot, wait_s, subscriber_client=listener,
                                plat=plat, child_check_s=child_check_s).start()
    heartbeat = Heartbeat(client, plat, wid, lease_s)
    while True:  # registered before the first message can be taken
        try:
            heartbeat.beat()
            break
        except redis.RedisError:
            time.sleep(0.1)
    heartbeat.start()
    handlers = ThreadPoolExecutor(max_workers=4096, thread_name_prefix="invocation")
    # the next take is sent before a message is handed over, on a connection of its own, so
    # this thread is back in a blocking read (no GIL, no CPU) while the invocation starts
    taker = client.connection_pool.make_connection()
    take = ("BLMOVE", queue_key(plat, slot), proc_key(plat, wid), "LEFT", "RIGHT", 0.5)
    sent = False
    parent = os.getppid()
    checked = time.monotonic()
    while os.getppid() == parent:  # the fork server died: stop too
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if _gone(gateway):  # the gateway was killed: its fork server is of no use either
                with contextlib.suppress(OSError):
                    os.kill(parent, signal.SIGTERM)
                break
        try:
            if not sent:
                taker.send_command(*take)
                sent = True
            raw = taker.read_response()
            sent = False
            taker.send_command(*take)
            sent = True
        except redis.RedisError:
            taker.disconnect()
            sent = False
            time.sleep(0.1)
            continue
        if raw is not None:
            # a thread per message in flight (a parent blocked on its child never starves the
            # child); idle ones are reused: starting a thread costs more than a loopback
            # round trip and was charged to the first state operation of every invocation
            handlers.submit(_handle, resources, raw, wid)
    os._exit(0)


def _validate(protocol: str, fn: str) -> None:
    protocol_class(protocol)
    if fn not in FUNCTIONS:
        raise UnknownNameError("function", fn, sorted(FUNCTIONS))


__all__ = ["Ctx", "Invocation", "InvocationError", "WorkerResources", "call_child", "connect",
           "dispatch", "send",
           "execute", "redeliver", "worker_main", "_validate", "mp", "multiprocessing"]
