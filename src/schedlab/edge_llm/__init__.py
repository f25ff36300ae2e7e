"""Edge-cloud LLM scheduler: latency-aware routing across device, edge and cloud.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). Public API: the delay model, the routers, the simulator,
workloads and the joint-residency analysis.
"""

from schedlab.edge_llm.bucketing import bucket_count_bound, delta_buckets, padding_waste
from schedlab.edge_llm.config import Backhaul, EdgeConfig, Wireless
from schedlab.edge_llm.delay import Link, allocate_rbs, kv_bytes, rate_bps
from schedlab.edge_llm.policies import MODES, ROUTERS, Plan, Router, Window, make_router
from schedlab.edge_llm.residency import analyse
from schedlab.edge_llm.simulator import SimResult, simulate
from schedlab.edge_llm.sites import ClusterView, SmPlan
from schedlab.edge_llm.workloads import EdgeRequest, generate, read_requests, write_requests

__all__ = [
    "MODES", "ROUTERS", "Backhaul", "ClusterView", "EdgeConfig", "EdgeRequest", "Link", "Plan",
    "Router", "SimResult", "SmPlan", "Window", "Wireless", "allocate_rbs", "analyse",
    "bucket_count_bound", "delta_buckets", "generate", "kv_bytes", "make_router",
    "padding_waste", "rate_bps", "read_requests", "simulate", "write_requests",
]
