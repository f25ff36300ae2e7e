"""FCCache: a per-worker state cache built for the dispersed invocation pattern (Arcus, paper 12).

Serverless platforms rarely run consecutive steps of one request on the same worker, so a cache
filled only by a worker's own reads misses on exactly the data the previous step just wrote. Two
ideas fix that here:

* **push on commit, to the workers that cache the key** - every committed Arcus write is
  published by the same Lua script that commits it (``PUBLISH`` inside the script, so publish
  order = commit order = global commit sequence number ``seq``), but only on the channels of the
  workers registered for that key (``SKEY|c``, a set of channels; a worker registers in the
  same script that reads the key from Redis for its cache). Until issue 44 every commit went to
  every worker, waking each worker process (and the writer's own subscriber thread) once per
  write, whatever it cached;
* **barriers** - a worker that receives no publication for a while cannot know from its own
  channel alone that it missed nothing, so whoever hands it work stamps its channel first: the
  dispatcher publishes ``b|TOKEN`` on the target worker's channel in the same round trip as it
  queues the message, and the lock script publishes the sequence it returns. Publications on one
  channel arrive in commit order, so once the barrier is applied every commit up to the token
  to a key this worker caches has been applied too. One barrier per invocation, on the worker
  that runs it, instead of one publication per commit on every worker;
* **commit-sequence tokens** - each reply carries the highest ``seq`` its invocation read or
  wrote and the gateway stamps every new invocation with the highest ``seq`` it has seen. A cache
  serves a key only when its subscriber has applied every commit up to the token (waiting a
  bounded ``wait_s`` for it); otherwise the read goes to Redis.

Consistency this gives (tested): entries are versioned by ``seq`` and only ever replaced by a
newer one, so concurrent writers and out-of-order fetch/publish races never move a key backwards;
a read never returns a value older than any write acknowledged before its request (or its
parent step) started. Not linearizable for requests that overlap in time (they may see the
value before a concurrent write), which is the level the paper's baselines give as well.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict

import redis

CHANNEL = "arcus:commits"  # the channel of a cache outside a platform (tests, tools)
SEQ_KEY = "arcus:seq"


def channel_for(plat: str, slot: int) -> str:
    """The FCCache channel of a platform's worker slot (dispatchers stamp it with barriers)."""
    return f"{plat}:c:{slot}"


def subscribers_key(state_key: str) -> str:
    """The set of channels whose workers cache ``state_key`` (keys never contain '|')."""
    return f"{state_key}|c"


class FCCache:
    """Versioned LRU of ``redis key -> (seq, value json)`` plus the applied-commit watermark."""

    def __init__(self, capacity: int = 50_000) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self.applied = -1  # highest commit seq whose publication has been installed
        self.healthy = False  # False until subscribed: then nothing may be served locally
        self.evictions = 0  # bumped on every eviction/reset: guards fetch-install races
        self.cond = threading.Condition()

    def get(self, key: str, token: int, wait_s: float) -> tuple[int, str] | None:
        """The cached (seq, value) when it is provably at least as new as ``token``; else None."""
        with self.cond:
            if not self.healthy:
                return None
            if self.applied < token:
                self.cond.wait_for(lambda: self.applied >= token or not self.healthy, wait_s)
                if self.applied < token or not self.healthy:
                    return None
            entry = self.entries.get(key)
            if entry is not None:
                self.entries.move_to_end(key)
            return entry

    def install(self, key: str, seq: int, value: str, evictions_seen: int | None = None) -> None:
        """Keep the newer of the cached and the given version.

        ``evictions_seen`` is given for values fetched from Redis: if anything was evicted while
        the fetch was in flight, a newer publication of this key may have been installed and
        evicted in between, so the fetched value is not cached at all.
        """
        with self.cond:
            if evictions_seen is not None and evictions_seen != self.evictions:
                return
            current = self.entries.get(key)
            if current is not None and current[0] >= seq:
                return
            self.entries[key] = (seq, value)
            self.entries.move_to_end(key)
            while len(self.entries) > self.capacity:
                self.entries.popitem(last=False)
                self.evictions += 1

    def publish_applied(self, key: str, seq: int, value: str) -> None:
        """Install one publication and advance the watermark (publications arrive in order).

        Installed even at or below the watermark (never dropped): a barrier may have moved the
        watermark already, and the entry keeps the newer version anyway."""
        with self.cond:
            self.install(key, seq, value)
            if seq > self.applied:
                self.applied = seq
                self.cond.notify_all()

    def advance(self, seq: int) -> None:
        """A barrier: every commit up to ``seq`` this cache must see has been applied."""
        with self.cond:
            if seq > self.applied:
                self.applied = seq
                self.cond.notify_all()

    def reset(self, applied: int, healthy: bool) -> None:
        """Forget everything (a missed publication would otherwise make an entry stale forever)."""
        with self.cond:
            self.entries.clear()
            self.evictions += 1
            self.applied = applied
            self.healthy = healthy
            self.cond.notify_all()


