"""HARP: mapping and scheduling transformers on analog CIM + digital accelerators.

Implements ../shared/papers/16-harp.md: latency-, area- and balanced crossbar mappings (HiGHS
ILP), HARP's hybrid pipelined schedule and its baselines (MNSIM 2.0's pipelined and
non-pipelined rules, and our simpler single-vector and non-pipelined ones), an
analytical estimator and a discrete-event simulator of the same schedule, and a design-space
sweep; cost-model parameters from ISAAC, PUMA and MNSIM 2.0 (``calibration``) and an analog
noise model after AIHWKit's PCM model (``noise``). Typical use::

    from schedlab.harp import ArchConfig, build_workload, evaluate
    report = evaluate(build_workload("bert-base"), ArchConfig(), "balanced", "harp")
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "ArchConfig": "arch", "CrossbarConfig": "arch", "DigitalConfig": "arch",
    "MemoryConfig": "arch", "load_arch": "archfile", "Report": "engine", "evaluate": "engine",
    "estimate": "estimator", "from_torch": "fxgraph", "from_export": "torch_export",
    "from_config": "transformers", "MAPPERS": "mapping", "Mapper": "mapping",
    "Mapping": "mapping", "make_mapper": "mapping", "Plan": "plan", "Stage": "plan",
    "SCHEDULERS": "policies", "Scheduler": "policies", "make_scheduler": "policies",
    "simulate": "simulator", "design_points": "sweep", "run_sweep": "sweep", "MODELS": "workloads",
    "ModelConfig": "workloads", "Op": "workloads", "Workload": "workloads",
    "build_workload": "workloads", "load_model": "workloads",
    "load_calibration": "calibration", "validation_rows": "calibration",
    "NoiseConfig": "noise", "analog_model": "noise", "AnalogLinear": "noise",
    "MnsimScheduler": "policies",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
