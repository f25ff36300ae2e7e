"""Arcus's own state I/O: CFLog alone, and CFLog + FCCache (the full system). Paper 12.

**CFLog** logs every step of an instance under a deterministic key (``ns:log:INSTANCE``, field =
step number) with conditional writes inside one Lua script, so re-execution after a crash replays
logged reads and skips logged writes with no sequencer and no shared-log ordering: one round trip
per read and per write.

**Arcus** adds FCCache and a shorter write path:

* reads are served from the worker's versioned cache when it is provably fresh enough (see
  :mod:`schedlab.arcus.fccache`); the read's log record is *deferred* and travels with the next
  flush. Nothing outside the function can depend on a read before that flush (writes, child
  invocations and the result all flush first), so a crash before it just re-reads;
* a write is acknowledged to the function once it is in the execution's own write overlay and the
  flush queue (no round trip); a per-instance flusher makes it durable in the background, in
  order, together with the deferred read records. An invocation's **result is acknowledged only
  after all its writes are durable** (``finish`` flushes and waits), and a child invocation is
  only started after a flush (``sync``), so no acknowledged write can be lost. The
  ``arcus-inline`` variant (issue 44) sends each write from the function's own thread instead,
  pipelined on the execution's own connection (:class:`Link`), with Redis keeping the order.

Two rules keep retries honest (both found by an outside crash harness, both tested):

* **only values read fresh from Redis enter FCCache.** A replayed read returns the value the
  first execution logged, which may be long overwritten; caching it would serve that old value
  to later requests on this worker (a stale read after a retry);
* **a fenced flush ends the execution.** Every flush first checks, inside the same script, that
  the instance's generation key still holds this execution's generation. Log GC deletes that key
  with the log, so an execution stalled (SIGSTOP, a long pause) past its lease and past GC cannot
  re-apply a write whose log record is gone (issue 44);
* **a failed background flush poisons the execution.** The error is recorded under the flush
  lock, so ``finish`` (which takes the same lock) cannot log a result after a batch of writes
  was lost; the execution fails, and the runtime re-runs it in replay mode.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import deque
from typing import Any, ClassVar

import redis

from schedlab.arcus.fccache import CHANNEL, SEQ_KEY
from schedlab.arcus.iobase import Conflict, Env, Fenced, StateIOBase, dumps, loads, text
from schedlab.arcus.store import Store

Record = tuple[str, str, str, str]  # kind, step, state key, value


def parse_read(payload: str) -> tuple[int, str]:
    """A read log record ``r<seq>|<json>`` as (seq, json)."""
    if not payload.startswith("r"):
        raise Conflict(f"step was logged as {payload[:12]!r}, not as a read")
    seq, value = payload[1:].split("|", 1)
    return int(seq), value


class Flight:
    """One batch sent on a :class:`Link`, until its reply has been read and settled."""

    __slots__ = ("args", "batch", "done", "error", "keys", "ready_at", "result")

    def __init__(self, batch: list[Record], keys: list[str], args: list[Any]) -> None:
        self.batch, self.keys, self.args = batch, keys, args
        self.done = False
        self.result: list[Any] = ["ok", ""]
        self.error: BaseException | None = None
        self.ready_at = 0.0


class Link:
    """One execution's own connection for its flushes, pipelined (issue 44).

    The function's thread *sends* each flush the moment it has one (a socket write, no handoff
    to another thread, no wait for the reply) and runs on; Redis answers one connection's
    requests in order. Replies are read by the same thread: without blocking at every later
    step (whatever has arrived), and blocking only when something must be known, namely a
    cache-miss read, a child invocation (``sync``) or the result (``finish``). No thread is
    woken for a reply, so a durable write costs one round trip from the function's own thread,
    like Halfmoon's append, and several writes share their round trips.

    Order across failures is kept by Redis itself: batches are numbered and a batch is applied
    only if the execution's previous one was (``cflog_flush``). Once a send or a read fails,
    nothing more is sent on the link (it is never silently reopened). The injected storage delay
    (``Store.delay``) is charged to every reply: it counts as arrived ``delay`` after it was
    read, so a pipelined flush pays the same network time as a blocking call (never less: a
    reply is read no earlier than it came back), only concurrently with the function.
    """

    def __init__(self, client: redis.Redis, delay: float, script: Any, settle: Any,
                 durable: Any) -> None:
        self.client = client
        self.pool = client.connection_pool
        self.conn = self.pool.get_connection()
        self.delay = delay
        self.script = script
        self.settle = settle  # (flight, reply, error) -> None, called in reply order
        self.durable = durable  # (batch, when) -> None: the batch is known durable at ``when``
        self.inflight: deque[Flight] = deque()
        self.arrived: deque[Flight] = deque()  # read, network time not yet over
        self.failed: BaseException | None = None
        self.last: Flight | None = None
        self.reloaded = False  # the script was loaded again once (after a NOSCRIPT)

    def send(self, batch: list[Record], keys: list[str], args: list[Any]) -> Flight:
        if self.failed is not None:
            raise redis.ConnectionError(f"this execution's link failed: {self.failed!r}")
        flight = Flight(batch, keys, args)
        try:
            self.conn.send_command("EVALSHA", self.script.sha, len(keys), *keys, *args)
        except BaseException as exc:
            self._fail(exc)  # what is already in flight is lost with the connection
            raise
        self.inflight.append(flight)
        self.last = flight
        return flight

    def _fail(self, exc: BaseException) -> None:
        self.failed = self.failed or exc
        lost, self.inflight = list(self.inflight), deque()
        for each in lost:
            each.ready_at = time.perf_counter()
            self.settle(each, None, exc)

    def _read_one(self) -> None:
        flight = self.inflight[0]
        error: BaseException | None = None
        reply: Any = None
        try:
            reply = self.conn.read_response()
        except redis.exceptions.NoScriptError as exc:
            if self.reloaded:
                error = exc
            else:
                self._reload()
                return
        except redis.ResponseError as exc:  # this request failed; the connection is fine
            error = exc
        except BaseException as exc:  # noqa: BLE001 - the connection is gone: fail them all
            self._fail(exc)
            return
        flight.ready_at = time.perf_counter() + self.delay
        self.inflight.popleft()
        self.settle(flight, reply, error)
        if error is None and flight.error is None:
            self.arrived.append(flight)

    def _reload(self) -> None:
        """The first flight in flight found the script unknown (a fresh or restarted Redis):
        it was not applied, so no later one was either (each needs its predecessor). Read
        their refusals, load the script on this connection and send them all again, in order,
        with the same numbers."""
        self.reloaded = True
        for _ in range(len(self.inflight) - 1):
            with contextlib.suppress(redis.ResponseError):
                self.conn.read_response()
        self.conn.send_command("SCRIPT", "LOAD", self.script.script)
        self.conn.read_response()
        for flight in self.inflight:
            self.conn.send_command("EVALSHA", self.script.sha, len(flight.keys), *flight.keys,
                                   *flight.args)

    def _release(self) -> None:
        """Flights whose network time is over are known durable now (never earlier: like a
        blocking call, the time includes any oversleep of the wait)."""
        now = time.perf_counter()
        while self.arrived and self.arrived[0].ready_at <= now:
            self.durable(self.arrived.popleft().batch, now)

    def poll(self) -> None:
        """Settle every reply that has already arrived, without blocking."""
        try:
            while self.inflight and self.conn.can_read(timeout=0):
                self._read_one()
        except BaseException as exc:  # noqa: BLE001 - can_read found the connection broken
            self._fail(exc)
        self._release()

    def wait(self, flight: Flight) -> None:
        """Read replies (in order) until ``flight``'s is settled and its network time passed.

        One sleep covers every reply read so far; each is known durable at the wake-up time
        less how much earlier than the last its network time ended, so it is charged the
        sleep's oversleep just as a blocking call waiting for it alone would be."""
        while not flight.done and self.inflight:
            self._read_one()
        target = max([flight.ready_at, *(each.ready_at for each in self.arrived)])
        remaining = target - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        wake = time.perf_counter()
        while self.arrived:
            each = self.arrived.popleft()
            self.durable(each.batch, wake - (target - each.ready_at))

    def close(self) -> None:
        """Read what is still in flight (never leave replies on a pooled connection), then
        give the connection back; a failed one is dropped first."""
        while self.inflight:
            self._read_one()
        if self.failed is not None:
            self.conn.disconnect()
        self.failed = self.failed or redis.ConnectionError("link closed")
        with contextlib.suppress(Exception):
            self.pool.release(self.conn)


