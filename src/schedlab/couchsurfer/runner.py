"""One call from jobs to measured metrics: build the engine, run it, summarise.

The metrics are the ones CouchSurfer (paper 06) reports: exploratory jobs' queuing latency
(mean, p99) and JCT, deterministic jobs' execution slowdown (how much longer they ran than
alone; queueing excluded), GPU utilisation and the GPU-time early termination saved.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from schedlab.core.errors import ConfigError
from schedlab.core.metrics import percentile
from schedlab.couchsurfer.engine import Scheduler, Simulator
from schedlab.couchsurfer.fusion import FusionParams
from schedlab.couchsurfer.interference import PairTruth
from schedlab.couchsurfer.jobs import DET, EXP, ClusterSpec, Job
from schedlab.couchsurfer.policies import make_scheduler


@dataclass
class SimReport:
    """Per-job frame plus the summary row of one simulation."""

    jobs: pl.DataFrame
    summary: dict[str, float | str]


def simulate(jobs: Sequence[Job], scheduler: str | Scheduler, *, nodes: int | None = None,
             gpus_per_node: int = 8, fusion: FusionParams | None = None,
             copy_jobs: bool = True, cluster: ClusterSpec | None = None,
             truth: PairTruth | None = None) -> SimReport:
    """Run ``jobs`` under ``scheduler`` (a name or an object); jobs are copied unless told.

    The cluster is ``cluster`` (heterogeneous nodes, e.g. from the Alibaba node list) or
    ``nodes`` x ``gpus_per_node`` GPUs of ``fusion.gpu_memory_gib``. ``truth`` holds the
    measured pair speeds the engine accounts with (default: the fitted model + residuals).
    """
    policy = make_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
    if copy_jobs:
        jobs = [copy.copy(j) for j in jobs]
    if cluster is None:
        if nodes is None:
            raise ConfigError("give nodes or a cluster", field="nodes")
        sim = Simulator(jobs, policy, nodes=nodes, gpus_per_node=gpus_per_node, fusion=fusion,
                        truth=truth)
    else:
        sim = Simulator(jobs, policy, nodes=cluster.nodes, gpus_per_node=cluster.width,
                        fusion=fusion, node_gpus=cluster.node_gpus,
                        node_memory=cluster.node_memory, truth=truth)
    sim.run()
    frame = job_frame(sim)
    return SimReport(frame, summarize(sim, frame))


def job_frame(sim: Simulator) -> pl.DataFrame:
    """One row per job: what it asked for and what happened to it."""
    js = list(sim.jobs.values())
    return pl.DataFrame({
        "jid": [j.jid for j in js], "kind": [j.kind for j in js],
        "n_gpus": [j.n_gpus for j in js], "arrival": [j.arrival for j in js],
        "start": [j.start for j in js], "finish": [j.finish for j in js],
        "work": [j.work for j in js], "estimate": [j.estimate for j in js],
        "run_time": [j.run_time for j in js], "util": [j.util for j in js],
        "preemptions": [j.preemptions for j in js], "share": [j.share for j in js],
        "hosted_time": [j.hosted_time for j in js], "hosted_work": [j.hosted_work for j in js],
    }, strict=False).with_columns(
        # waiting = time not running before the end: first start plus any time spent
        # re-queued after a preemption or an eviction
        queue=pl.col("finish") - pl.col("arrival") - pl.col("run_time"),
        jct=pl.col("finish") - pl.col("arrival"),
        slowdown=pl.col("run_time") / pl.col("work") - 1.0,
        # slowdown while a surfer or a packed job shared its GPUs (what a guard bounds)
        hosted_slowdown=pl.when(pl.col("hosted_work") > 0)
        .then(pl.col("hosted_time") / pl.col("hosted_work") - 1.0).otherwise(None),
    )


def _stats(values: np.ndarray, prefix: str) -> dict[str, float]:
    values = values[~np.isnan(values)]
    if values.size == 0:
        return {f"{prefix}_mean": math.nan, f"{prefix}_p99": math.nan}
    return {f"{prefix}_mean": float(values.mean()), f"{prefix}_p99": float(percentile(values, 99))}


def summarize(sim: Simulator, frame: pl.DataFrame) -> dict[str, float | str]:
    """The paper's metrics for one run (times in seconds, shares in [0, 1])."""
    exp = frame.filter(pl.col("kind") == EXP)
    det = frame.filter(pl.col("kind") == DET)
    done = frame.filter(pl.col("finish").is_not_nan())
    makespan = sim.makespan()
    out: dict[str, float | str] = {"scheduler": sim.scheduler.name, "jobs": frame.height,
                                   "finished": done.height, "makespan_s": makespan}
    out |= _stats(exp["queue"].to_numpy(), "exp_queue_s")
    out |= _stats(exp["jct"].to_numpy(), "exp_jct_s")
    out |= _stats(det["queue"].to_numpy(), "det_queue_s")
    out |= _stats(det["jct"].to_numpy(), "det_jct_s")
    det_done = det.filter(pl.col("finish").is_not_nan())["slowdown"].to_numpy()
    out["det_slowdown_mean"] = float(det_done.mean()) if det_done.size else math.nan
    out["det_slowdown_max"] = float(det_done.max()) if det_done.size else math.nan
    # hosts that shared a GPU for at least a minute (shorter spans are rounding noise)
    hosted = det.filter(pl.col("finish").is_not_nan() & (pl.col("hosted_time") >= 60.0))
    hs = hosted["hosted_slowdown"].to_numpy()
    out["det_hosted"] = hosted.height
    out["det_hosted_slowdown_mean"] = float(hs.mean()) if hs.size else 0.0
    out["det_hosted_slowdown_max"] = float(hs.max()) if hs.size else 0.0
    out["det_hosted_over_guard"] = (float((hs > sim.fusion.guard + 1e-9).mean())
                                    if hs.size else 0.0)
    out["gpu_util"] = (sim.gpu_busy_seconds() / (sim.cluster.real_gpus * makespan)
                       if makespan > 0 else 0.0)
    requested = float((exp["estimate"] * exp["n_gpus"]).sum())
    used = float((exp["work"] * exp["n_gpus"]).sum())
    out["early_termination_savings"] = 1.0 - used / requested if requested > 0 else 0.0
    out["preemptions"] = int(frame["preemptions"].sum())
    return out
