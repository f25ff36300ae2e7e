"""The registry of host cache managers by CLI name (FairCache's and every baseline)."""

from __future__ import annotations

from collections.abc import Callable

from schedlab.core.errors import UnknownNameError
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
    "lru": GlobalLRU, "lfu": LFU, "static": StaticPartition, "isolated": Isolated,
    "cost-aware": CostAware, "faircache": FairCacheManager,
}


def make_manager(name: str) -> CacheManager:
    if name not in CACHE_MANAGERS:
        raise UnknownNameError("cache manager", name, sorted(CACHE_MANAGERS))
    return CACHE_MANAGERS[name]()
