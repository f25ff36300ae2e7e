"""The registry of host cache managers by CLI name (FairCache's and every baseline)."""

from __future__ import annotations

from collections.abc import Callable

from schedlab.core.registry import lookup
from schedlab.faircache.cachemgr import (
    LFU,
    CacheManager,
    CostAware,
    GlobalLRU,
    Isolated,
    StaticPartition,
)
from schedlab.faircache.fairmgr import FairCacheManager

CACHE_MANAGERS: dict[str, Callable[[], CacheManager]] = {
    "lru": GlobalLRU,
    "lfu": LFU,
    "static": StaticPartition,
    "isolated": Isolated,
    "cost-aware": CostAware,
    "faircache": FairCacheManager,
}


def make_manager(name: str) -> CacheManager:
    return lookup(CACHE_MANAGERS, "cache manager", name)()


def make_plugins(scheduler, manager) -> tuple:
    """A (Scheduler, CacheManager) pair from CLI names or objects (what both engines take)."""
    from schedlab.faircache.policies import make_scheduler

    if isinstance(scheduler, str):
        scheduler = make_scheduler(scheduler)
    if isinstance(manager, str):
        manager = make_manager(manager)
    return scheduler, manager
