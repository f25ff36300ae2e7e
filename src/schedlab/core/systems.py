"""The catalogue of the sixteen papers: subpackage name, title, topic, paper file.

This list is what ``schedlab list`` and ``reproduce`` validate names against; whether a system is
*implemented* is not written here but read from the experiment registry, so it cannot go stale.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedlab.core.errors import UnknownNameError


@dataclass(frozen=True)
class SystemInfo:
    name: str
    title: str
    topic: str
    paper: str  # file name under shared/papers/


SYSTEMS: tuple[SystemInfo, ...] = (
    SystemInfo("faircache", "FairCache", "fair multi-tenant LLM serving with context caching",
               "01-faircache.md"),
    SystemInfo("hydra_mcs", "Hydra-MCS", "hybrid CPU-GPU maximum common subgraph search",
               "02-hydra_mcs.md"),
    SystemInfo("mec_coalition", "MEC coalition", "collaborative large-model caching at the edge",
               "03-mec_coalition.md"),
    SystemInfo("edge_llm", "Edge-cloud LLM", "latency-aware LLM routing across device/edge/cloud",
               "04-edge_llm.md"),
    SystemInfo("esr_hgnn", "ESR-HGNN", "redundancy-aware metapath sampling for HGNN inference",
               "05-esr_hgnn.md"),
    SystemInfo("couchsurfer", "CouchSurfer", "exploratory training jobs riding on long jobs",
               "06-couchsurfer.md"),
    SystemInfo("carss", "CARSS", "co-simulated adaptive scheduling with arrival forecasting",
               "07-carss.md"),
    SystemInfo("redpanda", "RedPanda", "one compiler for dataflow CGRAs and dynamic HLS",
               "08-redpanda.md"),
    SystemInfo("dataflowdrs", "DataFlowDrs", "data-flow performance diagnosis for workflows",
               "09-dataflowdrs.md"),
    SystemInfo("iflux", "IFlux", "intent-driven I/O accelerator allocation in HPC schedulers",
               "10-iflux.md"),
    SystemInfo("synergyscale", "SynergyScale", "training past the GPU memory wall by offloading",
               "11-synergyscale.md"),
    SystemInfo("arcus", "Arcus", "exactly-once function state I/O for stateful serverless",
               "12-arcus.md"),
    SystemInfo("hip_dfpt", "HIP-DFPT", "irregular-task runtime for DFPT integrations",
               "13-hip_dfpt.md"),
    SystemInfo("gpooling", "gPooling", "accelerator pooling with elastic virtual devices",
               "14-gpooling.md"),
    SystemInfo("xbucket", "X-Bucket", "online bucketing resource allocation for workflows",
               "15-xbucket.md"),
    SystemInfo("harp", "HARP", "mapping transformers on analog CIM + digital accelerators",
               "16-harp.md"),
)

#: ``core`` registers its own self-check experiment so the harness always has one to run.
CORE = "core"

SYSTEM_NAMES: tuple[str, ...] = tuple(info.name for info in SYSTEMS)


def normalise_system(name: str) -> str:
    """Accept ``hydra-mcs`` or ``hydra_mcs`` (any case); raise with the valid names otherwise."""
    key = name.strip().lower().replace("-", "_")
    if key in SYSTEM_NAMES or key == CORE:
        return key
    raise UnknownNameError("system", name, (CORE, *SYSTEM_NAMES))


def system_info(name: str) -> SystemInfo:
    key = normalise_system(name)
    for info in SYSTEMS:
        if info.name == key:
            return info
    raise UnknownNameError("system", name, SYSTEM_NAMES)
