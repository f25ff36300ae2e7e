"""SynergyScale: training past the GPU memory wall with hierarchical offloading.

Paper: ../shared/papers/11-synergyscale.md. Chunked model states across device memory, host
memory and NVMe files; a multi-stream task graph that overlaps compute, copies, NVMe I/O and a
CPU Adam; a cost model that auto-tunes chunk size, prefetch depth and placement; baselines
(no offloading, ZeRO-Offload-like, ZeRO-Infinity-like) behind one protocol.
"""

from schedlab.synergyscale.costmodel import Estimate, estimate
from schedlab.synergyscale.hardware import NAMED_HARDWARE, Hardware, measure_local, named_hardware
from schedlab.synergyscale.model import BUILTIN_MODELS, GPTConfig, load_config
from schedlab.synergyscale.plan import OffloadPlan, Problem, problem_for
from schedlab.synergyscale.policies import POLICIES, OffloadPolicy, make_policy
from schedlab.synergyscale.runtime import OffloadTrainer
from schedlab.synergyscale.scaling import largest_model, plan_for_params
from schedlab.synergyscale.taskgraph import TaskGraph, run_threads, simulate
from schedlab.synergyscale.tiers import BudgetExceededError, MemoryTier, NvmeStore
from schedlab.synergyscale.training import TrainReport, train, train_reference
from schedlab.synergyscale.workloads import gpt_family, synthetic_batches, text_batches

__all__ = [
    "BUILTIN_MODELS", "NAMED_HARDWARE", "POLICIES", "BudgetExceededError", "Estimate",
    "GPTConfig", "Hardware", "MemoryTier", "NvmeStore", "OffloadPlan", "OffloadPolicy",
    "OffloadTrainer", "Problem", "TaskGraph", "TrainReport", "estimate", "gpt_family",
    "largest_model", "load_config", "make_policy", "measure_local", "named_hardware",
    "plan_for_params", "problem_for", "run_threads", "simulate", "synthetic_batches",
    "text_batches", "train", "train_reference",
]
