"""CouchSurfer: exploratory training jobs hosted as low-priority surfers on long-running jobs.

Paper 06 (../shared/papers/06-couchsurfer.md). Public API: the cluster simulator and its
schedulers, the EJPP placement problem (exact ILP and threshold-guided algorithm), the Job
Fusion Mechanism model fitted to measured co-located pairs (Lucid), workload generators and
readers of the Alibaba GPU 2023 (pod + node list), Philly and Helios traces.
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "EjppInstance": "ejpp", "Thresholds": "ejpp", "brute_force": "ejpp", "evaluate": "ejpp",
    "place_threshold": "ejpp", "random_instance": "ejpp", "solve_ilp": "ejpp",
    "Decision": "engine", "Placement": "engine", "PlacementError": "engine", "Scheduler": "engine",
    "Simulator": "engine", "FusionParams": "fusion", "fit_params": "fusion",
    "host_slowdown": "fusion", "pair_rates": "fusion", "ClusterState": "jobs", "DET": "jobs",
    "EXP": "jobs", "Job": "jobs", "BASELINES": "policies", "CouchSurfer": "policies",
    "SCHEDULERS": "policies", "make_scheduler": "policies", "SimReport": "runner",
    "simulate": "runner", "TraceOptions": "workloads", "WorkloadSpec": "workloads",
    "generate": "workloads", "read_trace": "workloads", "write_trace": "workloads",
    "ClusterSpec": "jobs", "TraceLoad": "alibaba", "load_alibaba": "alibaba",
    "select_cluster": "alibaba", "read_philly": "philly", "read_helios": "helios",
    "PairTruth": "interference", "load_measurements": "interference",
    "predict_speed": "interference", "validate": "interference", "estimates": "predict",
    "LiveDriver": "blox", "RayManager": "blox", "ResourceManager": "blox",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
