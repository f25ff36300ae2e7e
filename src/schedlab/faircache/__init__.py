"""FairCache: fair multi-tenant LLM serving with context caching (schedlab.faircache).

Paper: ../shared/papers/01-faircache.md. Public API: the engine, the schedulers and cache
managers (by CLI name or class), the unified cost, and the workloads.
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "CostWeights": "policies",  # schedlab.llm.accounting
    "PrefixLedger": "policies",
    "CacheManager": "cachemgr",
    "CostAware": "cachemgr",
    "GlobalLRU": "cachemgr",
    "Isolated": "cachemgr",
    "LFU": "cachemgr",
    "StaticPartition": "cachemgr",
    "maxmin_shares": "cachemgr",
    "FairCacheManager": "fairmgr",
    "CACHE_MANAGERS": "managers",
    "make_manager": "managers",
    "AdmitUsage": "policies",
    "DeficitLPM": "policies",
    "FCFS": "policies",
    "FairCacheScheduler": "policies",
    "LongestPrefixMatch": "policies",
    "SCHEDULERS": "policies",
    "Scheduler": "policies",
    "VTC": "policies",
    "make_scheduler": "policies",
    "Node": "cachemgr",  # schedlab.llm.radix
    "PrefixCache": "simulator",
    "serve": "real_engine",
    "Engine": "simulator",
    "EngineConfig": "simulator",
    "SimResult": "simulator",
    "simulate": "simulator",
    "WORKLOADS": "workloads",
    "make_workload": "workloads",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
