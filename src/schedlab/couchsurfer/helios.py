"""SenseTime Helios traces (S-Lab-System-Group/HeliosData, Hu et al., SC'21):
``cluster_log.csv`` of a cluster (Earth, Saturn, Uranus, Venus).

Layout: ``job_id, user, vc, jobname, gpu_num, cpu_num, node_num, state, submit_time,
start_time, end_time, duration, queue`` with times as ``YYYY-MM-DD HH:MM:SS``. Mapping:

* GPU jobs only (``gpu_num`` > 0; CPU jobs dropped and counted); jobs that never started
  (blank ``start_time``/``end_time``) dropped and counted; run time = end - start;
* kind: ``state`` in ``exploratory_states`` (default CANCELLED, FAILED, TIMEOUT, NODE_FAIL:
  stopped early) -> exploratory, any other state (COMPLETED, and e.g. OUT_OF_MEMORY unless
  listed) -> deterministic;
* estimate: causal per-user history median (:mod:`.predict`).

Helios nodes have 8 GPUs (V100/1080Ti); the default cluster is ``gpus`` GPUs as 8-GPU
32 GiB nodes; multi-node jobs (> 8 GPUs) are dropped and counted.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from schedlab.core.errors import BadInputError
from schedlab.core.io import csv_rows
from schedlab.couchsurfer.alibaba import TraceLoad
from schedlab.couchsurfer.interference import Measurements
from schedlab.couchsurfer.jobs import ClusterSpec
from schedlab.couchsurfer.tracejobs import Run, default_cluster, parse_time, runs_to_jobs

COLUMNS = ("user", "gpu_num", "state", "submit_time", "start_time", "end_time")


def read_helios(path: str | Path, *, gpus: int = 64, cluster: ClusterSpec | None = None,
                seed: int = 0, predictor: str = "history",
                exploratory_states: tuple[str, ...] = ("CANCELLED", "FAILED", "TIMEOUT",
                                                       "NODE_FAIL"),
                measurements: Measurements | None = None) -> TraceLoad:
    """Jobs and a cluster from a Helios ``cluster_log.csv``."""
    path = Path(path)
    cluster = cluster or default_cluster(gpus, 8, 32.0)
    runs: list[Run] = []
    dropped: Counter = Counter()
    for line, row in csv_rows(path, COLUMNS):
        text = row["gpu_num"]
        try:
            n = float(text)
        except ValueError:
            raise BadInputError(f"{text!r} is not a number", path=path, line=line,
                                field="gpu_num") from None
        if not math.isfinite(n) or n < 0 or n != int(n):
            raise BadInputError(f"{text!r} is not a GPU count", path=path, line=line,
                                field="gpu_num")
        submit = parse_time(row["submit_time"], path, line, "submit_time")
        start = parse_time(row["start_time"], path, line, "start_time")
        end = parse_time(row["end_time"], path, line, "end_time")
        if submit is None:
            raise BadInputError("missing value", path=path, line=line, field="submit_time")
        if n == 0:
            dropped["cpu_only"] += 1
            continue
        if start is None or end is None:
            dropped["never_started"] += 1
            continue
        if end < start:
            raise BadInputError("end_time before start_time", path=path, line=line,
                                field="end_time")
        if start < submit:
            raise BadInputError("start_time before submit_time", path=path, line=line,
                                field="start_time")
        if end == start:
            dropped["zero_length"] += 1
            continue
        runs.append(Run(submit, end - start, int(n), row["user"],
                        row["state"].upper() in exploratory_states))
    if not runs:
        raise BadInputError("no GPU job that started", path=path, field="gpu_num")
    return runs_to_jobs(runs, dropped, cluster, seed=seed, predictor=predictor,
                        measurements=measurements, source="Helios")
