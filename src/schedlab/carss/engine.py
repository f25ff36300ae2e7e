"""The scheduling loop: one engine for every scheduler, with the paper's QoS metrics.

CARSS (paper 07), like COSCO, reports average energy, average response time (execution plus
migration plus waiting), SLA violations, migrations and scheduling time. At each interval the
engine admits the arrivals, tells the scheduler, asks it for a placement, applies it and steps
the cluster; it never looks at which scheduler it runs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from schedlab.carss.hosts import Hosts
from schedlab.carss.policies import Scheduler
from schedlab.carss.simulator import Cluster, IntervalStats, Tasks
from schedlab.carss.workloads import Workload
from schedlab.core.errors import BadInputError


@dataclass(frozen=True)
class RunReport:
    """Summary metrics, one row per interval, and one row per finished task."""

    summary: dict
    intervals: pl.DataFrame
    tasks: pl.DataFrame


def run(
    scheduler: Scheduler,
    workload: Workload,
    hosts: Hosts,
    history: np.ndarray,
    seed: int = 0,
    drain: int = 12,
) -> RunReport:
    """Replay ``workload`` under ``scheduler``; ``history`` are the arrivals before it (the
    forecasters' training window); ``drain`` extra intervals without arrivals let tasks finish."""
    if len(workload.batches) == 0:
        raise BadInputError("the workload has no intervals", field="workload")
    rng = np.random.default_rng(seed)
    cluster = Cluster(hosts, workload.interval_s, traces=workload.traces)
    scheduler.prepare(np.asarray(history, dtype=float))
    rows: list[IntervalStats] = []
    decide_s: list[float] = []
    arrived = 0
    for t in range(len(workload.batches) + drain):
        batch = workload.batches[t] if t < len(workload.batches) else Tasks.empty()
        arrived += len(batch)
        cluster.admit(batch.copy())
        scheduler.arrive(batch)
        start = time.perf_counter()
        decision = scheduler.decide(cluster, rng)
        decide_s.append(time.perf_counter() - start)
        moved, refused = cluster.apply_decision(decision)
        stats = cluster.step(moved, refused)
        scheduler.feedback(cluster, stats)
        rows.append(stats)
    return _report(scheduler.name, cluster, rows, decide_s, arrived)


def _report(
    name: str, cluster: Cluster, rows: list[IntervalStats], decide_s: list[float], arrived: int
) -> RunReport:
    done = cluster.completed_table()
    response, deadline = done[:, 2], done[:, 3]
    energy = sum(r.energy_j for r in rows)
    summary = dict(
        scheduler=name,
        hosts=cluster.hosts.n,
        intervals=len(rows),
        arrived=arrived,
        completed=int(done.shape[0]),
        unfinished=len(cluster.tasks),
        energy_kwh=energy / 3.6e6,
        avg_energy_kwh_per_interval=energy / 3.6e6 / len(rows),
        avg_response_s=float(response.mean()) if response.size else float("nan"),
        p95_response_s=float(np.percentile(response, 95)) if response.size else float("nan"),
        sla_violation_rate=float((response > deadline).mean()) if response.size else 0.0,
        migrations=sum(r.migrations for r in rows),
        rejected=sum(r.rejected for r in rows),
        avg_hosts_asleep=float(np.mean([r.asleep for r in rows])),
        avg_scheduling_s=float(np.mean(decide_s)),
        max_scheduling_s=float(np.max(decide_s)),
    )
    intervals = pl.DataFrame([asdict(r) for r in rows]).with_columns(
        pl.Series("scheduling_s", decide_s)
    )
    tasks = pl.DataFrame(
        {
            "tid": done[:, 0].astype(np.int64),
            "arrival_s": done[:, 1],
            "response_s": response,
            "deadline_s": deadline,
        }
    )
    return RunReport(summary, intervals, tasks)
