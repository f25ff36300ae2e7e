"""Jobs and the cluster they run on: plain data the engine, the policies and EJPP share.

CouchSurfer (paper 06) distinguishes *deterministic* jobs (long, run to completion, want
exclusive GPUs) from *exploratory* jobs (hyper-parameter trials, debugging runs: short because
most are terminated early). A job's ``work`` is the seconds it runs alone until it ends (its
early-termination point for exploratory jobs); ``estimate`` is what its user asked for (the
full run, or a predictor's guess from history), which is all a scheduler may know in advance.
``share`` is the fraction of each GPU a job *requests* (Alibaba's ``gpu_milli`` / 1000): jobs
with ``share < 1`` are single-GPU and may be packed two to a GPU as long as the shares sum to
at most 1. ``util`` is the job's solo GPU utilisation (what interference depends on) and
``profile`` the index of its measured Lucid workload profile (-1: none).

Clusters may be heterogeneous: each node has its own GPU count and GPU memory. GPU ids are
``node * gpus_per_node + k`` with ``gpus_per_node`` the widest node; slots beyond a node's
GPU count do not exist (``exists`` is False there) and no placement may use them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from schedlab.core.errors import ConfigError

DET, EXP = "det", "exp"
KINDS = (DET, EXP)


@dataclass(slots=True)
class Job:
    """One training job; the run-time fields are owned by the engine."""

    jid: int
    kind: str
    arrival: float
    n_gpus: int
    work: float
    estimate: float
    util: float
    mem: float
    share: float = 1.0
    profile: int = -1
    # run-time state (engine-owned)
    remaining: float = math.nan
    rate: float = 0.0
    last: float = 0.0
    gpus: tuple[int, ...] = ()
    role: str = ""
    mode: str = ""
    start: float = math.nan
    finish: float = math.nan
    run_time: float = 0.0
    attained: float = 0.0
    version: int = 0
    preemptions: int = 0
    hosted_time: float = 0.0  # seconds this job ran as a host beside a surfer
    hosted_work: float = 0.0  # work it did in those seconds
    hosting: bool = False  # a surfer or packed job shares one of its GPUs right now

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"kind must be one of {KINDS}", field="kind")
        if self.n_gpus < 1:
            raise ConfigError("a job needs at least one GPU", field="n_gpus")
        if not (self.work > 0 and math.isfinite(self.work)):
            raise ConfigError("work must be a positive number of seconds", field="work")
        if not 0 < self.util <= 1:
            raise ConfigError("util must be in (0, 1]", field="util")
        if self.mem < 0:
            raise ConfigError("mem must be non-negative", field="mem")
        if not 0 < self.share <= 1:
            raise ConfigError("share must be in (0, 1]", field="share")
        if self.share < 1 and self.n_gpus != 1:
            raise ConfigError("a fractional GPU request (share < 1) needs exactly one GPU",
                              field="share")
        if math.isnan(self.remaining):
            self.remaining = self.work

    @property
    def running(self) -> bool:
        return bool(self.gpus)


@dataclass(frozen=True)
class ClusterSpec:
    """A (possibly heterogeneous) cluster: per node its GPU count, GPU memory and model."""

    node_gpus: tuple[int, ...]
    node_memory: tuple[float, ...]
    models: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.node_gpus or len(self.node_memory) != len(self.node_gpus):
            raise ConfigError("needs one GPU count and one GPU memory per node",
                              field="node_gpus/node_memory")
        if min(self.node_gpus) < 1 or min(self.node_memory) <= 0:
            raise ConfigError("every node needs >= 1 GPU with positive memory",
                              field="node_gpus/node_memory")

    @classmethod
    def uniform(cls, nodes: int, gpus_per_node: int = 8, memory: float = 32.0) -> ClusterSpec:
        return cls((gpus_per_node,) * nodes, (memory,) * nodes)

    @property
    def nodes(self) -> int:
        return len(self.node_gpus)

    @property
    def width(self) -> int:
        return max(self.node_gpus)

    @property
    def gpus(self) -> int:
        return sum(self.node_gpus)


@dataclass
class ClusterState:
    """GPU occupancy as arrays: one primary (host or exclusive job) and one secondary per GPU.

    The secondary slot is where a surfer (or a Gandiva-packed job) lives. A secondary may sit
    on a GPU with no primary: the GPU stays free for deterministic jobs, which is how surfers
    stay "resource-agnostic" and never block the queue.
    """

    nodes: int
    gpus_per_node: int
    gpu_memory_gib: float
    node_gpus_count: np.ndarray | None = None
    node_memory_gib: np.ndarray | None = None
    primary: np.ndarray = field(init=False)
    secondary: np.ndarray = field(init=False)
    node_of: np.ndarray = field(init=False)
    primary_util: np.ndarray = field(init=False)
    primary_mem: np.ndarray = field(init=False)
    free_per_node: np.ndarray = field(init=False)
    primary_est_end: np.ndarray = field(init=False)
    primary_share: np.ndarray = field(init=False)
    exists: np.ndarray = field(init=False)
    gpu_mem: np.ndarray = field(init=False)
    sec_share: np.ndarray = field(init=False)  # the secondary is a GPU-share co-tenant

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ConfigError("a cluster needs at least one node with one GPU",
                              field="nodes/gpus_per_node")
        w = self.gpus_per_node
        sizes = (np.full(self.nodes, w, dtype=np.int64) if self.node_gpus_count is None
                 else np.asarray(self.node_gpus_count, dtype=np.int64))
        if sizes.shape != (self.nodes,) or (sizes < 1).any() or (sizes > w).any():
            raise ConfigError(f"needs one GPU count in 1..{w} per node", field="node_gpus")
        memory = (np.full(self.nodes, self.gpu_memory_gib, dtype=float)
                  if self.node_memory_gib is None
                  else np.asarray(self.node_memory_gib, dtype=float))
        if memory.shape != (self.nodes,) or not (memory > 0).all():
            raise ConfigError("needs one positive GPU memory per node", field="node_memory")
        self.node_gpus_count, self.node_memory_gib = sizes, memory
        g = self.nodes * w
        self.primary = np.full(g, -1, dtype=np.int64)
        self.secondary = np.full(g, -1, dtype=np.int64)
        self.node_of = np.repeat(np.arange(self.nodes), w)
        self.exists = np.tile(np.arange(w), self.nodes) < np.repeat(sizes, w)
        self.gpu_mem = np.repeat(memory, w)
        self.primary_util = np.zeros(g)
        self.primary_mem = np.zeros(g)
        self.primary_share = np.zeros(g)
        self.sec_share = np.zeros(g, dtype=bool)
        self.free_per_node = sizes.copy()
        # when each GPU's primary ends according to its user's estimate (what schedulers know)
        self.primary_est_end = np.full(g, np.inf)

    @property
    def n_gpus(self) -> int:
        """GPU slots (including the non-existent tail of narrow nodes)."""
        return self.nodes * self.gpus_per_node

    @property
    def real_gpus(self) -> int:
        """GPUs that exist."""
        return int(self.exists.sum())

    @property
    def free_gpus(self) -> int:
        return int(self.free_per_node.sum())

    def node_gpus(self, node: int) -> range:
        return range(node * self.gpus_per_node, (node + 1) * self.gpus_per_node)

    def exclusive_gpus(self, n: int, prefer_no_secondary: bool = True) -> tuple[int, ...] | None:
        """n free GPUs on one node (best fit: the node with the fewest free GPUs that suffice).

        Best fit keeps whole nodes free for 8-GPU jobs; within a node, GPUs without a surfer
        come first so a new host disturbs as few surfers as possible.
        """
        if n > self.gpus_per_node:
            return None
        fits = np.flatnonzero(self.free_per_node >= n)
        if fits.size == 0:
            return None
        node = int(fits[np.argmin(self.free_per_node[fits])])
        ids = np.arange(node * self.gpus_per_node, (node + 1) * self.gpus_per_node)
        free = ids[(self.primary[ids] < 0) & self.exists[ids]]
        if prefer_no_secondary:
            free = free[np.argsort(self.secondary[free] >= 0, kind="stable")]
        return tuple(int(x) for x in free[:n])
