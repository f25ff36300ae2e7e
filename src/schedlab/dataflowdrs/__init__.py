"""DataFlowDrs: data-flow performance diagnosis for HPC workflows.

Paper 09 (../shared/papers/09-dataflowdrs.md). Public API: tracing real programs with dftracer
(LD_PRELOAD) on modelled storage tiers, the workflow runner and three seeded workflows, the DFL
graph and its compression, interpretable scaling models, bottleneck diagnosers (the method and
three baselines behind one Protocol), recommendations and the closed optimisation loop; real
inputs (Darshan logs via PyDarshan, bare dftracer / strace traces), field bottleneck kinds
(metadata, misaligned, shared-file, read-after-write), a Drishti-rule baseline and an
open-world evaluation on real tools.
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "Compressed": "compress", "Pattern": "compress", "compress": "compress", "DFL": "dfl",
    "build_dfl": "dfl", "critical_path": "dfl", "group_name": "dfl", "Analysis": "diagnosis",
    "TierModel": "diagnosis", "analyse": "diagnosis", "fit_tier_models": "diagnosis",
    "Diagnosis": "engine", "Workspace": "engine", "diagnose": "engine",
    "diagnose_analysis": "engine", "predict": "engine", "run_config": "engine",
    "write_report": "engine", "optimize_loop": "optimize", "Bottleneck": "policies",
    "DIAGNOSERS": "policies", "DataFlowDrs": "policies", "Diagnoser": "policies",
    "IoTime": "policies", "IoVolume": "policies", "TaskTime": "policies",
    "make_diagnoser": "policies", "Recommendation": "recommend", "recommend": "recommend",
    "recommend_all": "recommend", "RunRecord": "runner", "TaskSpec": "runner",
    "Workflow": "runner", "run_command": "runner", "run_workflow": "runner",
    "ScalingModel": "scaling", "fit": "scaling", "fit_all": "scaling", "predict_frame": "scaling",
    "DEFAULT_TIERS": "tiers", "Tier": "tiers", "TierLayout": "tiers", "make_layout": "tiers",
    "Dftracer": "tracer", "TRACERS": "tracer", "Tracer": "tracer", "Untraced": "tracer",
    "make_tracer": "tracer", "TraceData": "traces", "TraceIssue": "traces", "read_pfw": "traces",
    "read_trace": "traces", "BOTTLENECK_KINDS": "workloads", "Truth": "workloads",
    "WORKFLOWS": "workloads", "WorkflowConfig": "workloads", "build": "workloads",
    "inject": "workloads", "read_darshan": "darshan", "read_darshan_logs": "darshan",
    "io_profile": "insights", "field_findings": "insights", "DrishtiBaseline": "drishti",
    "infer_tasks": "traces", "parse_pfw": "traces",
    "parse_strace": "traces",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
