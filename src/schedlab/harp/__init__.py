"""HARP: mapping and scheduling transformers on analog CIM + digital accelerators.

Implements ../shared/papers/16-harp.md: latency-, area- and balanced crossbar mappings (HiGHS
ILP), HARP's hybrid pipelined schedule and two baselines (non-pipelined, single-vector), an
analytical estimator and a discrete-event simulator of the same schedule, and a design-space
sweep. Typical use::

    from schedlab.harp import ArchConfig, build_workload, evaluate
    report = evaluate(build_workload("bert-base"), ArchConfig(), "balanced", "harp")
"""

from schedlab.harp.arch import ArchConfig, CrossbarConfig, DigitalConfig, MemoryConfig, load_arch
from schedlab.harp.engine import Report, evaluate
from schedlab.harp.estimator import estimate
from schedlab.harp.fxgraph import from_torch
from schedlab.harp.mapping import MAPPERS, Mapper, Mapping, make_mapper
from schedlab.harp.plan import Plan, Stage
from schedlab.harp.policies import SCHEDULERS, Scheduler, make_scheduler
from schedlab.harp.simulator import simulate
from schedlab.harp.sweep import design_points, run_sweep
from schedlab.harp.workloads import MODELS, ModelConfig, Op, Workload, build_workload, load_model

__all__ = [
    "MAPPERS", "MODELS", "SCHEDULERS", "ArchConfig", "CrossbarConfig", "DigitalConfig",
    "Mapper", "Mapping", "MemoryConfig", "ModelConfig", "Op", "Plan", "Report", "Scheduler",
    "Stage", "Workload", "build_workload", "design_points", "estimate", "evaluate", "from_torch",
    "load_arch", "load_model", "make_mapper", "make_scheduler", "run_sweep", "simulate",
]