class CFLog(StateIOBase):
    """CFLog without FCCache: every read and write is one conditional Lua round trip."""

    name: ClassVar[str] = "cflog"
    description: ClassVar[str] = "CFLog alone: coordination-free per-step logging, no cache"
    use_cache: ClassVar[bool] = False
    #: how a commit reaches the other workers' caches: "all" (broadcast, the paper's FCCache)
    #: or "keys" (only the workers registered for the key: ``arcus-keys``)
    push: ClassVar[str] = "all"
    #: how a write is made durable: "sync" (one blocking round trip in ``ctx.write``), "inline"
    #: (sent from the function's thread at once, pipelined, replies read by that thread;
    #: the ``arcus-inline`` variant), "thread" (a pipelined background flusher: Arcus's default)
    flush_mode: ClassVar[str] = "sync"

    @property
    def write_behind(self) -> bool:
        """``ctx.write`` returns before the write is durable (the result waits for it)."""
        return self.flush_mode != "sync"

    def __init__(self, store: Store, env: Env) -> None:
        super().__init__(store, env)
        self.link: Link | None = None  # inline mode: this execution's pipelined connection
        self.flights = 0  # inline mode: batches sent, numbered for Redis's order check
        self.exec_id = uuid.uuid4().hex[:12]
        self.pending: list[Record] = []
        self.overlay: dict[str, Any] = {}
        self.queue_lock = threading.Lock()
        self.flush_lock = threading.Lock()
        # pipelined flushes (write-behind): batches take tickets in queue order, travel
        # concurrently, and are applied strictly in ticket order
        self.turn = threading.Condition()
        self.next_ticket = 0
        self.applied_ticket = 0
        self.taker_due = False  # a background flush is scheduled and has not taken its batch
        self.conflict: str | None = None
        self.error: BaseException | None = None  # a failed flush: nothing may be acknowledged
        # id(record) -> when ctx.write queued it, and whether a round trip of this execution
        # went before it
        self.queued_at: dict[int, tuple[float, bool]] = {}
        self.scripts = env.resources.scripts

    def begin(self) -> tuple[bool, Any]:
        if not self.env.replay:
            return False, None  # nothing can be logged yet: skip the lookup round trip
        raw = self.store.call("HGETALL", self.log_key)
        self.logged = {text(k): text(v) for k, v in raw.items()}
        if "res" in self.logged:
            return True, loads(self.logged["res"])
        return False, None

    # --- flushing -----------------------------------------------------------------------------
    def _run(self, batch: list[Record], paid: bool = False) -> list[Any]:
        args = self._args(batch, "", 0)
        keys = [self.log_key, SEQ_KEY, CHANNEL, self.gen_key]
        send = self.store.script_now if paid else self.store.script
        reply = send(self.scripts["cflog_flush"], keys, args)
        return self._settle(batch, reply, time.perf_counter())

    def _durable(self, batch: list[Record], at: float) -> None:
        """The writes of ``batch`` are known durable (to this execution) at ``at``."""
        for record in batch:
            queued = self.queued_at.pop(id(record), None)
            if queued is not None:
                queued, later = queued
                self.stats.durable.append(at - queued)
                if later:
                    self.stats.durable_later.append(at - queued)

    def _args(self, batch: list[Record], order: str, number: int) -> list[Any]:
        push = ("" if not self.use_cache else "a" if self.push == "all"
                else "k" + self.env.resources.channel)
        args: list[Any] = [push, self.env.gen, order, number]
        for record in batch:
            args.extend(record)
        return args

    def _settle(self, batch: list[Record], reply: Any, durable_at: float | None) -> list[Any]:
        """Account for one flush's reply (its writes durable at ``durable_at``; None: recorded
        later by :meth:`_durable`); raise what it says."""
        status, detail, maxseq = text(reply[0]), text(reply[1]), int(reply[2])
        if status == "fenced":
            raise Fenced(f"instance {self.env.instance} was collected or re-admitted")
        if status == "gap":  # an earlier batch of this execution was not applied
            raise redis.ConnectionError("an earlier flush of this execution was lost")
        self.seq = max(self.seq, maxseq)
        if status == "conflict":
            self.conflict = f"step {detail} logged differently by another execution"
            raise Conflict(self.conflict)
        if self.write_behind and durable_at is not None:
            self._durable(batch, durable_at)
        self.env.crash("flush", int(batch[-1][1]) if batch[-1][1].isdigit() else -1)
        return [status, detail]

    def _flush(self, extra: Record | None = None) -> list[Any]:
        if self.flush_mode == "inline":
            return self._flush_inline(extra)
        if self.write_behind:
            return self._flush_pipelined(extra)
        with self.flush_lock:
            self._check()  # under the lock: a failed earlier batch stops every later one
            with self.queue_lock:
                batch, self.pending = self.pending, []
            if extra is not None:
                batch.append(extra)
            if not batch:
                return ["ok", ""]
            try:
                return self._run(batch)
            except Fenced as exc:
                self.error = exc  # every later step of this execution must stop too
                raise
            except Conflict:
                raise
            except BaseException as exc:
                self.error = exc
                raise

    def _flush_pipelined(self, extra: Record | None = None) -> list[Any]:
        """Write-behind flush, pipelined: the batch (everything queued, plus ``extra``) takes
        the next ticket, pays its round trip concurrently with batches already in flight, and
        is applied only after every earlier ticket, so batches still reach Redis in queue
        order; a batch after a failed or conflicting one is never applied (``_check`` runs
        at its turn). A write queued while a flush is in flight thus waits one round trip,
        not the rest of the earlier one plus its own."""
        with self.queue_lock:
            self._check()
            batch, self.pending = self.pending, []
            self.taker_due = False
            if extra is not None:
                batch.append(extra)
            ticket = self.next_ticket
            self.next_ticket += 1
        try:
            if batch:
                self.store.transit()
        finally:  # the ticket is always used, in order, or every later batch would wait forever
            with self.turn:
                while self.applied_ticket != ticket:
                    self.turn.wait()
        try:
            self._check()
            if not batch:
                return ["ok", ""]
            try:
                return self._run(batch, paid=True)
            except Conflict:
                raise
            except BaseException as exc:
                self.error = exc
                raise
        finally:
            with self.turn:
                self.applied_ticket += 1
                self.turn.notify_all()

    # --- inline pipelined flushes (issue 44) --------------------------------------------------
    def _send(self, batch: list[Record]) -> Flight:
        """Send ``batch`` now, from this (the function's) thread; its reply comes later."""
        if self.link is None:
            self.link = Link(self.store.client, self.store.delay, self.scripts["cflog_flush"],
                             self._settle_flight, self._durable)
        args = self._args(batch, self.exec_id, self.flights)
        keys = [self.log_key, SEQ_KEY, CHANNEL, self.gen_key]
        self.store.count()
        try:
            flight = self.link.send(batch, keys, args)
        except BaseException as exc:
            self.error = self.error or exc
            raise
        self.flights += 1
        return flight

    def _settle_flight(self, flight: Flight, reply: Any, error: BaseException | None) -> None:
        """In reply order: settle one flight, record what must stop every later step."""
        try:
            if error is not None:
                raise error
            flight.result = self._settle(flight.batch, reply, None)
        except Conflict as exc:
            flight.error = exc
        except BaseException as exc:  # noqa: BLE001 - recorded; raised at the next step
            flight.error = exc
            if self.error is None:
                self.error = exc
        finally:
            flight.done = True

    def _flush_inline(self, extra: Record | None = None) -> list[Any]:
        """Send what is queued (plus ``extra``) and wait until it, and everything sent before
        it, is settled: replies come in order."""
        self._check()
        with self.queue_lock:
            batch, self.pending = self.pending, []
        if extra is not None:
            batch.append(extra)
        flight = self._send(batch) if batch else (self.link.last if self.link else None)
        if flight is None:
            return ["ok", ""]
        self.link.wait(flight)
        self._check()
        if flight.error is not None:
            raise flight.error
        return flight.result if batch else ["ok", ""]

    def _poll(self) -> None:
        """Inline mode: settle the replies that have arrived (no blocking, no other thread)."""
        if self.link is not None and self.link.inflight:
            self.link.poll()

    def close(self) -> None:
        if self.link is not None:
            self.link.close()

    def _flush_background(self) -> None:
        try:
            self._flush_pipelined()
        except Exception:  # noqa: BLE001 - recorded in conflict/error; raised at the next step
            pass

    def _check(self) -> None:
        if self.conflict is not None:
            raise Conflict(self.conflict)
        if self.error is not None:
            if isinstance(self.error, (redis.RedisError, Fenced)):
                raise self.error
            raise redis.ConnectionError(f"a background flush failed: {self.error!r}")

    # --- the four operations ------------------------------------------------------------------
    def read(self, step: int, key: str) -> Any:
        if str(step) in self.logged:
            seq, value = parse_read(self.logged[str(step)])
            self.seq = max(self.seq, seq)
            return loads(value)
        self._poll()
        self._check()
        if key in self.overlay:  # the execution's own write: deterministic, nothing to log
            return self.overlay[key]
        skey = self.state_key(key)
        cache = self.env.resources.cache if self.use_cache else None
        if cache is not None:
            evictions = cache.evictions
            # waiting for the watermark only pays while it is cheaper than a miss's round trip
            hit = cache.get(skey, self.seq, max(self.env.resources.wait_s, self.store.delay))
            if hit is not None:
                self.stats.hits += 1
                seq, value = hit
                record = f"r{seq}|{value}"
                with self.queue_lock:
                    self.pending.append(("r", str(step), skey, record))
                self.stats.log(record)
                self.seq = max(self.seq, seq)
                return loads(value)
            self.stats.misses += 1
        status, payload = self._flush(("g", str(step), skey, ""))
        seq, value = parse_read(payload)
        if status == "read":
            self.stats.log(payload)
            if cache is not None:  # fresh from the store: may be cached
                cache.install(skey, seq, value, evictions)
        # status "logged": an earlier execution's record, possibly long overwritten; it is
        # returned (replay must repeat it) but never cached
        self.seq = max(self.seq, seq)
        return loads(value)

    def write(self, step: int, key: str, value: Any) -> None:
        self._poll()
        self._check()
        self.overlay[key] = value
        logged = self.logged.get(str(step))
        if logged is not None:  # replay: the write is already applied
            self.seq = max(self.seq, int(logged[1:]) if logged[1:].isdigit() else 0)
            return
        record = ("w", str(step), self.state_key(key), dumps(value))
        self.stats.log(record[3])
        if not self.write_behind:
            self._flush(record)
            return
        if self.flush_mode == "inline":  # sent now, from this thread; durable one RTT later
            with self.queue_lock:
                batch, self.pending = self.pending, []
            batch.append(record)
            self.queued_at[id(record)] = (time.perf_counter(), self.store.trips > 0)
            self._send(batch)
            return
        with self.queue_lock:
            self.pending.append(record)
            self.queued_at[id(record)] = (time.perf_counter(), self.store.trips > 0)
            if not self.taker_due:  # a new batch starts now, even while others are in flight
                self.taker_due = True
                self.env.resources.pool.submit(self._flush_background)

    def sync(self) -> None:
        # the flush lock orders this after any background flush already under way; whatever
        # it has not taken yet goes in this batch, so there is no separate wait
        self._check()
        self._flush()
        self._check()

    def finish(self, result: Any) -> Any:
        self._check()
        encoded = dumps(result)
        self.stats.log(encoded)
        status, winner = self._flush(("x", "res", "", encoded))
        self._check()
        return loads(winner)


