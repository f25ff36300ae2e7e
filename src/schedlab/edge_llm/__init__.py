"""Edge-cloud LLM scheduler: latency-aware routing across device, edge and cloud.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). Public API: the delay model, the routers, the simulator,
workloads and the joint-residency analysis.
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "bucket_count_bound": "bucketing", "delta_buckets": "bucketing", "padding_waste": "bucketing",
    "Backhaul": "config", "EdgeConfig": "config", "Wireless": "config", "Link": "delay",
    "allocate_rbs": "delay", "kv_bytes": "delay", "rate_bps": "delay", "MODES": "policies",
    "Plan": "policies", "ROUTERS": "routers", "Router": "policies", "Window": "policies",
    "make_router": "routers", "analyse": "residency", "SimResult": "simulator",
    "simulate": "simulator", "ClusterView": "sites", "SmPlan": "sites", "EdgeRequest": "workloads",
    "generate": "workloads", "read_requests": "workloads", "write_requests": "workloads",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
