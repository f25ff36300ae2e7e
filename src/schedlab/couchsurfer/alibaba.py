"""Alibaba ``cluster-trace-gpu-v2023`` (pod list + node list) as CouchSurfer jobs and cluster.

The CSV parsing (file/line/field errors, the columns' meaning) is the shared reader
(:mod:`schedlab.traces.alibaba_gpu2023`, also gPooling's); this module turns its pods and nodes into
what the CouchSurfer simulator needs, faithfully:

* **cluster**: the node list's heterogeneous GPU nodes (per node its GPU count and model;
  GPU memory from the model: P100/T4/V100M16 16 GiB, V100M32 32 GiB, A10 24 GiB; the
  anonymised ``G2``/``G3`` models are given 32 GiB, an assumption). :func:`select_cluster`
  picks a seeded subset of about ``gpus`` GPUs that keeps the list's (model, GPUs per node)
  mix.
* **jobs**: one per GPU pod. Pods never scheduled (blank ``scheduled_time``: the trace's
  ``Pending`` pods) are *dropped and counted*, as are CPU-only pods and pods that fit no node
  of the selected cluster. ``work`` = deletion - scheduled (pods still running at the trace's
  end are censored there: counted as ``censored``). ``gpu_milli`` < 1000 becomes a fractional
  GPU *request* (``share``), packed two to a GPU by every scheduler; it is not utilisation.
* **utilisation and interference**: the trace records neither, so each job is given a measured
  Lucid workload profile (seeded draw; its solo GPU utilisation and memory), and co-located
  pairs run at Lucid's measured speeds (:mod:`.interference`). Without Lucid's files a seeded
  Beta(2, 2) utilisation stands in (``ran_with`` says which).
* **kind**: ``qos`` BE (best effort) -> exploratory, the rest deterministic (configurable).
* **estimates**: :mod:`.predict` (default: causal per-(qos, GPUs, share) history median),
  never the truth unless ``predictor="oracle"`` is asked for.
* **arrival sampling**: each pod is kept with probability ``sample`` (seeded): the seeds of
  the claims are different samples of the same trace.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.couchsurfer.interference import Measurements
from schedlab.couchsurfer.jobs import DET, EXP, ClusterSpec, Job
from schedlab.couchsurfer.predict import estimates, log_error
from schedlab.traces.alibaba_gpu2023 import (
    FULL,
    Node,
    Pod,
    read_node_list,
    read_pod_list,
    shared_trace,
    synthetic_nodes,
    synthetic_pods,
)

#: GPU memory (GiB) by node-list model; G2/G3 are anonymised in the trace (32 GiB assumed)
GPU_MEMORY_GIB = {"P100": 16.0, "T4": 16.0, "V100M16": 16.0, "V100M32": 32.0, "A10": 24.0,
                  "G2": 32.0, "G3": 32.0}
DEFAULT_MEMORY = 32.0

__all__ = ["GPU_MEMORY_GIB", "TraceLoad", "cluster_from_nodes", "load_alibaba", "pods_to_jobs",
           "select_cluster", "shared_trace", "synthetic_nodes", "synthetic_pods"]


@dataclass
class TraceLoad:
    """Jobs and cluster built from a trace, with what was dropped and why."""

    jobs: list[Job]
    cluster: ClusterSpec
    dropped: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    ran_with: str = ""
    estimate_log_error: float = float("nan")

    @property
    def offered_load(self) -> float:
        """sum(min(work, window) x GPUs x share) / (GPUs x window), window = arrival span."""
        if not self.jobs:
            return 0.0
        arrival = np.array([j.arrival for j in self.jobs])
        window = max(float(arrival.max() - arrival.min()), 1.0)
        demand = sum(min(j.work, window) * j.n_gpus * j.share for j in self.jobs)
        return demand / (self.cluster.gpus * window)


def _memory(model: str) -> float:
    return GPU_MEMORY_GIB.get(model, DEFAULT_MEMORY)


def cluster_from_nodes(nodes: list[Node]) -> ClusterSpec:
    """All GPU nodes of a node list as a cluster."""
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    if not gpu_nodes:
        raise ConfigError("the node list has no GPU nodes", field="gpu")
    return ClusterSpec(tuple(n.gpus for n in gpu_nodes),
                       tuple(_memory(n.model) for n in gpu_nodes),
                       tuple(n.model for n in gpu_nodes), tuple(n.name for n in gpu_nodes))


def select_cluster(nodes: list[Node], gpus: int | None, seed: int = 0) -> ClusterSpec:
    """About ``gpus`` GPUs (at least that many; all if None) of the node list, keeping its mix
    of (model, GPUs per node): each step adds a node of the kind furthest below its share."""
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    if gpus is None:
        return cluster_from_nodes(gpu_nodes)
    total = sum(n.gpus for n in gpu_nodes)
    if gpus < 1:
        raise ConfigError(f"must be at least 1, got {gpus}", field="gpus")
    if gpus >= total:
        return cluster_from_nodes(gpu_nodes)
    rng = np.random.default_rng(seed)
    kinds: dict[tuple[str, int], list[Node]] = {}
    for n in gpu_nodes:
        kinds.setdefault((n.model, n.gpus), []).append(n)
    pools = {k: [v[i] for i in rng.permutation(len(v))] for k, v in kinds.items()}
    share = {k: len(v) * k[1] / total for k, v in kinds.items()}
    have: Counter = Counter()
    chosen: list[Node] = []
    got = 0
    while got < gpus:
        open_kinds = [k for k in pools if pools[k]]
        # deficit of each kind if it got one more node, relative to its target
        k = max(open_kinds, key=lambda k: (share[k] * (got + k[1]) - have[k], k[1]))
        node = pools[k].pop()
        chosen.append(node)
        have[k] += node.gpus
        got += node.gpus
    return cluster_from_nodes(sorted(chosen, key=lambda n: n.name))


@dataclass(frozen=True)
class _Profiles:
    util: np.ndarray
    mem: np.ndarray
    ids: np.ndarray


def _profiles(measurements: Measurements | None) -> _Profiles | None:
    if measurements is None:
        return None
    ids = np.array(measurements.paired_profiles())
    return _Profiles(np.array([measurements.profiles[i].gpu_util for i in ids]),
                     np.array([measurements.profiles[i].gmem_gib for i in ids]), ids)


def compress(arrival: np.ndarray, work: np.ndarray, demand: np.ndarray, gpus: int,
             load: float) -> np.ndarray:
    """Arrivals scaled about the first one so the offered load over the arrival window is
    ``load``: sum(min(work, window) x GPUs x share) / (gpus x window) (bisection on the
    factor). Durations are kept; only the gaps between arrivals shrink or grow."""
    if not load > 0:
        raise ConfigError(f"must be positive, got {load}", field="load")
    t0 = float(arrival.min())
    span = float(arrival.max()) - t0
    if span <= 0:
        return arrival.copy()

    def offered(factor: float) -> float:
        window = max(span / factor, 1.0)
        return float((np.minimum(work, window) * demand).sum()) / (gpus * window)

    lo, hi = 1e-6, 1e9
    for _ in range(200):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if offered(mid) < load else (lo, mid)
        if hi / lo < 1 + 1e-9:
            break
    return t0 + (arrival - t0) / hi


def pods_to_jobs(pods: list[Pod], cluster: ClusterSpec, *, seed: int = 0, sample: float = 1.0,
                 jobs: int | None = None, load: float | None = None,
                 exploratory_qos: tuple[str, ...] = ("BE",), predictor: str = "history",
                 measurements: Measurements | None = None) -> TraceLoad:
    """Jobs from pods for ``cluster`` (see the module doc for every mapping).

    Sampling: exactly ``jobs`` of the usable pods (seeded, without replacement) when given,
    else each with probability ``sample``. ``load``: compress arrivals to that offered load
    (:func:`compress`); None keeps the recorded times.
    """
    if not 0 < sample <= 1:
        raise ConfigError(f"must be in (0, 1], got {sample}", field="sample")
    if jobs is not None and jobs < 1:
        raise ConfigError(f"must be at least 1, got {jobs}", field="jobs")
    rng = np.random.default_rng(seed)
    usable = [p.num_gpu > 0 and p.scheduled_time is not None
              and p.deletion_time > p.scheduled_time
              and p.num_gpu <= max(cluster.node_gpus) for p in pods]
    if jobs is not None:
        idx = np.flatnonzero(usable)
        pick = rng.choice(idx, size=min(jobs, idx.size), replace=False)
        keep = np.zeros(len(pods), dtype=bool)
        keep[pick] = True
    else:
        keep = rng.random(len(pods)) < sample
    dropped: Counter = Counter()
    widest = max(cluster.node_gpus)
    min_mem = min(cluster.node_memory)
    kept: list[Pod] = []
    end = max((p.deletion_time for p in pods), default=0.0)
    censored = 0
    for pod, k in zip(pods, keep, strict=True):
        if pod.num_gpu == 0:
            dropped["cpu_only"] += 1
        elif pod.scheduled_time is None:
            dropped["never_scheduled"] += 1
        elif pod.deletion_time <= pod.scheduled_time:
            dropped["zero_length"] += 1
        elif pod.num_gpu > widest:
            dropped["too_wide_for_cluster"] += 1
        elif not k:
            dropped["not_sampled"] += 1
        else:
            kept.append(pod)
            censored += pod.deletion_time >= end and pod.phase == "Running"
    profiles = _profiles(measurements)
    n = len(kept)
    if n == 0:
        return TraceLoad([], cluster, dict(dropped), {"jobs": 0}, "no jobs")
    if profiles is not None:
        pick = rng.integers(0, profiles.ids.size, n)
        util, gmem, prof = profiles.util[pick], profiles.mem[pick], profiles.ids[pick]
        ran_with = "Lucid measured profiles and pairs"
    else:
        util = rng.beta(2.0, 2.0, n).clip(0.05, 1.0)
        gmem = rng.uniform(2.0, 12.0, n)
        prof = np.full(n, -1)
        ran_with = "seeded utilisation (no Lucid measurements)"
    arrival = np.array([p.creation_time for p in kept])
    runtime = np.array([p.deletion_time - p.scheduled_time for p in kept])
    share = np.array([p.gpu_milli / FULL if p.num_gpu == 1 else 1.0 for p in kept])
    if load is not None:
        demand = np.array([p.num_gpu for p in kept]) * share
        arrival = compress(arrival, runtime, demand, cluster.gpus, load)
    groups = [(p.qos, p.num_gpu, s < 1) for p, s in zip(kept, share, strict=True)]
    est = estimates(arrival, runtime, groups, predictor=predictor, seed=seed + 1)
    jobs = []
    for i, p in enumerate(kept):
        s = float(share[i])
        # a fractional pod's memory is its quota of the smallest GPU it may land on
        mem = float(min(gmem[i], s * min_mem)) if s < 1 else float(min(gmem[i], min_mem))
        jobs.append(Job(jid=i, kind=EXP if p.qos in exploratory_qos else DET,
                        arrival=float(arrival[i]), n_gpus=p.num_gpu, work=float(runtime[i]),
                        estimate=float(est[i]), util=float(util[i]), mem=max(mem, 0.1),
                        share=s, profile=int(prof[i])))
    counts = {"jobs": n, "exploratory": sum(j.kind == EXP for j in jobs),
              "fractional": int((share < 1).sum()), "censored": int(censored),
              "gpus": cluster.gpus, "nodes": cluster.nodes}
    return TraceLoad(jobs, cluster, dict(dropped), counts, ran_with,
                     log_error(est, runtime))


def load_alibaba(pod_list: str | Path, node_list: str | Path | None = None, *,
                 gpus: int | None = None, seed: int = 0, sample: float | None = None,
                 jobs: int | None = None, load: float | None = None,
                 predictor: str = "history", measurements: Measurements | None = None,
                 exploratory_qos: tuple[str, ...] = ("BE",)) -> TraceLoad:
    """Read the pod list (and node list) and build jobs for a ``gpus``-GPU slice of it.

    ``sample`` defaults to the slice's share of the node list's GPUs (so the slice sees the
    trace's arrival intensity per GPU); ``jobs`` samples that many pods instead; ``load``
    compresses arrivals to an offered load (the recorded trace offers about 0.2 %: 8,152 pods
    on 6,212 GPUs over 149 days). Without a node list, 8-GPU 32 GiB nodes are assumed.
    """
    pods = read_pod_list(pod_list)
    if node_list is not None:
        nodes = read_node_list(node_list)
        total = sum(n.gpus for n in nodes)
        cluster = select_cluster(nodes, gpus, seed)
    else:
        if gpus is None:
            raise BadInputError("without a node list, --gpus is needed", field="gpus")
        nodes_needed = max(1, -(-gpus // 8))
        cluster = ClusterSpec.uniform(nodes_needed, 8, DEFAULT_MEMORY)
        total = cluster.gpus
    if sample is None:
        sample = min(1.0, cluster.gpus / total)
    return pods_to_jobs(pods, cluster, seed=seed, sample=sample, jobs=jobs, load=load,
                        predictor=predictor, measurements=measurements,
                        exploratory_qos=exploratory_qos)
