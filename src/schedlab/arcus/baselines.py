"""The systems Arcus is compared with, rebuilt on the same Redis (paper 12's baselines).

* **unsafe** - direct Redis reads and writes, no logging: the latency floor, and the protocol
  that must fail the exactly-once checks (a retry re-applies writes and re-reads own writes).
* **boki** - Boki-style: every read and write is appended to a shared log whose order is fixed by
  a sequencer; state is a view materialised from logged writes.
* **halfmoon** - Halfmoon-style: per object, either log-free reads (reads go to a multi-version
  store at the instance's logical timestamp; writes are logged) or log-free writes (writes are
  conditional version inserts; reads are logged). Every instance appends an init record that
  gives it its timestamp, so the shared log still orders everything.
* **beldi** - Beldi-style: an intent record per instance, reads logged by a conditional put, and
  writes that atomically update the row and append to its log (after a lookup that stands in for
  Beldi's linked-DAAL traversal).

Boki's shared log (LogBook) costs two round trips per append here: the record goes to a storage
shard (``SET ns:lr:ID``), then the sequencer orders it and indexes it by instance tag (a
conditional Lua script). Halfmoon's append is **one** round trip (``shared_log_order`` alone:
record, order, instance stream and object version index in one script), as in Halfmoon, whose
functions append through the log engine on their own node; an earlier version of this baseline
spent two and so overstated Arcus's gains (issue 44).
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import redis

from schedlab.arcus.iobase import Fenced, StateIOBase, dumps, loads, text

STEP_SLOTS = 1024  # versions of one log position: ts * STEP_SLOTS + step


class Unsafe(StateIOBase):
    """No logging at all: one round trip per read and per write, no exactly-once guarantee."""

    name: ClassVar[str] = "unsafe"
    description: ClassVar[str] = "direct Redis access, no logging (latency floor, not exactly-once)"
    exactly_once: ClassVar[bool] = False

    def read(self, step: int, key: str) -> Any:
        return loads(self.store.call("HGET", self.state_key(key), "v"))

    def write(self, step: int, key: str, value: Any) -> None:
        self.store.call("HSET", self.state_key(key), "v", dumps(value))

    @classmethod
    def log_keys(cls, client: redis.Redis, ns: str, instance: str) -> list[str]:
        return []


class SharedLogMixin(StateIOBase):
    """Boki-style shared log: conditional appends tagged by (instance, step)."""

    @property
    def steps_key(self) -> str:
        return f"{self.env.ns}:steps:{self.env.instance}"

    def load_log(self) -> None:
        raw = self.store.call("HGETALL", self.steps_key)
        self.logged = {text(k): text(v) for k, v in raw.items()}

    def append(self, step: str, body: str) -> tuple[int, str]:
        """Append (or find the earlier attempt's record for) ``step``; returns (seqnum, body)."""
        found = self.logged.get(step)
        if found is None:
            record_id = uuid.uuid4().hex
            self.store.call("SET", f"{self.env.ns}:lr:{record_id}", body)
            script = self.env.resources.scripts["shared_log_order"]
            found = text(self.store.script(
                script, [f"{self.env.ns}:lseq", self.steps_key, self.gen_key, self.steps_key],
                [step, f"{record_id}|{body}", self.env.gen, ""]))
            if found == "!fenced":
                raise Fenced(f"instance {self.env.instance} was collected or re-admitted")
            self.stats.log(body)
        seq, rest = found.split("|", 1)
        return int(seq), rest.split("|", 1)[1]

    @classmethod
    def result_key(cls, ns: str, instance: str) -> str:
        return f"{ns}:steps:{instance}"

    @classmethod
    def log_keys(cls, client: redis.Redis, ns: str, instance: str) -> list[str]:
        """The tag index of the instance plus every record it points to."""
        steps = f"{ns}:steps:{instance}"
        records = [f"{ns}:lr:{text(v).split('|', 2)[1]}" for v in client.hvals(steps)]
        return [steps, *records]

    def begin(self) -> tuple[bool, Any]:
        if self.env.replay:
            self.load_log()
            if "res" in self.logged:
                seq, body = self.append("res", "")
                self.seq = max(self.seq, seq)
                return True, loads(body)
        return False, None

    def finish(self, result: Any) -> Any:
        seq, body = self.append("res", dumps(result))
        self.seq = max(self.seq, seq)
        return loads(body)


class Boki(SharedLogMixin):
    """Every operation is a shared-log append; writes are then applied to the state view."""

    name: ClassVar[str] = "boki"
    description: ClassVar[str] = "Boki-style: shared-log append for every read and write"

    def read(self, step: int, key: str) -> Any:
        if str(step) not in self.logged:
            current = text(self.store.call("HGET", self.state_key(key), "v")) or "null"
            _, body = self.append(str(step), current)
        else:
            _, body = self.append(str(step), "")
        return loads(body)

    def write(self, step: int, key: str, value: Any) -> None:
        seq, _ = self.append(str(step), dumps(value))
        # re-applied on replay too: the crash may have hit between the append and the apply
        applied = self.store.script(self.env.resources.scripts["apply_if_newer"],
                                    [self.state_key(key), self.gen_key],
                                    [dumps(value), seq, self.env.gen])
        if int(applied) < 0:
            raise Fenced(f"instance {self.env.instance} was collected or re-admitted")


class Halfmoon(SharedLogMixin):
    """Halfmoon-style: log-free reads or log-free writes per object, over a shared log.

    Faithful to Halfmoon's costs (issue 44): **one round trip per log append** (Halfmoon's
    functions append through their node's log engine; one ``shared_log_order`` script stores,
    orders and indexes the record), and its own layout: records inline in the instance's
    stream ``ns:hms:I`` and, for writes to read-optimised objects, in the object's version index
    ``ns:mv:KEY`` in the same append, so such a write costs one round trip, not append + insert.
    """

    name: ClassVar[str] = "halfmoon"
    description: ClassVar[str] = "Halfmoon-style: log-free reads or writes per object + shared log"

    @property
    def steps_key(self) -> str:
        return f"{self.env.ns}:hms:{self.env.instance}"

    def append(self, step: str, body: str, member: str = "", key: str = "") -> tuple[int, str]:
        """One round trip: the record, its order, and (``member``) the object's version."""
        found = self.logged.get(step)
        if found is None:
            script = self.env.resources.scripts["shared_log_order"]
            index = f"{self.env.ns}:mv:{key}" if member else self.steps_key
            found = text(self.store.script(
                script, [f"{self.env.ns}:lseq", self.steps_key, self.gen_key, index],
                [step, body, self.env.gen, member]))
            if found == "!fenced":
                raise Fenced(f"instance {self.env.instance} was collected or re-admitted")
            self.stats.log(body)
        seq, rest = found.split("|", 1)
        return int(seq), rest

    @classmethod
    def result_key(cls, ns: str, instance: str) -> str:
        return f"{ns}:hms:{instance}"

    @classmethod
    def log_keys(cls, client: redis.Redis, ns: str, instance: str) -> list[str]:
        return [f"{ns}:hms:{instance}"]

    def begin(self) -> tuple[bool, Any]:
        done, result = super().begin()
        if done:
            return done, result
        memo = self.env.resources.memo
        modes_key = f"{self.env.ns}:hm:modes"
        if modes_key not in memo:
            raw = self.store.call("HGETALL", modes_key)
            memo[modes_key] = {text(k): text(v) for k, v in raw.items()}
        self.modes: dict[str, str] = memo[modes_key]
        self.ts, _ = self.append("init", "")
        return False, None

    def observe(self, seq: int) -> None:
        super().observe(seq)
        self.ts = max(self.ts, int(seq))  # see the child's writes: its result record is later

    def _snapshot_read(self, key: str) -> str:
        top = (self.ts + 1) * STEP_SLOTS - 1
        found = self.store.call("ZREVRANGEBYSCORE", f"{self.env.ns}:mv:{key}", top, "-inf",
                                "LIMIT", 0, 1)
        return text(found[0]).split("|", 1)[1] if found else "null"

    def read(self, step: int, key: str) -> Any:
        if self.modes.get(key, "read") == "read":
            return loads(self._snapshot_read(key))  # log-free: the timestamp makes it repeatable
        if str(step) in self.logged:
            _, body = self.append(str(step), "")
        else:
            _, body = self.append(str(step), self._snapshot_read(key))
        return loads(body)

    def write(self, step: int, key: str, value: Any) -> None:
        member = f"{self.env.instance}:{step}|{dumps(value)}"
        versions = f"{self.env.ns}:mv:{key}"
        if self.modes.get(key, "read") == "read":  # the append indexes the version too
            seq, _ = self.append(str(step), dumps(value), member=member, key=key)
            self.ts = max(self.ts, seq)
        else:  # log-free write: a conditional insert at a version only this step can name
            self.fenced_call("ZADD", versions, "NX", self.ts * STEP_SLOTS + min(step, 1023),
                             member)

    @classmethod
    def load(cls, client: redis.Redis, ns: str, items: dict[str, Any]) -> None:
        pipe = client.pipeline(transaction=False)
        for key, value in items.items():
            pipe.zadd(f"{ns}:mv:{key}", {f"load|{dumps(value)}": 0})
        pipe.execute()

    @classmethod
    def final_state(cls, client: redis.Redis, ns: str, keys: list[str]) -> dict[str, Any]:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.zrevrange(f"{ns}:mv:{key}", 0, 0)
        out = {}
        for key, top in zip(keys, pipe.execute(), strict=True):
            out[key] = loads(text(top[0]).split("|", 1)[1]) if top else None
        return out

    @classmethod
    def prepare(cls, client: redis.Redis, ns: str, read_ratio: dict[str, float]) -> None:
        """Halfmoon's switch: read-mostly objects get log-free reads, the rest log-free writes."""
        modes = {k: ("read" if r >= 0.5 else "write") for k, r in read_ratio.items()}
        if modes:
            client.hset(f"{ns}:hm:modes", mapping=modes)


class Beldi(StateIOBase):
    """Beldi-style: intent table, logged reads, atomic row update + log append for writes."""

    name: ClassVar[str] = "beldi"
    description: ClassVar[str] = "Beldi-style: atomic log-every-op on rows with an intent table"

    @property
    def read_log(self) -> str:
        return f"{self.env.ns}:rlog:{self.env.instance}"

    def row(self, key: str) -> str:
        return f"{self.env.ns}:b:{key}"

    def begin(self) -> tuple[bool, Any]:
        if self.env.replay:
            raw = self.store.call("HGETALL", self.read_log)
            self.logged = {text(k): text(v) for k, v in raw.items()}
            if "res" in self.logged:
                return True, loads(self.logged["res"])
        self.fenced_call("HSETNX", f"{self.env.ns}:intent:{self.env.instance}", "state", "run")
        return False, None

    def _log_once(self, field: str, value: str) -> str:
        if self.fenced_call("HSETNX", self.read_log, field, value):
            self.stats.log(value)
            return value
        return text(self.store.call("HGET", self.read_log, field))

    def read(self, step: int, key: str) -> Any:
        if str(step) in self.logged:
            return loads(self.logged[str(step)])
        current = text(self.store.call("HGET", self.row(key), "v")) or "null"
        return loads(self._log_once(str(step), current))

    def write(self, step: int, key: str, value: Any) -> None:
        op = f"{self.env.instance}:{step}"
        if self.store.call("SISMEMBER", f"{self.row(key)}:ops", op):  # the DAAL traversal
            return
        done = self.store.script(self.env.resources.scripts["beldi_write"],
                                 [self.row(key), f"{self.row(key)}:ops", self.gen_key],
                                 [dumps(value), op, self.env.gen])
        if int(done) < 0:
            raise Fenced(f"instance {self.env.instance} was collected or re-admitted")
        self.stats.log(dumps(value))

    def finish(self, result: Any) -> Any:
        winner = self._log_once("res", dumps(result))
        self.fenced_call("HSET", f"{self.env.ns}:intent:{self.env.instance}", "state", "done")
        return loads(winner)

    @classmethod
    def result_key(cls, ns: str, instance: str) -> str:
        return f"{ns}:rlog:{instance}"

    @classmethod
    def log_keys(cls, client: redis.Redis, ns: str, instance: str) -> list[str]:
        return [f"{ns}:rlog:{instance}", f"{ns}:intent:{instance}"]

    @classmethod
    def load(cls, client: redis.Redis, ns: str, items: dict[str, Any]) -> None:
        pipe = client.pipeline(transaction=False)
        for key, value in items.items():
            pipe.hset(f"{ns}:b:{key}", "v", dumps(value))
        pipe.execute()

    @classmethod
    def final_state(cls, client: redis.Redis, ns: str, keys: list[str]) -> dict[str, Any]:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hget(f"{ns}:b:{key}", "v")
        return {k: loads(v) for k, v in zip(keys, pipe.execute(), strict=True)}