class Subscriber(threading.Thread):
    """Installs published commits into a cache; on any connection error, resets and resubscribes.

    ``client`` must not retry on its own (:func:`schedlab.arcus.store.no_retry`): a pub/sub
    connection that reconnects silently would miss the publications sent meanwhile and keep
    serving entries they overwrote. Here every break is seen, the cache is emptied and marked
    unhealthy, and it turns healthy again on the *subscribe confirmation* of the new connection
    (not on the first publication, which may be a long time coming). A second confirmation on
    one connection (a reconnect inside the client) is treated the same way.
    """

    def __init__(self, client: redis.Redis, cache: FCCache, channel: str = CHANNEL) -> None:
        super().__init__(daemon=True, name="fccache-subscriber")
        self.client = client
        self.cache = cache
        self.channel = channel
        self.stopped = threading.Event()
        self.subscriptions = 0  # confirmations seen (tests and diagnostics)
        self.received = 0  # publications (commits and barriers) read (tests and diagnostics)

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self._listen()
            except (redis.RedisError, OSError, ValueError):
                self.cache.reset(-1, healthy=False)
                self.stopped.wait(0.05)

    def _confirmed(self) -> None:
        # read the watermark only after the subscription is confirmed, so that no commit after
        # ``start`` can be missed; everything cached before is forgotten
        self.cache.reset(-1, healthy=False)
        start = int(self.client.get(SEQ_KEY) or 0)
        self.cache.reset(start, healthy=True)
        self.subscriptions += 1

    def _listen(self) -> None:
        # one blocking read per publication on a raw connection of its own (issue 44): the
        # redis-py pub/sub wrapper polled (select, then read, then a dict per message), and in a
        # worker every extra syscall of this thread is a moment it takes the GIL from the
        # function thread whose reply arrives at the same instant as the publication
        conn = self.client.connection_pool.make_connection()
        self.conn = conn
        try:
            conn.connect()
            # its own channel (barriers; and commits pushed by key) and, when that is another,
            # the shared one (commits broadcast to every worker: Arcus's default push); Redis
            # writes both to this one connection in execution order
            channels = list(dict.fromkeys([self.channel, CHANNEL]))
            conn.send_command("SUBSCRIBE", *channels)
            confirmations = 0
            while not self.stopped.is_set():
                message = conn.read_response(push_request=True)
                kind = message[0]
                if kind == b"message" or kind == "message":
                    self.received += 1
                    if self.cache.healthy:
                        data = message[2]
                        if data[:2] in (b"b|", "b|"):  # a barrier
                            self.cache.advance(int(data[2:]))
                            continue
                        seq, key, value = decode_publication(data)
                        self.cache.publish_applied(key, seq, value)
                elif kind in (b"subscribe", "subscribe"):
                    confirmations += 1
                    if confirmations % len(channels) == 0:  # all of them (again: a reconnect)
                        self._confirmed()
                else:  # unsubscribe: the subscription is gone
                    raise redis.ConnectionError("unsubscribed")
        finally:
            with contextlib.suppress(redis.RedisError, OSError):
                conn.disconnect()

    def stop(self) -> None:
        self.stopped.set()
        conn = getattr(self, "conn", None)
        if conn is not None:  # wakes the blocking read
            with contextlib.suppress(Exception):
                conn.disconnect()


def decode_publication(data: bytes | str) -> tuple[int, str, str]:
    """Publications are ``seq|key|value-json`` (keys never contain '|')."""
    text = data.decode() if isinstance(data, bytes) else data
    seq, key, value = text.split("|", 2)
    return int(seq), key, value

