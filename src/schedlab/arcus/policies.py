"""One interface for function state I/O: Arcus (paper 12) and every baseline it is compared with.

A function never talks to Redis; it calls ``ctx.read/write/invoke`` and the runtime forwards each
operation, numbered by step, to a :class:`StateIO`. Swapping the protocol changes how state is
logged, cached and made durable, never what the function computes, so one function body runs
under all of them and one checker judges them all.

Registry by CLI name (``--protocol``): ``arcus`` (CFLog + FCCache), ``cflog`` (CFLog alone, an
ablation), ``halfmoon``, ``boki``, ``beldi`` and ``unsafe``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

import redis

from schedlab.arcus.arcus_io import Arcus, ArcusInline, ArcusKeys, ArcusSync, CFLog
from schedlab.arcus.baselines import Beldi, Boki, Halfmoon, Unsafe
from schedlab.arcus.iobase import Conflict, Env, StateIOBase
from schedlab.arcus.store import Store
from schedlab.core.errors import UnknownNameError


@runtime_checkable
class StateIO(Protocol):
    """How one execution of one function instance reads, writes and makes its effects durable.

    Contract (checked for every implementation by ``tests/arcus/test_arcus_protocols.py``):
    ``begin`` returns ``(True, result)`` when an earlier execution already finished the instance;
    ``read``/``write`` take the step number of the operation; ``sync`` is called before a child
    invocation leaves the function; ``finish`` returns the result every execution of the
    instance must report (the first one recorded). Exactly-once protocols make a re-execution
    after a crash at any point indistinguishable, in state and in reads, from one execution.
    """

    name: ClassVar[str]
    exactly_once: ClassVar[bool]
    seq: int

    def begin(self) -> tuple[bool, Any]: ...

    def read(self, step: int, key: str) -> Any: ...

    def write(self, step: int, key: str, value: Any) -> None: ...

    def sync(self) -> None: ...

    def observe(self, seq: int) -> None: ...

    def finish(self, result: Any) -> Any: ...


#: the method and every baseline, by CLI name; values are classes ``(Store, Env) -> StateIO``
PROTOCOLS: dict[str, type[StateIOBase]] = {
    cls.name: cls for cls in (Arcus, CFLog, Halfmoon, Boki, Beldi, Unsafe)
}

#: Arcus with its earlier or simpler flush paths, for the side-by-side durable-write benchmark
#: (``benchmarks/arcus/durable_write.py``); accepted wherever a protocol name is, not swept by
#: the experiments
VARIANTS: dict[str, type[StateIOBase]] = {cls.name: cls for cls in (ArcusInline, ArcusKeys,
                                                                     ArcusSync)}


def protocol_class(name: str) -> type[StateIOBase]:
    """The protocol class registered as ``name`` or an UnknownNameError listing valid names."""
    found = PROTOCOLS.get(name) or VARIANTS.get(name)
    if found is None:
        raise UnknownNameError("protocol", name, sorted(PROTOCOLS) + sorted(VARIANTS))
    return found


def make_protocol(name: str, store: Store, env: Env) -> StateIO:
    return protocol_class(name)(store, env)


def bind_protocol(client: redis.Redis, ns: str, name: str) -> None:
    """Bind namespace ``ns`` to protocol ``name`` (first use wins) or refuse with a ConfigError.

    Each protocol keeps state in its own layout and logs, so mixing two on one namespace would
    let one read state the other never wrote (stale reads) and break exactly-once.
    """
    from schedlab.arcus.scripts import scripts_for
    from schedlab.core.errors import ConfigError

    protocol_class(name)
    bound = scripts_for(client)["bind_protocol"](keys=[f"{ns}:protocol"], args=[name],
                                                 client=client)
    bound = bound.decode() if isinstance(bound, bytes) else bound
    if bound != name:
        raise ConfigError(f"namespace '{ns}' is bound to protocol '{bound}', not '{name}' "
                          "(each protocol keeps its own state layout and logs)", field="protocol")


def bound_protocol(client: redis.Redis, ns: str) -> str | None:
    raw = client.get(f"{ns}:protocol")
    return raw.decode() if isinstance(raw, bytes) else raw


def load_state(name: str, client: redis.Redis, ns: str, items: dict[str, Any]) -> None:
    """Write initial state in the layout protocol ``name`` reads (binding ``ns`` to it)."""
    bind_protocol(client, ns, name)
    protocol_class(name).load(client, ns, items)


def final_state(name: str, client: redis.Redis, ns: str, keys: list[str]) -> dict[str, Any]:
    """The current value of ``keys`` as protocol ``name`` stores them."""
    return protocol_class(name).final_state(client, ns, keys)


__all__ = ["PROTOCOLS", "VARIANTS", "Conflict", "Env", "StateIO", "bind_protocol", "bound_protocol",
           "final_state", "load_state",
           "make_protocol", "protocol_class"]
