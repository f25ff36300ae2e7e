"""Which fields and waiting queues the installed vLLM has, checked when the scheduler starts.

vLLM's scheduler internals are not a public API: between releases the prefix-cache hit moved
from ``Request.num_cached_tokens`` to ``Request.prefill_stats.num_cached_tokens`` (0.32) and a
second waiting queue appeared (``kv_holding_waiting``). An adapter that guessed (``getattr(...,
0)``) charged cached prompt tokens as computed work without a word, and requests in a queue it
did not replace bypassed fairness. ``detect_layout`` reads the installed classes instead and
raises one ``ConfigError`` line for anything it does not know, before the first request.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from schedlab.core.errors import ConfigError

#: the waiting queues FairCache replaces, by scheduler attribute name
KNOWN_QUEUES = ("waiting", "kv_holding_waiting")

#: KV connectors whose transfers the adapter attributes to requests (per step, from the
#: scheduler-side metadata: ``load_jobs`` / ``store_jobs`` of ``TransferJob(req_id, src, dst)``).
#: vLLM's native CPU offload (``--kv-offloading-size``) is ``OffloadingConnector``.
KNOWN_CONNECTORS = ("OffloadingConnector",)

#: set to 1 to run with a KV connector whose transfers are not charged (said, not silent)
UNPRICED_IO_ENV = "SCHEDLAB_FAIRCACHE_UNPRICED_IO"


@dataclass(frozen=True)
class VLLMLayout:
    """What the adapter reads in this vLLM: the hit field, the queues, the hash block size."""

    version: str
    hit_field: str  # a key of vllm.HIT_READERS
    queues: tuple[str, ...]
    hash_block_size: int
    connector: str | None = None  # a KNOWN_CONNECTORS name, or None (no KV connector)


def _stored_attributes(cls: type) -> set[str]:
    """Attribute names ``cls.__init__`` assigns (its code's names), without an instance."""
    code = getattr(cls.__init__, "__code__", None)
    return set(code.co_names) if code is not None else set()


def hit_field(request_cls: type, prefill_stats_cls: type | None, version: str) -> str:
    """``prefill_stats`` when ``Request`` carries a ``PrefillStats`` with ``num_cached_tokens``
    (vLLM 0.32), ``num_cached_tokens`` when ``Request`` sets that itself (older), else error."""
    stored = _stored_attributes(request_cls)
    if "prefill_stats" in stored and prefill_stats_cls is not None:
        names = {f.name for f in dataclasses.fields(prefill_stats_cls)}
        if "num_cached_tokens" in names:
            return "prefill_stats"
    if "num_cached_tokens" in stored:
        return "num_cached_tokens"
    raise ConfigError(
        f"vLLM {version}: Request has neither prefill_stats.num_cached_tokens (0.32) nor "
        "num_cached_tokens; schedlab.faircache.vllm does not know where this version keeps "
        "the prefix-cache hit",
        field="vllm.v1.request.Request",
    )


def queue_names(scheduler: Any, queue_cls: type, version: str) -> tuple[str, ...]:
    """Every ``RequestQueue`` attribute of ``scheduler``; error on one the adapter lacks."""
    names = tuple(k for k, v in vars(scheduler).items() if isinstance(v, queue_cls))
    unknown = [n for n in names if n not in KNOWN_QUEUES]
    if unknown or "waiting" not in names:
        what = unknown[0] if unknown else "waiting"
        raise ConfigError(
            f"vLLM {version}: the scheduler's waiting queues are {list(names)}; "
            f"schedlab.faircache.vllm knows {list(KNOWN_QUEUES)}, so requests in '{what}' "
            "would bypass fairness",
            field=f"Scheduler.{what}",
        )
    return names


def check_config(scheduler: Any, version: str) -> None:
    """The adapter subclasses the synchronous ``Scheduler`` and replaces FCFS order."""
    config = scheduler.scheduler_config
    if getattr(config, "async_scheduling", False):
        raise ConfigError(
            f"vLLM {version}: FairCacheVLLMScheduler runs with synchronous scheduling only "
            "(vllm serve --no-async-scheduling, or LLM(async_scheduling=False))",
            field="async_scheduling",
        )
    if str(getattr(config, "policy", "fcfs")) != "fcfs":
        raise ConfigError(
            f"vLLM {version}: --scheduling-policy {config.policy} would be replaced by "
            "FairCache's order; use the default fcfs",
            field="scheduling_policy",
        )


def connector_name(scheduler: Any, version: str) -> str | None:
    """The scheduler's KV connector when the adapter can charge its transfers; a connector
    it cannot read (LMCache, NIXL, ...) moves KV between tiers that no tenant would pay for,
    so it is one line at start-up unless ``SCHEDLAB_FAIRCACHE_UNPRICED_IO=1`` says to accept
    that (then its transfers are not charged, and the result says so: ``connector`` None)."""
    import os

    connector = getattr(scheduler, "connector", None)
    if connector is None:
        return None
    name = type(connector).__name__
    if name in KNOWN_CONNECTORS:
        return name
    if os.environ.get(UNPRICED_IO_ENV) == "1":
        return None
    raise ConfigError(
        f"vLLM {version}: KV connector {name} moves KV between tiers, and "
        f"schedlab.faircache.vllm can attribute the transfers of {list(KNOWN_CONNECTORS)} "
        f"only, so its host I/O would go uncharged (set {UNPRICED_IO_ENV}=1 to accept that)",
        field="kv_transfer_config.kv_connector",
    )


def detect_layout(scheduler: Any) -> VLLMLayout:
    """The layout of the vLLM ``scheduler`` runs in (imports vLLM)."""
    import vllm
    from vllm.v1.core.sched.request_queue import RequestQueue
    from vllm.v1.request import Request

    try:
        from vllm.v1.metrics.stats import PrefillStats
    except ImportError:
        PrefillStats = None  # noqa: N806 (a class)
    version = str(getattr(vllm, "__version__", "unknown"))
    check_config(scheduler, version)
    hit = hit_field(Request, PrefillStats, version)
    if "block_hashes" not in _stored_attributes(Request):
        raise ConfigError(
            f"vLLM {version}: Request has no block_hashes (the prefix ledger needs them)",
            field="vllm.v1.request.Request.block_hashes",
        )
    queues = queue_names(scheduler, RequestQueue, version)
    hash_block = vars(scheduler).get("hash_block_size", scheduler.block_size)
    return VLLMLayout(version, hit, queues, int(hash_block), connector_name(scheduler, version))
