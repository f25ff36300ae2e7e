"""Workloads: a seeded generator shaped like production GPU clusters, and trace I/O.

Shape (sources in docs/systems/couchsurfer.md): deterministic jobs are long (log-normal,
median 4 h) and use 1-8 GPUs; exploratory jobs are trials of a tuning sweep that stop early
at successive-halving checkpoints (Hyperband/ASHA, Li et al.: rungs at 1/27, 1/9, 1/3 and all
of the requested budget; a trial survives a rung with probability 1/eta, eta = 3).

The trace format is Alibaba's cluster-trace-gpu-v2023 pod list (``cpu_milli, memory_mib,
num_gpu, gpu_milli, ..., creation_time, deletion_time, scheduled_time``); every malformed
record becomes a :class:`BadInputError` naming file, line and field.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.core.io import atomic_write, parse_lines
from schedlab.couchsurfer.jobs import DET, EXP, Job

DET_GPUS = ((1, 0.45), (2, 0.15), (4, 0.20), (8, 0.20))
EXP_GPUS = ((1, 0.80), (2, 0.15), (4, 0.05))
RUNGS = (1 / 27, 1 / 9, 1 / 3, 1.0)


@dataclass(frozen=True)
class WorkloadSpec:
    """Knobs of the generator; ``load`` is the deterministic GPU demand / cluster capacity."""

    jobs: int = 2_000
    gpus: int = 64
    exp_share: float = 0.6
    load: float = 0.9
    det_median_h: float = 4.0
    exp_median_h: float = 2.0
    eta: float = 3.0
    gpu_memory_gib: float = 32.0

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.gpus < 1:
            raise ConfigError("needs at least one job and one GPU", field="jobs/gpus")
        if not 0 <= self.exp_share <= 1:
            raise ConfigError("must be in [0, 1]", field="exp_share")
        if not self.load > 0:
            raise ConfigError("must be positive", field="load")
        if not self.eta > 1:
            raise ConfigError("must be greater than 1", field="eta")


def termination_work(rng: np.random.Generator, estimate: np.ndarray, eta: float) -> np.ndarray:
    """Work each trial really does: it stops at rung i with P = (1 - 1/eta) * eta^-i."""
    survive = 1.0 / eta
    probs = np.array([(1 - survive) * survive**i for i in range(len(RUNGS) - 1)]
                     + [survive ** (len(RUNGS) - 1)])
    rung = rng.choice(len(RUNGS), size=estimate.size, p=probs / probs.sum())
    return estimate * np.asarray(RUNGS)[rung]


def _choice(rng: np.random.Generator, table: Sequence[tuple[int, float]], n: int) -> np.ndarray:
    values, probs = zip(*table, strict=True)
    return rng.choice(np.array(values), size=n, p=np.array(probs) / sum(probs))


def generate(spec: WorkloadSpec, seed: int, gpus_per_node: int = 8) -> list[Job]:
    """Seeded jobs whose deterministic part offers ``spec.load`` of the cluster's GPU-time."""
    rng = np.random.default_rng(seed)
    n = spec.jobs
    is_exp = rng.random(n) < spec.exp_share
    n_gpus = np.where(is_exp, _choice(rng, EXP_GPUS, n), _choice(rng, DET_GPUS, n))
    n_gpus = np.minimum(n_gpus, gpus_per_node)
    median = np.where(is_exp, spec.exp_median_h, spec.det_median_h) * 3600.0
    estimate = np.clip(median * rng.lognormal(0.0, 1.0, n), 600.0, 3 * 86400.0)
    work = np.where(is_exp, termination_work(rng, estimate, spec.eta), estimate)
    util = np.where(is_exp, rng.beta(2.0, 2.0, n), rng.beta(2.5, 2.0, n)).clip(0.05, 1.0)
    mem = np.where(is_exp, rng.uniform(2, 12, n), rng.uniform(4, 24, n))
    mem = np.minimum(mem, spec.gpu_memory_gib)
    det_demand = float(np.sum((n_gpus * work)[~is_exp]))
    horizon = det_demand / (spec.load * spec.gpus) if det_demand > 0 else 86400.0
    arrival = np.sort(rng.uniform(0.0, horizon, n))
    return [Job(jid=i, kind=EXP if is_exp[i] else DET, arrival=float(arrival[i]),
                n_gpus=int(n_gpus[i]), work=float(work[i]), estimate=float(estimate[i]),
                util=float(util[i]), mem=float(mem[i])) for i in range(n)]


TRACE_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time",
                 "deletion_time", "scheduled_time")


@dataclass(frozen=True)
class TraceOptions:
    """How pods become jobs (the trace has no job kind, GPU memory, utilisation or estimate)."""

    exploratory_qos: tuple[str, ...] = ("BE",)
    gpu_memory_gib: float = 32.0
    predictor: str = "history"
    seed: int = 0


