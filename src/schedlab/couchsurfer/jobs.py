"""Jobs and the cluster they run on: plain data the engine, the policies and EJPP share.

CouchSurfer (paper 06) distinguishes *deterministic* jobs (long, run to completion, want
exclusive GPUs) from *exploratory* jobs (hyper-parameter trials, debugging runs: short because
most are terminated early). A job's ``work`` is the seconds it runs alone until it ends (its
early-termination point for exploratory jobs); ``estimate`` is what its user asked for (the
full run), which is all a scheduler may know in advance.
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
    hosted_time: float = 0.0

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
        if math.isnan(self.remaining):
            self.remaining = self.work

    @property
    def running(self) -> bool:
        return bool(self.gpus)


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
    primary: np.ndarray = field(init=False)
    secondary: np.ndarray = field(init=False)
    node_of: np.ndarray = field(init=False)
    primary_util: np.ndarray = field(init=False)
    primary_mem: np.ndarray = field(init=False)
    free_per_node: np.ndarray = field(init=False)
    primary_est_end: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ConfigError("a cluster needs at least one node with one GPU",
                              field="nodes/gpus_per_node")
        g = self.nodes * self.gpus_per_node
        self.primary = np.full(g, -1, dtype=np.int64)
        self.secondary = np.full(g, -1, dtype=np.int64)
        self.node_of = np.repeat(np.arange(self.nodes), self.gpus_per_node)
        self.primary_util = np.zeros(g)
        self.primary_mem = np.zeros(g)
        self.free_per_node = np.full(self.nodes, self.gpus_per_node, dtype=np.int64)
        # when each GPU's primary ends according to its user's estimate (what schedulers know)
        self.primary_est_end = np.full(g, np.inf)

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

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
        free = ids[self.primary[ids] < 0]
        if prefer_no_secondary:
            free = free[np.argsort(self.secondary[free] >= 0, kind="stable")]
        return tuple(int(x) for x in free[:n])
