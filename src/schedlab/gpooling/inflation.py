"""FGD's workload inflation on a real node list: how full can each policy get the cluster?

Weng et al. (ATC'23, "Beware of Fragmentation", the paper behind the Alibaba GPU 2023 trace)
evaluate GPU-sharing schedulers by *inflating* the workload: pods are drawn from the trace with
replacement and submitted one after another, none departing, until the pods that arrived ask for
more than the cluster's GPU capacity; at each level of arrived load they report how much of the
cluster is allocated and how much of the demand could not be scheduled. This module does that on
the trace's own node list (heterogeneous nodes: CPU and memory as well as GPUs, each pod's CPU
and memory charged to its node), for every placement policy of ``policies.py`` unchanged: the
node constraints enter through :class:`NodeState`, which narrows the devices a policy may see.

gPooling (../shared/papers/14-gpooling.md) claims higher utilisation than device-level
allocation; this is the paper's setting (a production cluster's trace) measured the way the
trace's authors measure it, not a hand-picked pool.

Modelled: a pod's GPU memory is ``gpu_milli/1000 x memory_per_gpu`` (the trace has none); a
multi-GPU pod goes to one node, the one whose fitting devices are fewest (the same node rule for
every policy; which GPUs on it is the policy's choice); ``gpu_spec`` is empty in the public
trace, so any model may serve any pod.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.core.io import read_frame
from schedlab.gpooling.devices import GIB, PhysicalDevice, read_node_list
from schedlab.gpooling.policies import FragAware, PlacementPolicy, make_policy
from schedlab.gpooling.state import FULL, ClusterState, Request


@dataclass(frozen=True)
class Pod:
    """One pod of the trace: per-pod CPU (milli) and memory (MiB), per-GPU request."""

    cpu: int
    memory_mib: int
    request: Request


@dataclass
class Nodes:
    """A node list: devices plus each node's CPU and memory."""

    devices: list[PhysicalDevice]
    cpu: np.ndarray  # milli per node
    memory_mib: np.ndarray
    node_of: np.ndarray  # node index per device
    names: list[str]


def read_nodes(path: str | Path, limit: int | None = None) -> Nodes:
    """An Alibaba ``gpu2023_node_list`` CSV with ``sn, cpu_milli, memory_mib, gpu, model``."""
    path = Path(path)
    frame = read_frame(path, required={"sn": str, "cpu_milli": int, "memory_mib": int,
                                       "gpu": int, "model": str})
    if limit is not None:
        if limit < 1:
            raise BadInputError(f"must be at least 1, got {limit}", field="limit")
        frame = frame.head(limit)
    for column in ("cpu_milli", "memory_mib"):
        values = frame[column].to_numpy()
        if (values < 0).any():
            line = int(np.argmax(values < 0)) + 2
            raise BadInputError("must not be negative", path=path, line=line, field=column)
    devices = read_node_list(path, limit=None)
    names = frame["sn"].to_list()
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        raise BadInputError("node names must be unique", path=path, field="sn")
    devices = [d for d in devices if d.node in index]
    if not devices:
        raise BadInputError("the node list has no GPUs", path=path, field="gpu")
    return Nodes(devices, frame["cpu_milli"].to_numpy().astype(np.int64),
                 frame["memory_mib"].to_numpy().astype(np.int64),
                 np.array([index[d.node] for d in devices], dtype=np.int64), names)


