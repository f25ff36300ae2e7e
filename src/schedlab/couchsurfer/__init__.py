"""CouchSurfer: exploratory training jobs hosted as low-priority surfers on long-running jobs.

Paper 06 (../shared/papers/06-couchsurfer.md). Public API: the cluster simulator and its
schedulers, the EJPP placement problem (exact ILP and threshold-guided algorithm), the Job
Fusion Mechanism model, workload generators and the Alibaba GPU trace reader.
"""

from schedlab.couchsurfer.ejpp import (
    EjppInstance,
    Thresholds,
    brute_force,
    evaluate,
    place_threshold,
    random_instance,
    solve_ilp,
)
from schedlab.couchsurfer.engine import Decision, Placement, PlacementError, Scheduler, Simulator
from schedlab.couchsurfer.fusion import FusionParams, fit_params, host_slowdown, pair_rates
from schedlab.couchsurfer.jobs import DET, EXP, ClusterState, Job
from schedlab.couchsurfer.policies import BASELINES, SCHEDULERS, CouchSurfer, make_scheduler
from schedlab.couchsurfer.runner import SimReport, simulate
from schedlab.couchsurfer.workloads import (
    TraceOptions,
    WorkloadSpec,
    generate,
    read_trace,
    write_trace,
)

__all__ = [
    "BASELINES", "DET", "EXP", "SCHEDULERS", "ClusterState", "CouchSurfer", "Decision",
    "EjppInstance", "FusionParams", "Job", "Placement", "PlacementError", "Scheduler",
    "SimReport", "Simulator", "Thresholds", "TraceOptions", "WorkloadSpec", "brute_force",
    "evaluate", "fit_params", "generate", "host_slowdown", "make_scheduler", "pair_rates",
    "place_threshold", "random_instance", "read_trace", "simulate", "solve_ilp", "write_trace",
]
