"""What the Philly and Helios readers share: runs (arrival, run time, GPUs, user, kind) to
jobs with a realistic estimate, a measured-profile utilisation, and a cluster to run them on."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.couchsurfer.alibaba import TraceLoad
from schedlab.couchsurfer.interference import Measurements
from schedlab.couchsurfer.jobs import DET, EXP, ClusterSpec, Job
from schedlab.couchsurfer.predict import estimates, log_error

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True)
class Run:
    """One job of a public trace, before it becomes a simulator job."""

    arrival: float
    runtime: float
    gpus: int
    user: str
    exploratory: bool


def parse_time(text: object, path: Path, line: int, name: str) -> float | None:
    """'YYYY-MM-DD HH:MM:SS' (the traces' format) as seconds since the epoch; None for
    a blank/None value; anything else is a one-line error."""
    if text is None or (isinstance(text, str) and text.strip() in ("", "None")):
        return None
    if not isinstance(text, str):
        raise BadInputError(f"{text!r} is not a time string", path=path, line=line, field=name)
    try:
        stamp = dt.datetime.strptime(text.strip(), TIME_FORMAT)
    except ValueError:
        raise BadInputError(f"{text!r} is not a time like 2017-10-03 02:38:25", path=path,
                            line=line, field=name) from None
    return stamp.replace(tzinfo=dt.UTC).timestamp()


def runs_to_jobs(runs: list[Run], dropped: Counter, cluster: ClusterSpec, *, seed: int,
                 predictor: str, measurements: Measurements | None, source: str) -> TraceLoad:
    """Jobs (arrivals from 0) for ``cluster``; too-wide jobs dropped and counted."""
    widest = max(cluster.node_gpus)
    kept = []
    for r in runs:
        if r.gpus > widest:
            dropped["too_wide_for_cluster"] += 1
        else:
            kept.append(r)
    if not kept:
        return TraceLoad([], cluster, dict(dropped), {"jobs": 0}, f"{source}: no jobs")
    rng = np.random.default_rng(seed)
    n = len(kept)
    arrival = np.array([r.arrival for r in kept])
    arrival -= arrival.min()
    runtime = np.array([r.runtime for r in kept])
    est = estimates(arrival, runtime, [r.user for r in kept], predictor=predictor,
                    seed=seed + 1)
    if measurements is not None:
        ids = np.array(measurements.paired_profiles())
        pick = ids[rng.integers(0, ids.size, n)]
        util = np.array([measurements.profiles[i].gpu_util for i in pick])
        gmem = np.array([measurements.profiles[i].gmem_gib for i in pick])
        ran_with = f"{source} with Lucid measured profiles"
    else:
        pick = np.full(n, -1)
        util = rng.beta(2.0, 2.0, n).clip(0.05, 1.0)
        gmem = rng.uniform(2.0, 12.0, n)
        ran_with = f"{source} with seeded utilisation"
    min_mem = min(cluster.node_memory)
    jobs = [Job(jid=i, kind=EXP if r.exploratory else DET, arrival=float(arrival[i]),
                n_gpus=r.gpus, work=float(r.runtime), estimate=float(est[i]),
                util=float(util[i]), mem=float(min(gmem[i], min_mem)), profile=int(pick[i]))
            for i, r in enumerate(kept)]
    counts = {"jobs": n, "exploratory": sum(j.kind == EXP for j in jobs), "gpus": cluster.gpus,
              "nodes": cluster.nodes}
    return TraceLoad(jobs, cluster, dict(dropped), counts, ran_with, log_error(est, runtime))


def default_cluster(gpus: int, gpus_per_node: int, memory: float) -> ClusterSpec:
    """``gpus`` GPUs as whole nodes of ``gpus_per_node`` (rounded up)."""
    return ClusterSpec.uniform(max(1, -(-gpus // gpus_per_node)), gpus_per_node, memory)
