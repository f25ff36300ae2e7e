"""HIP-DFPT: an irregular-task runtime for density functional perturbation theory.

Reproduces ../shared/papers/13-hip_dfpt.md ("HIP-DFPT: irregular-task GPU runtime for density
functional perturbation theory"): micro-task composition, pooled device memory, multi-stream
pipelines, a branch-dominant hybrid performance model fitted online from 5% samples, and
model-guided multi-level load balancing, on real PySCF DFPT integrations (CPU, CuPy on a GPU)
and on simulated devices at the paper's scale.

Library use::

    from schedlab.hip_dfpt import builtin_molecule, prepare, reference_polarizability, \
        run_polarizability
    work = prepare(builtin_molecule("water"), "6-31g")
    run = run_polarizability(work, "hip-dfpt", reference_polarizability(work.system),
                             devices=2, streams=2)
    run.alpha, run.relative_error
"""

from schedlab.hip_dfpt.memory import BufferPool, NoPool, PoolStats
from schedlab.hip_dfpt.perfmodel import (
    MODELS,
    BranchHybridModel,
    CostModel,
    GlobalLinearModel,
    PointsModel,
    make_model,
    mape,
    sample_tasks,
)
from schedlab.hip_dfpt.policies import BALANCERS, Balancer, Dispatcher, Plan, make_balancer
from schedlab.hip_dfpt.tasks import (
    CompositionConfig,
    TaskFeatures,
    compose_batches,
    cost_distribution,
    octree_batches,
    plan_composition,
)
from schedlab.hip_dfpt.workloads import (
    Molecule,
    builtin_molecule,
    builtin_molecules,
    load_molecule,
    read_xyz,
    write_xyz,
)


def __getattr__(name: str):  # PySCF-backed names load lazily: importing the package stays light
    lazy = {
        "prepare": "pipeline", "run_polarizability": "pipeline",
        "reference_polarizability": "pipeline", "replay_balance": "pipeline",
        "Runtime": "runtime", "scale_study": "scale", "DeviceModel": "simulator",
        "simulate": "simulator", "synthetic_system": "synthetic",
    }
    if name in lazy:
        import importlib

        return getattr(importlib.import_module(f"schedlab.hip_dfpt.{lazy[name]}"), name)
    raise AttributeError(name)


__all__ = [
    "BALANCERS", "MODELS", "Balancer", "BranchHybridModel", "BufferPool", "CompositionConfig",
    "CostModel", "DeviceModel", "Dispatcher", "GlobalLinearModel", "Molecule", "NoPool", "Plan",
    "PointsModel", "PoolStats", "Runtime", "TaskFeatures", "builtin_molecule",
    "builtin_molecules", "compose_batches", "cost_distribution", "load_molecule",
    "make_balancer", "make_model", "mape", "octree_batches", "plan_composition", "prepare",
    "read_xyz", "reference_polarizability", "replay_balance", "run_polarizability",
    "sample_tasks", "scale_study", "simulate", "synthetic_system", "write_xyz",
]
