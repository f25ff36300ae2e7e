"""Shared pieces for LLM-serving systems: a roofline cost model, request/trace types and readers,
and seeded workload generators (VTC's scenarios, generated shared prefixes)."""

from schedlab.llm.costmodel import (
    CostModel,
    GPUSpec,
    ModelSpec,
    get_gpu,
    get_model,
    gpu_names,
    model_names,
)
from schedlab.llm.generators import VTC_SCENARIOS, shared_prefix, vtc_scenario
from schedlab.llm.requests import BlockIds, Request, Trace, assign_tenants
from schedlab.llm.traces import (
    READERS,
    read_azure,
    read_burstgpt,
    read_mooncake,
    read_trace,
    write_azure,
    write_mooncake,
)

__all__ = [
    "READERS",
    "VTC_SCENARIOS",
    "BlockIds",
    "CostModel",
    "GPUSpec",
    "ModelSpec",
    "Request",
    "Trace",
    "assign_tenants",
    "get_gpu",
    "get_model",
    "gpu_names",
    "model_names",
    "read_azure",
    "read_burstgpt",
    "read_mooncake",
    "read_trace",
    "shared_prefix",
    "vtc_scenario",
    "write_azure",
    "write_mooncake",
]
