"""DataFlowDrs: data-flow performance diagnosis for HPC workflows.

Paper 09 (../shared/papers/09-dataflowdrs.md). Public API: tracing real programs with dftracer
(LD_PRELOAD) on modelled storage tiers, the workflow runner and three seeded workflows, the DFL
graph and its compression, interpretable scaling models, bottleneck diagnosers (the method and
three baselines behind one Protocol), recommendations and the closed optimisation loop.
"""

from schedlab.dataflowdrs.compress import Compressed, Pattern, compress
from schedlab.dataflowdrs.dfl import DFL, build_dfl, critical_path, group_name
from schedlab.dataflowdrs.diagnosis import Analysis, TierModel, analyse, fit_tier_models
from schedlab.dataflowdrs.engine import (
    Diagnosis,
    Workspace,
    diagnose,
    diagnose_analysis,
    predict,
    run_config,
    write_report,
)
from schedlab.dataflowdrs.optimize import optimize_loop
from schedlab.dataflowdrs.policies import (
    DIAGNOSERS,
    Bottleneck,
    DataFlowDrs,
    Diagnoser,
    IoTime,
    IoVolume,
    TaskTime,
    make_diagnoser,
)
from schedlab.dataflowdrs.recommend import Recommendation, recommend, recommend_all
from schedlab.dataflowdrs.runner import RunRecord, TaskSpec, Workflow, run_command, run_workflow
from schedlab.dataflowdrs.scaling import ScalingModel, fit, fit_all, predict_frame
from schedlab.dataflowdrs.tiers import DEFAULT_TIERS, Tier, TierLayout, make_layout
from schedlab.dataflowdrs.tracer import TRACERS, Dftracer, Tracer, Untraced, make_tracer
from schedlab.dataflowdrs.traces import TraceData, TraceIssue, read_pfw, read_trace
from schedlab.dataflowdrs.workloads import (
    BOTTLENECK_KINDS,
    WORKFLOWS,
    Truth,
    WorkflowConfig,
    build,
    inject,
)

__all__ = [
    "BOTTLENECK_KINDS", "DEFAULT_TIERS", "DFL", "DIAGNOSERS", "TRACERS", "WORKFLOWS", "Analysis",
    "Bottleneck", "Compressed", "DataFlowDrs", "Dftracer", "Diagnoser", "Diagnosis", "IoTime",
    "IoVolume", "Pattern", "Recommendation", "RunRecord", "ScalingModel", "TaskSpec", "TaskTime",
    "Tier", "TierLayout", "TierModel", "TraceData", "TraceIssue", "Tracer", "Truth", "Untraced",
    "Workflow", "WorkflowConfig", "Workspace", "analyse", "build", "build_dfl", "compress",
    "critical_path", "diagnose", "diagnose_analysis", "fit", "fit_all", "fit_tier_models",
    "group_name", "inject", "make_diagnoser", "make_layout", "make_tracer", "optimize_loop",
    "predict", "predict_frame", "read_pfw", "read_trace", "recommend", "recommend_all",
    "run_command", "run_config", "run_workflow", "write_report",
]
