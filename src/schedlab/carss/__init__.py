"""CARSS: co-simulated adaptive recurrent surrogate scheduling with online arrival forecasting.

Paper 07 (../shared/papers/07-carss.md). Public API: the interval-based cluster simulator with
SPECpower host models, arrival generators and trace reader, forecasters (adaptive transformer
and baselines), change-point detectors, the co-simulator, schedulers (CARSS and baselines) and
the scheduling engine. PyTorch-backed classes are built through the registries, which import it
lazily.
"""

from schedlab.carss.changepoint import (
    BOCPD,
    DETECTORS,
    PageHinkley,
    detection_scores,
    locate_change,
    make_detector,
    offline_changepoints,
)
from schedlab.carss.cosim import CoSimulator, QoSPrediction, TaskPool, horizon_metrics
from schedlab.carss.engine import RunReport, run
from schedlab.carss.evaluate import cosim_errors, rolling_errors, summarise_cosim
from schedlab.carss.forecast import FORECASTERS, Forecast, Forecaster, make_forecaster
from schedlab.carss.hosts import HOST_MODELS, HostModel, Hosts, make_hosts
from schedlab.carss.policies import BASELINES, SCHEDULERS, Scheduler, make_scheduler
from schedlab.carss.simulator import Cluster, IntervalStats, Tasks, Weights, objective
from schedlab.carss.workloads import (
    ArrivalSeries,
    ArrivalTrace,
    TaskModel,
    Workload,
    arrival_series,
    make_tasks,
    make_workload,
    read_arrivals,
)

__all__ = [
    "BASELINES", "BOCPD", "DETECTORS", "FORECASTERS", "HOST_MODELS", "SCHEDULERS",
    "ArrivalSeries", "ArrivalTrace", "Cluster", "CoSimulator", "Forecast", "Forecaster",
    "HostModel", "Hosts", "IntervalStats", "PageHinkley", "QoSPrediction", "RunReport",
    "Scheduler", "TaskModel", "TaskPool", "Tasks", "Weights", "Workload", "arrival_series",
    "cosim_errors", "detection_scores", "horizon_metrics", "locate_change", "make_detector",
    "make_forecaster", "make_hosts", "make_scheduler", "make_tasks", "make_workload",
    "objective", "offline_changepoints", "read_arrivals", "rolling_errors", "run",
    "summarise_cosim",
]
