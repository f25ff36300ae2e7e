"""FairCache: fair multi-tenant LLM serving with context caching (schedlab.faircache).

Paper: ../shared/papers/01-faircache.md. Public API: the engine, the schedulers and cache
managers (by CLI name or class), the unified cost, and the workloads.
"""

from schedlab.faircache.accounting import CostWeights, PrefixLedger
from schedlab.faircache.cachemgr import (
    LFU,
    CacheManager,
    CostAware,
    GlobalLRU,
    Isolated,
    StaticPartition,
    maxmin_shares,
)
from schedlab.faircache.fairmgr import FairCacheManager
from schedlab.faircache.managers import CACHE_MANAGERS, make_manager
from schedlab.faircache.policies import (
    FCFS,
    SCHEDULERS,
    VTC,
    AdmitUsage,
    DeficitLPM,
    FairCacheScheduler,
    LongestPrefixMatch,
    Scheduler,
    make_scheduler,
)
from schedlab.faircache.radix import Node, PrefixCache
from schedlab.faircache.simulator import Engine, EngineConfig, SimResult, simulate
from schedlab.faircache.workloads import WORKLOADS, make_workload

__all__ = [
    "CACHE_MANAGERS", "FCFS", "LFU", "SCHEDULERS", "VTC", "WORKLOADS", "AdmitUsage",
    "CacheManager", "CostAware", "CostWeights", "DeficitLPM", "Engine", "EngineConfig",
    "FairCacheManager", "FairCacheScheduler", "GlobalLRU", "Isolated", "LongestPrefixMatch",
    "Node", "PrefixCache", "PrefixLedger", "Scheduler", "SimResult", "StaticPartition",
    "make_manager", "make_scheduler", "make_workload", "maxmin_shares", "simulate",
]
