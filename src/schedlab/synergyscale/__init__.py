"""SynergyScale: training past the GPU memory wall with hierarchical offloading.

Paper: ../shared/papers/11-synergyscale.md. Chunked model states across device memory, host
memory and NVMe files; a multi-stream task graph that overlaps compute, copies, NVMe I/O and a
CPU Adam; a cost model that auto-tunes chunk size, prefetch depth and placement; baselines
(no offloading, ZeRO-Offload-like, ZeRO-Infinity-like) behind one protocol.
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "Estimate": "costmodel", "estimate": "costmodel", "Hardware": "hardware",
    "NAMED_HARDWARE": "hardware", "measure_local": "hardware", "named_hardware": "hardware",
    "BUILTIN_MODELS": "model", "GPTConfig": "model", "load_config": "model", "OffloadPlan": "plan",
    "Problem": "plan", "problem_for": "plan", "OffloadPolicy": "policies", "POLICIES": "policies",
    "make_policy": "policies", "OffloadTrainer": "runtime", "largest_model": "scaling",
    "plan_for_params": "scaling", "TaskGraph": "taskgraph", "run_threads": "taskgraph",
    "simulate": "taskgraph", "BudgetExceededError": "tiers", "MemoryTier": "tiers",
    "NvmeStore": "tiers", "TrainReport": "training", "train": "training",
    "train_reference": "training", "gpt_family": "workloads", "synthetic_batches": "workloads",
    "text_batches": "workloads", "initialize": "engine", "EngineConfig": "config",
    "SynergyEngine": "engine", "AsyncNvme": "aio", "NanoGPT": "nanogpt",
    "NanoGPTConfig": "nanogpt",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