class Arcus(CFLog):
    """The full system: CFLog + FCCache reads + write-behind with acknowledgement at finish.

    Writes are flushed by a pipelined background flusher (``flush_mode = "thread"``). Issue 44
    measured it side by side with sending each write from the function's own thread
    (:class:`ArcusInline`) and with write-through (:class:`ArcusSync`) against Halfmoon
    (``benchmarks/arcus/durable_write.py``): no variant was significantly faster, and this one
    had the best point estimates of durable-write, end-to-end and CPU time, so it stays the
    default."""

    name: ClassVar[str] = "arcus"
    description: ClassVar[str] = "Arcus: CFLog + FCCache (cached reads, pipelined write-behind)"
    use_cache: ClassVar[bool] = True
    flush_mode: ClassVar[str] = "thread"


class ArcusInline(Arcus):
    """Arcus with each write sent from the function's own thread on the execution's own
    connection, replies read by that thread (:class:`Link`; issue 44)."""

    name: ClassVar[str] = "arcus-inline"
    description: ClassVar[str] = "Arcus, writes sent inline from the function's thread (pipelined)"
    flush_mode: ClassVar[str] = "inline"


class ArcusKeys(Arcus):
    """Arcus pushing each commit only to the workers that cache its key (issue 44).

    A worker registers for a key in the same script that reads it from Redis for its cache;
    a commit publishes on the registered workers' channels only, so a write to a key cached by
    few workers wakes few. The price: a worker that never read a key gets no push for it, so
    the dispersed pattern the paper's broadcast serves (a step reads what the previous step
    wrote on another worker) misses on a key's first read on each worker."""

    name: ClassVar[str] = "arcus-keys"
    description: ClassVar[str] = "Arcus, commits pushed only to the workers caching the key"
    push: ClassVar[str] = "keys"


class ArcusSync(Arcus):
    """Arcus with write-through: each ``ctx.write`` is one blocking round trip."""

    name: ClassVar[str] = "arcus-sync"
    description: ClassVar[str] = "Arcus, write-through (one blocking round trip per write)"
    flush_mode: ClassVar[str] = "sync"
