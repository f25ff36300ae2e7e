"""Demand from the Alibaba GenAI LoRA request trace (cluster-trace-v2026-GenAI).

The trace (``../shared/data/alibaba/genai_lora_request_trace.csv``, not redistributable: read by
path, never vendored) logs 26,823 requests of a production fine-tuned-model service: which base
checkpoint each request used (``checkpoint_model_version_id``), whether LoRA adapters were
applied (``num_lora``), which user group sent it (``groupId``) and how long it ran
(``exec_time_seconds``). It gives the market what a seeded generator cannot:

* **which variants are popular**: request classes = (checkpoint, with/without LoRA), ranked by
  request count; class rank r is the market's task ``r mod tasks`` (the trace's checkpoints are
  diffusion models, so *which* task a class stands for is our mapping; the skew is real);
* **who asks how often**: each market user is one of the most active groups (its task: the one
  it asked for most, the smallest task id on a tie, so the mapping is the same in every run),
  with a rate proportional to the group's request count (heavy-tailed: the top group sent
  1,207, the median 2), scaled so the mean user rate is ``mean_rate`` req/s (the trace's own
  absolute rate, 26,823 requests over 23 days, is one service's load, far below an edge
  market's);
* **how variable service is**: the squared coefficient of variation of the execution time per
  class (0.08-0.29 on the top classes; 0.52 over all), which sets the M/G/c queueing delay
  (``queueing.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.traces.alibaba_genai import read_requests

COLUMNS = ("gmt_create", "groupId", "checkpoint_model_version_id", "num_lora",
           "exec_time_seconds")


@dataclass(frozen=True)
class TraceDemand:
    """Per-user task, relative rate and the service-time SCV of the user's request class."""

    task: np.ndarray  # int [U]
    rate: np.ndarray  # req/s [U], mean = mean_rate
    service_scv: np.ndarray  # [U]
    task_share: np.ndarray  # fraction of the trace's requests per task [T]
    classes: int
    requests: int
    span_s: float


def read_trace(path: Path) -> pl.DataFrame:
    """The trace's rows with the columns the market needs, each checked; errors name line/field."""
    frame = read_requests(path, COLUMNS, numeric=("num_lora",))
    exec_s = frame["exec_time_seconds"].cast(pl.Float64, strict=False)
    bad_exec = exec_s.is_not_null() & (exec_s.is_nan() | (exec_s < 0)).fill_null(False)
    if bad_exec.any():
        row = int(bad_exec.arg_max())
        raise BadInputError(f"execution time {frame['exec_time_seconds'][row]!r} must be a "
                            "non-negative number", path=path, line=row + 2,
                            field="exec_time_seconds")
    return frame.with_columns(exec_s=exec_s,
                              num_lora=pl.col("num_lora").fill_null(0)).filter(
        pl.col("checkpoint_model_version_id").is_not_null() & pl.col("groupId").is_not_null())


def demand(frame: pl.DataFrame, users: int, tasks: int, mean_rate: float = 0.6,
           path: Path | None = None) -> TraceDemand:
    """Map the trace onto ``users`` market users and ``tasks`` tasks (see the module doc)."""
    if users < 1 or tasks < 1:
        raise BadInputError("needs at least one user and one task", field="users")
    if not mean_rate > 0:
        raise BadInputError(f"must be positive, got {mean_rate}", field="mean_rate")
    if frame.height == 0:
        raise BadInputError("has no requests with a checkpoint and a group", path=path,
                            field="checkpoint_model_version_id")
    frame = frame.with_columns(cls=pl.concat_str(
        "checkpoint_model_version_id", (pl.col("num_lora") > 0).cast(pl.Utf8), separator="/"))
    classes = frame.group_by("cls").agg(
        n=pl.len(), mean=pl.col("exec_s").mean(), var=pl.col("exec_s").var()).sort(
        ["n", "cls"], descending=[True, False])
    classes = classes.with_columns(task=pl.int_range(pl.len()) % tasks,
                                   scv=(pl.col("var") / pl.col("mean") ** 2).fill_null(1.0)
                                   .fill_nan(1.0))
    groups = frame.join(classes.select("cls", "task", "scv"), on="cls").group_by("groupId").agg(
        n=pl.len(), task=pl.col("task").mode().min(), scv=pl.col("scv").mean()).sort(
        ["n", "groupId"], descending=[True, False])
    if groups.height < users:  # more users than groups: the groups repeat, in rank order
        groups = pl.concat([groups] * (users // groups.height + 1)).head(users)
    else:
        groups = groups.head(users)
    counts = groups["n"].to_numpy().astype(float)
    share = classes.group_by("task").agg(pl.col("n").sum()).sort("task")
    task_share = np.zeros(tasks)
    task_share[share["task"].to_numpy()] = share["n"].to_numpy() / frame.height
    span = (frame["time"].max() - frame["time"].min()).total_seconds()
    return TraceDemand(task=groups["task"].to_numpy().astype(int),
                       rate=counts / counts.mean() * mean_rate,
                       service_scv=groups["scv"].to_numpy().astype(float),
                       task_share=task_share, classes=classes.height, requests=frame.height,
                       span_s=float(span))