def read_pods(path: str | Path, memory_per_gpu: int = 16 * GIB) -> list[Pod]:
    """The GPU pods of an Alibaba ``gpu2023_pod_list`` (CPU-only pods are skipped)."""
    path = Path(path)
    if memory_per_gpu < 1:
        raise BadInputError("must be at least one byte", field="memory-per-gpu")
    frame = read_frame(path, required={"cpu_milli": int, "memory_mib": int, "num_gpu": int,
                                       "gpu_milli": int})
    pods = []
    for line, row in enumerate(frame.select("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
                               .iter_rows(), start=2):
        cpu, mem, count, milli = row
        for name, value in zip(("cpu_milli", "memory_mib", "num_gpu", "gpu_milli"), row,
                               strict=True):
            if value is None or value < 0:
                raise BadInputError("missing or negative value", path=path, line=line,
                                    field=name)
        if count == 0:
            continue
        if not 0 < milli <= FULL:
            raise BadInputError(f"must be in 1..{FULL}, got {milli}", path=path, line=line,
                                field="gpu_milli")
        pods.append(Pod(int(cpu), int(mem),
                        Request(int(milli) * memory_per_gpu // FULL, int(milli), int(count))))
    if not pods:
        raise BadInputError("the trace has no GPU pods", path=path, field="num_gpu")
    return pods


class NodeState(ClusterState):
    """Cluster books that also know nodes: a device is eligible only while its node has the
    pending pod's CPU and memory free (and, for a gang, only on the chosen node)."""

    def __init__(self, nodes: Nodes) -> None:
        super().__init__(nodes.devices)
        self.node_of = nodes.node_of
        self.free_cpu = nodes.cpu.copy()
        self.free_mem = nodes.memory_mib.copy()
        self.pod_cpu = 0
        self.pod_mem = 0
        self.only_node = -1

    def eligible(self, request: Request) -> np.ndarray:
        mask = super().eligible(request)
        mask &= (self.free_cpu[self.node_of] >= self.pod_cpu)
        mask &= (self.free_mem[self.node_of] >= self.pod_mem)
        if self.only_node >= 0:
            mask &= self.node_of == self.only_node
        return mask


def _place(pod: Pod, state: NodeState, policy: PlacementPolicy):
    state.pod_cpu, state.pod_mem, state.only_node = pod.cpu, pod.memory_mib, -1
    request = pod.request
    if request.count > 1:  # a gang lives on one node: the tightest one that can hold it
        fits = state.fits_now(request)
        per_node = np.bincount(state.node_of[fits], minlength=len(state.free_cpu))
        candidates = np.flatnonzero(per_node >= request.count)
        if candidates.size == 0:
            return None
        state.only_node = int(candidates[np.argmin(per_node[candidates])])
    grants = policy.place(request, state)
    if grants is not None and len({int(state.node_of[g.device]) for g in grants}) > 1:
        grants = None  # a policy that split a gang across nodes: refused, not over-committed
    if grants is not None:
        state.take(request, grants)
        node = int(state.node_of[grants[0].device])
        state.free_cpu[node] -= pod.cpu
        state.free_mem[node] -= pod.memory_mib
    state.only_node = -1
    return grants


def inflate(pods: Sequence[Pod], nodes: Nodes, policy: str | PlacementPolicy, *, seed: int = 0,
            levels: Sequence[float] = (0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3)) -> list[dict]:
    """FGD's inflation: one row per level of arrived GPU demand (fraction of capacity).

    Columns: ``utilisation`` (GPU compute requested by scheduled pods / capacity, the trace
    authors' "GPU allocation rate"), ``granted`` (compute granted, which for whole-device
    allocation is whole GPUs), ``unscheduled`` (share of arrived demand that found no room),
    ``fragmentation`` (share of free GPU compute that the trace's request mix cannot use, FGD's
    measure, the same yardstick for every policy) and ``first_failure`` (arrived load when the
    first pod was refused).
    """
    if not pods:
        raise BadInputError("no pods to inflate", field="trace")
    levels = sorted(float(x) for x in levels)
    if not levels or levels[0] <= 0:
        raise BadInputError("levels must be positive", field="levels")
    policy = make_policy(policy) if isinstance(policy, str) else policy
    state = NodeState(nodes)
    capacity = FULL * len(nodes.devices)
    meter = FragAware(window=len(pods))
    for pod in pods:
        meter.observe(pod.request)
    rng = np.random.default_rng(seed)
    arrived = requested = granted = failed = 0
    first_failure = None
    rows: list[dict] = []
    level = 0
    while level < len(levels):
        pod = pods[int(rng.integers(len(pods)))]
        demand = pod.request.milli * pod.request.count
        policy.observe(pod.request)
        grants = _place(pod, state, policy)
        arrived += demand
        if grants is None:
            failed += demand
            if first_failure is None:
                first_failure = arrived / capacity
        else:
            requested += demand
            granted += sum(g.milli for g in grants)
        while level < len(levels) and arrived >= levels[level] * capacity:
            free = state.free_milli.astype(float)
            frag = meter.fragmentation(state.free_memory, state.free_milli, pod.request).sum()
            rows.append(dict(policy=policy.name, load=levels[level], arrived=arrived / capacity,
                             utilisation=requested / capacity, granted=granted / capacity,
                             unscheduled=failed / arrived,
                             fragmentation=float(frag / max(free.sum(), 1.0)),
                             first_failure=first_failure if first_failure is not None
                             else float("nan"), devices=len(nodes.devices), seed=seed))
            level += 1
    return rows


def compare_inflation(trace: str | Path, nodes: str | Path, *, policy: str = "all",
                      seeds: int = 1, levels: Sequence[float] | str | None = None,
                      memory_per_gpu: int = 16 * GIB, limit: int | None = None):
    """Every policy (or one) inflated on the node list, ``seeds`` draws each: a Polars frame."""
    import polars as pl

    from schedlab.core.registry import lookup
    from schedlab.gpooling.policies import POLICIES

    names = list(POLICIES) if policy == "all" else [policy]
    for name in names:
        lookup(POLICIES, "placement policy", name)
    if seeds < 1:
        raise BadInputError(f"must be at least 1, got {seeds}", field="seeds")
    if isinstance(levels, str):
        try:
            levels = [float(x) for x in levels.split(",") if x.strip()]
        except ValueError:
            raise BadInputError(f"not a comma-separated list of numbers: {levels!r}",
                                field="levels") from None
        if not levels or not all(np.isfinite(levels)):
            raise BadInputError("give at least one finite level", field="levels")
    pods = read_pods(trace, memory_per_gpu)
    pool = read_nodes(nodes, limit)
    rows = []
    for name in names:
        for seed in range(seeds):
            kwargs = {} if levels is None else dict(levels=levels)
            rows += inflate(pods, pool, name, seed=seed, **kwargs)
    return pl.DataFrame(rows)