def read_trace(path: str | Path, options: TraceOptions | None = None) -> list[Job]:
    """Jobs from a pod list in the Alibaba layout (a real one or one :func:`write_trace` wrote).

    For the real trace with its node list, prefer :func:`.alibaba.load_alibaba` (measured
    profiles, heterogeneous nodes). Here: CPU-only, never-scheduled (blank
    ``scheduled_time``) and zero-length pods are skipped. kind: ``qos`` in
    ``exploratory_qos`` -> exploratory. work: deletion - scheduled. ``gpu_milli`` < 1000 on a
    one-GPU pod is a fractional request (``share``). util: the optional ``gpu_util`` column
    (0..1), else a seeded Beta(2, 2) draw. memory per GPU: the optional ``gpu_mem_gib``
    column, else share x 0.5 x GPU memory. estimate: the optional ``estimate_s`` column, else
    the causal history predictor (:mod:`.predict`), never the run time itself.
    """
    opts = options or TraceOptions()
    header: dict[str, int] = {}

    def parse(line: str, lineno: int) -> Job | None:
        if not line.strip():
            return None
        cells = next(csv.reader([line]))
        if not header:
            header.update({name.strip(): i for i, name in enumerate(cells)})
            missing = [c for c in TRACE_COLUMNS if c not in header]
            if missing:
                raise BadInputError(f"header lacks column(s) {', '.join(missing)}",
                                    line=lineno, field=missing[0])
            return None
        if len(cells) != len(header):
            raise BadInputError(f"has {len(cells)} fields, the header has {len(header)}",
                                line=lineno)
        return _pod_to_job(cells, header, lineno, opts)

    jobs = [job for job in parse_lines(path, parse) if job is not None and job.work > 0]
    if not header:
        raise BadInputError("is empty: expected a header and pod records", path=path)
    if not jobs:
        raise BadInputError("has no GPU pods with a positive run time (num_gpu > 0, "
                            "scheduled, deletion_time after the start)", path=path)
    from schedlab.couchsurfer.predict import estimates

    missing = [j for j in jobs if math.isnan(j.estimate)]
    if missing:
        est = estimates([j.arrival for j in missing], [j.work for j in missing],
                        [(j.kind, j.n_gpus, j.share < 1) for j in missing],
                        predictor=opts.predictor, seed=opts.seed)
        for j, e in zip(missing, est, strict=True):
            j.estimate = float(e)
    rng = np.random.default_rng(opts.seed)
    for j in jobs:
        if math.isnan(j.util):
            j.util = float(np.clip(rng.beta(2.0, 2.0), 0.05, 1.0))
    return jobs


def _number(cells: list[str], header: dict[str, int], name: str, lineno: int,
            optional: bool = False) -> float:
    text = cells[header[name]].strip() if name in header else ""
    if text == "" and optional:
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"value {text!r} is not a number", line=lineno, field=name) from None
    if not math.isfinite(value) or value < 0:
        raise BadInputError(f"value {text!r} must be a finite non-negative number",
                            line=lineno, field=name)
    return value


def _pod_to_job(cells: list[str], header: dict[str, int], lineno: int,
                opts: TraceOptions) -> Job | None:
    num_gpu = _number(cells, header, "num_gpu", lineno)
    if num_gpu != int(num_gpu) or num_gpu > 64:
        raise BadInputError(f"value {num_gpu} is not a GPU count (0..64)", line=lineno,
                            field="num_gpu")
    milli = _number(cells, header, "gpu_milli", lineno)
    if milli > 1000:
        raise BadInputError(f"value {milli} exceeds 1000 (a whole GPU)", line=lineno,
                            field="gpu_milli")
    for name in ("cpu_milli", "memory_mib"):
        _number(cells, header, name, lineno)
    created = _number(cells, header, "creation_time", lineno)
    deleted = _number(cells, header, "deletion_time", lineno)
    scheduled = _number(cells, header, "scheduled_time", lineno, optional=True)
    started = created if math.isnan(scheduled) else scheduled
    if deleted < started:
        raise BadInputError(f"deletion_time {deleted} precedes the pod's start {started}",
                            line=lineno, field="deletion_time")
    if num_gpu == 0 or deleted == started:
        return None
    qos = cells[header["qos"]].strip() if "qos" in header else ""
    if math.isnan(scheduled):
        return None  # never scheduled: no run time to replay
    share = milli / 1000.0 if num_gpu == 1 and 0 < milli < 1000 else 1.0
    util = _number(cells, header, "gpu_util", lineno, optional=True)
    if not math.isnan(util) and not 0 < util <= 1:
        raise BadInputError(f"value {util} must be in (0, 1]", line=lineno, field="gpu_util")
    mem = _number(cells, header, "gpu_mem_gib", lineno, optional=True)
    if math.isnan(mem):
        mem = share * 0.5 * opts.gpu_memory_gib
    estimate = _number(cells, header, "estimate_s", lineno, optional=True)
    estimate = estimate if math.isnan(estimate) else max(estimate, 1.0)
    job = Job(jid=lineno, kind=EXP if qos in opts.exploratory_qos else DET, arrival=created,
              n_gpus=int(num_gpu), work=deleted - started, estimate=1.0, util=0.5,
              mem=min(opts.gpu_memory_gib, mem), share=share)
    job.estimate, job.util = estimate, util  # NaN: filled in by read_trace
    return job


def write_trace(jobs: Sequence[Job], path: str | Path) -> Path:
    """Write jobs in the Alibaba pod-list format plus ``estimate_s``, ``gpu_util`` and
    ``gpu_mem_gib``, atomically. ``gpu_milli`` is the request (share x 1000); the start is
    the arrival (the format records no queue)."""
    path = Path(path)
    with atomic_write(path, "w") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["name", *TRACE_COLUMNS[:4], "qos", *TRACE_COLUMNS[4:], "estimate_s",
                         "gpu_util", "gpu_mem_gib"])
        for j in jobs:
            writer.writerow([f"job-{j.jid}", 1000 * j.n_gpus, 8192, j.n_gpus,
                             round(1000 * j.share), "BE" if j.kind == EXP else "LS",
                             f"{j.arrival:.3f}", f"{j.arrival + j.work:.3f}",
                             f"{j.arrival:.3f}", f"{j.estimate:.3f}", f"{j.util:.6f}",
                             f"{j.mem:.6f}"])
    return path
