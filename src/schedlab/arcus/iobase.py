"""What every state-I/O protocol shares: the invocation environment, value codec, base class.

A protocol object lives for one *execution* of one function instance (a first run, a retry after
a crash, or a re-run after a conflict). It sees steps, not wall-clock: step ``n`` is the ``n``-th
``ctx`` operation of the instance, so a deterministic function issues the same steps every time
it runs, which is what every logging scheme keys its records by.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import redis

from schedlab.arcus.store import IOStats, Store


class Conflict(Exception):  # noqa: N818 - a control-flow signal, not an error for users
    """Another execution of the same instance logged a step first with a different outcome; the
    runtime re-runs the function in replay mode so that it follows the logged execution."""


class Fenced(Exception):  # noqa: N818 - a control-flow signal, not an error for users
    """This execution is superseded: its instance's log was garbage-collected (or the instance
    was admitted again) while it was stalled. Nothing it does may reach Redis any more; the
    worker drops its message without a reply."""


def fence_key(ns: str, instance: str) -> str:
    """The generation key of ``instance``'s root: children share their root's fence, because a
    child's log is collected only with its root's."""
    return f"{ns}:gen:{instance.split('.', 1)[0]}"


def dumps(value: Any) -> str:
    """Canonical JSON: the same value always gives the same text, so logs compare as strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def loads(text: str | bytes | None) -> Any:
    if text is None:
        return None
    return json.loads(text)


def text(value: str | bytes | None) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class Env:
    """The invocation an execution belongs to, and the worker's shared resources."""

    instance: str
    ns: str
    replay: bool = False  # may a previous execution of this instance have logged steps?
    token: int = 0  # commit-sequence watermark the caller has seen (FCCache)
    resources: Any = None  # runtime.WorkerResources: cache, flush pool, memo
    crash: Callable[[str, int], None] = field(default=lambda point, step: None)
    gen: str = ""  # the admission generation every state change is fenced with


class StateIOBase:
    """Shared plumbing: stats, key naming, the result/seq bookkeeping. Subclasses do the I/O."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    exactly_once: ClassVar[bool] = True

    def __init__(self, store: Store, env: Env) -> None:
        self.store = store
        self.env = env
        self.stats: IOStats = store.stats
        self.seq = env.token  # highest commit/log sequence this execution depends on
        self.logged: dict[str, str] = {}

    # --- key naming -----------------------------------------------------------------------
    def state_key(self, key: str) -> str:
        return f"{self.env.ns}:s:{key}"

    @property
    def log_key(self) -> str:
        return f"{self.env.ns}:log:{self.env.instance}"

    @property
    def gen_key(self) -> str:
        return fence_key(self.env.ns, self.env.instance)

    def fenced_call(self, *command: Any) -> Any:
        """A plain state-changing command behind the fence (one round trip, a Lua script)."""
        reply = self.store.script(self.env.resources.scripts["fenced_call"], [self.gen_key],
                                  [self.env.gen, *command])
        if int(reply[0]) == 0:
            raise Fenced(f"instance {self.env.instance} was collected or re-admitted")
        return reply[1]

    # --- defaults ----------------------------------------------------------------------------
    def begin(self) -> tuple[bool, Any]:
        return False, None

    def sync(self) -> None:
        """Make everything the execution did so far durable (before an invoke leaves it)."""

    def observe(self, seq: int) -> None:
        """A child invocation returned having depended on sequence ``seq``."""
        self.seq = max(self.seq, int(seq))

    def finish(self, result: Any) -> Any:
        return result

    def close(self) -> None:
        """The execution is over (finished or not): give back what it holds."""

    # --- data loading and inspection (used by workloads and the checker) ---------------------
    @classmethod
    def load(cls, client: redis.Redis, ns: str, items: dict[str, Any]) -> None:
        pipe = client.pipeline(transaction=False)
        for key, value in items.items():
            pipe.hset(f"{ns}:s:{key}", mapping={"v": dumps(value), "q": 0})
        pipe.execute()

    @classmethod
    def final_state(cls, client: redis.Redis, ns: str, keys: list[str]) -> dict[str, Any]:
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.hget(f"{ns}:s:{key}", "v")
        return {k: loads(v) for k, v in zip(keys, pipe.execute(), strict=True)}

    @classmethod
    def prepare(cls, client: redis.Redis, ns: str, read_ratio: dict[str, float]) -> None:
        """Per-object knowledge a protocol may use (only Halfmoon-style does)."""

    @classmethod
    def result_key(cls, ns: str, instance: str) -> str:
        """The hash whose ``res`` field holds the instance's logged result (checked when keys
        are taken: a finished instance's late execution must not take them)."""
        return f"{ns}:log:{instance}"

    @classmethod
    def log_keys(cls, client: redis.Redis, ns: str, instance: str) -> list[str]:
        """The Redis keys holding ``instance``'s log (what log GC deletes once it finished)."""
        return [f"{ns}:log:{instance}"]
