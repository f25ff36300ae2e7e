"""CARSS: co-simulated adaptive recurrent surrogate scheduling with online arrival forecasting.

Paper 07 (../shared/papers/07-carss.md). Public API: the interval-based cluster simulator with
SPECpower host models, arrival generators and trace reader, forecasters (adaptive transformer
and baselines), change-point detectors, the co-simulator, schedulers (CARSS and baselines) and
the scheduling engine; Bitbrains VM traces (COSCO's workload) and COSCO's baseline schedulers
(``cosco``). PyTorch-backed classes are built through the registries, which import it
lazily.
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "BOCPD": "changepoint",
    "DETECTORS": "changepoint",
    "PageHinkley": "changepoint",
    "detection_scores": "changepoint",
    "locate_change": "changepoint",
    "make_detector": "changepoint",
    "offline_changepoints": "changepoint",
    "CoSimulator": "cosim",
    "QoSPrediction": "cosim",
    "TaskPool": "cosim",
    "horizon_metrics": "cosim",
    "RunReport": "engine",
    "run": "engine",
    "cosim_errors": "evaluate",
    "rolling_errors": "evaluate",
    "summarise_cosim": "evaluate",
    "FORECASTERS": "forecast",
    "Forecast": "forecast",
    "Forecaster": "forecast",
    "make_forecaster": "forecast",
    "HOST_MODELS": "hosts",
    "HostModel": "hosts",
    "Hosts": "hosts",
    "make_hosts": "hosts",
    "BASELINES": "schedulers",
    "SCHEDULERS": "schedulers",
    "Scheduler": "policies",
    "make_scheduler": "schedulers",
    "Cluster": "simulator",
    "IntervalStats": "simulator",
    "Tasks": "simulator",
    "Weights": "simulator",
    "objective": "simulator",
    "ArrivalSeries": "workloads",
    "ArrivalTrace": "workloads",
    "TaskModel": "workloads",
    "Workload": "workloads",
    "arrival_series": "workloads",
    "make_tasks": "workloads",
    "make_workload": "workloads",
    "read_arrivals": "workloads",
    "Decision": "simulator",
    "COSCO_FLEET": "hosts",
    "COSCO_BASELINES": "schedulers",
    "VMTrace": "bitbrains",
    "read_vm_trace": "bitbrains",
    "read_vm_traces": "bitbrains",
    "bitbrains_workload": "bitbrains",
    "sampler_for": "bitbrains",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
