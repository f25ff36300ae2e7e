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
  only started after a flush (``sync``), so no acknowledged write can be lost.

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

import threading
import time
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


class CFLog(StateIOBase):
    """CFLog without FCCache: every read and write is one conditional Lua round trip."""

    name: ClassVar[str] = "cflog"
    description: ClassVar[str] = "CFLog alone: coordination-free per-step logging, no cache"
    use_cache: ClassVar[bool] = False
    write_behind: ClassVar[bool] = False

    def __init__(self, store: Store, env: Env) -> None:
        super().__init__(store, env)
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
        self.queued_at: dict[int, float] = {}  # id(record) -> when ctx.write queued it
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
        args: list[Any] = ["1" if self.use_cache else "0", self.env.gen]
        for record in batch:
            args.extend(record)
        keys = [self.log_key, SEQ_KEY, CHANNEL, self.gen_key]
        send = self.store.script_now if paid else self.store.script
        reply = send(self.scripts["cflog_flush"], keys, args)
        status, detail, maxseq = text(reply[0]), text(reply[1]), int(reply[2])
        if status == "fenced":
            raise Fenced(f"instance {self.env.instance} was collected or re-admitted")
        self.seq = max(self.seq, maxseq)
        if status == "conflict":
            self.conflict = f"step {detail} logged differently by another execution"
            raise Conflict(self.conflict)
        if self.write_behind:
            now = time.perf_counter()
            for record in batch:
                queued = self.queued_at.pop(id(record), None)
                if queued is not None:
                    self.stats.durable.append(now - queued)
        self.env.crash("flush", int(batch[-1][1]) if batch[-1][1].isdigit() else -1)
        return [status, detail]

    def _flush(self, extra: Record | None = None) -> list[Any]:
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
        with self.queue_lock:
            self.pending.append(record)
            self.queued_at[id(record)] = time.perf_counter()
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
    """The full system: CFLog + FCCache reads + write-behind with acknowledgement at finish."""

    name: ClassVar[str] = "arcus"
    description: ClassVar[str] = "Arcus: CFLog + FCCache (cached reads, write-behind)"
    use_cache: ClassVar[bool] = True
    write_behind: ClassVar[bool] = True
