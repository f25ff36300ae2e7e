"""The MEC market: model zoo with shared parameter blocks, cloudlets, users, prices, candidates.

Paper: "Collaborative large model caching and inference offloading in MEC with coalition
formation" (see ../shared/papers/03-mec_coalition.md). A pretrained foundation model is a set of
parameter blocks; fine-tuned variants reuse some of them (a full fine-tune shares its embeddings
and frozen layers, a LoRA/adapter variant shares the whole base). A cloudlet that caches two
variants of one base stores the shared blocks once, which is the redundancy the paper exploits.

Everything here is plain arrays so solvers (HiGHS), greedy rules and the engine read the same
data. ``Candidates`` lists, once, every (user, cloudlet, model) triple that could serve a user at
the edge (accuracy and deadline met, cloudlet within reach of the user's home, positive gain over
the remote cloud); every algorithm chooses among these triples.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from schedlab.core.errors import BadInputError


@dataclass(frozen=True)
class Zoo:
    """Models as sets of parameter blocks.

    ``blocks[m, b]`` is True when model m needs block b; ``block_gb[b]`` its size. ``acc[m, t]``
    is model m's accuracy on task t; ``tflop[m]`` the compute one request needs.
    """

    block_gb: np.ndarray  # [B]
    blocks: np.ndarray  # bool [M, B]
    acc: np.ndarray  # [M, T]
    tflop: np.ndarray  # [M] per request
    family: np.ndarray  # int [M]: index of the base model's family
    kind: tuple[str, ...]  # "base" | "full-ft" | "lora" per model

    @property
    def n_models(self) -> int:
        return int(self.blocks.shape[0])

    @property
    def n_tasks(self) -> int:
        return int(self.acc.shape[1])

    @property
    def model_gb(self) -> np.ndarray:
        """Size of each model stored on its own (no sharing)."""
        return self.blocks.astype(float) @ self.block_gb

    def unshared(self) -> Zoo:
        """The same models with every block private: what caching without sharing stores."""
        m, b = self.blocks.shape
        rows, cols = np.nonzero(self.blocks)
        blocks = np.zeros((m, rows.size), dtype=bool)
        blocks[rows, np.arange(rows.size)] = True
        return Zoo(self.block_gb[cols].copy(), blocks, self.acc, self.tflop, self.family, self.kind)


@dataclass(frozen=True)
class Cloudlets:
    """Edge sites: position (km), storage (GB), compute (TFLOP/s) and unit costs."""

    xy: np.ndarray  # [N, 2] km
    storage_gb: np.ndarray  # [N]
    compute_tflops: np.ndarray  # [N] sustainable throughput for inference
    gpu_tflops: np.ndarray  # [N] speed one request sees (sets inference delay)
    storage_cost: np.ndarray  # [N] per GB·s of cached parameters
    compute_cost: np.ndarray  # [N] per TFLOP served
    gpus: np.ndarray | None = None  # [N] GPUs serving the queue (queueing delay); None: derived

    @property
    def n(self) -> int:
        return int(self.xy.shape[0])

    @property
    def servers(self) -> np.ndarray:
        """GPUs per cloudlet: given, else sustainable compute / one GPU's speed (at least 1)."""
        if self.gpus is not None:
            return np.asarray(self.gpus, dtype=np.int64)
        return np.maximum(1, np.round(self.compute_tflops / self.gpu_tflops / 0.6)).astype(
            np.int64)


@dataclass(frozen=True)
class Users:
    """Users: home cloudlet, task, request rate, payload, accuracy need, deadline, price."""

    xy: np.ndarray  # [U, 2] km
    task: np.ndarray  # int [U]
    rate: np.ndarray  # requests/s
    data_mb: np.ndarray  # request payload
    acc_req: np.ndarray
    deadline_s: np.ndarray
    price: np.ndarray  # paid per request that meets its deadline and accuracy
    service_scv: np.ndarray | None = None  # SCV of the user's service time (None: 1, M/M)

    @property
    def n(self) -> int:
        return int(self.xy.shape[0])


@dataclass(frozen=True)
class Economy:
    """Network and market parameters (documented defaults; all are modelled, not measured).

    Delays in seconds, sizes in MB/GB, money in abstract units. ``beta`` prices a second of
    delay, ``gamma`` a unit of accuracy. ``coord_cost`` (per pair of coalition members per
    second) is *not* from the paper: it is an explicit sweep parameter, **0 by default**. The
    cost of cooperation the model does derive from its mechanism is per request: a request
    served by another member's cloudlet pays the edge-to-edge transfer
    (``edge_transfer_per_mb``) and its extra delay (``beta`` x RTT and transfer time).
    """

    access_s: float = 0.005  # user -> home cloudlet radio access
    access_per_km_s: float = 0.002
    edge_rtt_s: float = 0.002  # cloudlet <-> cloudlet, fixed part
    edge_rtt_per_km_s: float = 0.0015
    edge_mbps: float = 1000.0
    cloud_rtt_s: float = 0.090
    cloud_mbps: float = 100.0
    cloud_gpu_tflops: float = 400.0
    cloud_fee_per_tflop: float = 0.12
    cloud_transfer_per_mb: float = 0.02
    edge_transfer_per_mb: float = 0.004
    beta: float = 2.0
    gamma: float = 0.5
    coord_cost: float = 0.0  # sweep parameter, not the paper's (see docstring)
    reach: int = 6  # a user may be served by the `reach` cloudlets nearest its home

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if value < 0:
                raise BadInputError(f"must be non-negative, got {value}", field=name)
        if self.reach < 1:
            raise BadInputError("must be at least 1", field="reach")


@dataclass(frozen=True)
class Candidates:
    """Every feasible edge option (user u, cloudlet n, model m) with its per-second figures."""

    user: np.ndarray
    node: np.ndarray
    model: np.ndarray
    delay_s: np.ndarray
    acc: np.ndarray
    gain: np.ndarray  # payoff per second over serving u from the cloud (> 0)
    load: np.ndarray  # TFLOP/s the triple puts on cloudlet n
    cost: np.ndarray  # compute + transfer cost per second at the edge
    revenue: np.ndarray  # price per second collected at the edge

    @property
    def size(self) -> int:
        return int(self.user.size)

    def subset(self, keep: np.ndarray) -> Candidates:
        return Candidates(*(getattr(self, f)[keep] for f in _CAND_FIELDS))


_CAND_FIELDS = ("user", "node", "model", "delay_s", "acc", "gain", "load", "cost", "revenue")


@dataclass(frozen=True)
class CloudOption:
    """What serving each user from the remote cloud gives (the fallback)."""

    delay_s: np.ndarray
    acc: np.ndarray
    payoff: np.ndarray  # per second
    cost: np.ndarray
    revenue: np.ndarray
    meets_deadline: np.ndarray


#: users per chunk when building distances and candidates (bounds peak memory)
_CHUNK = 2048


@dataclass
class Instance:
    """One market: zoo, cloudlets, users, economy, plus derived distances and candidates."""

    zoo: Zoo
    cloudlets: Cloudlets
    users: Users
    economy: Economy = field(default_factory=Economy)

    def __post_init__(self) -> None:
        validate(self)
        n_xy, u_xy = self.cloudlets.xy, self.users.xy
        self.dist_km = np.linalg.norm(n_xy[:, None, :] - n_xy[None, :, :], axis=2)
        self.home = np.zeros(self.users.n, dtype=np.int64)
        home_km = np.zeros(self.users.n)
        for lo in range(0, self.users.n, _CHUNK):  # chunks: no users x cloudlets x 2 array
            d = np.hypot(u_xy[lo: lo + _CHUNK, None, 0] - n_xy[None, :, 0],
                         u_xy[lo: lo + _CHUNK, None, 1] - n_xy[None, :, 1])
            self.home[lo: lo + _CHUNK] = np.argmin(d, axis=1)
            home_km[lo: lo + _CHUNK] = d[np.arange(d.shape[0]), self.home[lo: lo + _CHUNK]]
        self.access_s = self.economy.access_s + self.economy.access_per_km_s * home_km
        reach = min(self.economy.reach, self.cloudlets.n)
        self.near = np.argsort(self.dist_km, axis=1, kind="stable")[:, :reach]
        self.cloud = _cloud_option(self)
        self.cand = _candidates(self)

    @property
    def neighbours(self) -> list[set[int]]:
        """Symmetric reach graph: i and j are neighbours when either is near the other."""
        out: list[set[int]] = [set() for _ in range(self.cloudlets.n)]
        for i, row in enumerate(self.near):
            for j in row:
                if i != j:
                    out[i].add(int(j))
                    out[int(j)].add(i)
        return out


def validate(inst: Instance) -> None:
    """Reject inputs no algorithm can make sense of, naming the offending field."""
    c, u, z = inst.cloudlets, inst.users, inst.zoo
    for name in ("storage_gb", "compute_tflops", "gpu_tflops", "storage_cost", "compute_cost"):
        values = getattr(c, name)
        if values.shape != (c.n,):
            raise BadInputError(f"needs one value per cloudlet ({c.n})", field=name)
        if not np.all(np.isfinite(values)) or (values < 0).any():
            bad = int(np.argmax(~np.isfinite(values) | (values < 0)))
            raise BadInputError(f"cloudlet {bad} has {values[bad]}; capacities and costs must "
                                "be finite and non-negative", field=name)
    if c.gpus is not None:
        gpus = np.asarray(c.gpus, dtype=float)
        if gpus.shape != (c.n,) or not np.all(np.isfinite(gpus)) or (gpus < 1).any() or (
                gpus != np.round(gpus)).any():
            raise BadInputError("needs one whole number >= 1 per cloudlet", field="gpus")
        over = c.compute_tflops >= gpus * c.gpu_tflops
        if over.any():
            k = int(np.argmax(over))
            raise BadInputError(
                f"cloudlet {k}: compute_tflops {c.compute_tflops[k]:g} is not below gpus x "
                f"gpu_tflops = {gpus[k] * c.gpu_tflops[k]:g}, so its M/G/c queue would never "
                "drain", field="compute_tflops")
    if u.service_scv is not None:
        scv = np.asarray(u.service_scv, dtype=float)
        if scv.shape != (u.n,) or not np.all(np.isfinite(scv)) or (scv < 0).any():
            raise BadInputError("needs one finite non-negative value per user",
                                field="service_scv")
    if (c.gpu_tflops <= 0).any():
        raise BadInputError("every cloudlet needs a positive GPU speed", field="gpu_tflops")
    for name in ("rate", "data_mb", "acc_req", "deadline_s", "price"):
        values = getattr(u, name)
        if values.shape != (u.n,) or not np.all(np.isfinite(values)) or (values < 0).any():
            raise BadInputError("needs one finite non-negative value per user", field=name)
    if u.n and (u.task.min() < 0 or u.task.max() >= z.n_tasks):
        raise BadInputError(f"tasks must lie in 0..{z.n_tasks - 1}", field="task")
    if c.n == 0:
        raise BadInputError("the topology has no cloudlets", field="cloudlets")
    if (z.block_gb <= 0).any():
        raise BadInputError("parameter blocks need a positive size", field="block_gb")
    largest = float(c.storage_gb.max())
    too_big = np.nonzero(z.model_gb > largest)[0]
    if too_big.size:
        m = int(too_big[0])
        raise BadInputError(f"model {m} needs {z.model_gb[m]:.1f} GB but the largest cloudlet "
                            f"stores {largest:.1f} GB; it can never be cached", field="storage_gb")


def _cloud_option(inst: Instance) -> CloudOption:
    """The cloud hosts every model: best accuracy per task, a long backhaul, a fee per TFLOP."""
    e, u, z = inst.economy, inst.users, inst.zoo
    best = np.argmax(z.acc, axis=0)  # per task
    model = best[u.task]
    acc = z.acc[model, u.task]
    delay = (inst.access_s + e.cloud_rtt_s + 8.0 * u.data_mb / e.cloud_mbps
             + z.tflop[model] / e.cloud_gpu_tflops)
    ok = (delay <= u.deadline_s) & (acc >= u.acc_req)
    revenue = u.rate * u.price * ok
    cost = u.rate * (e.cloud_fee_per_tflop * z.tflop[model] + e.cloud_transfer_per_mb * u.data_mb)
    payoff = revenue + u.rate * (e.gamma * acc - e.beta * delay) - cost
    return CloudOption(delay, acc, payoff, cost, revenue, ok)


def _candidates(inst: Instance) -> Candidates:
    """Enumerate (user, reachable cloudlet, accurate-enough model) triples that beat the cloud.

    Users are processed in chunks so the peak memory follows the kept triples, not every
    (user, cloudlet, model) combination.
    """
    parts = [_candidates_of(inst, np.arange(lo, min(lo + _CHUNK, inst.users.n)))
             for lo in range(0, max(inst.users.n, 1), _CHUNK)]
    return Candidates(*(np.concatenate(cols) for cols in zip(*parts, strict=True)))


def _candidates_of(inst: Instance, who: np.ndarray) -> tuple[np.ndarray, ...]:
    e, u, z, c = inst.economy, inst.users, inst.zoo, inst.cloudlets
    reach = inst.near.shape[1]
    users = np.repeat(who, reach * z.n_models)
    nodes = np.repeat(inst.near[inst.home[who]], z.n_models, axis=1).ravel()
    models = np.tile(np.arange(z.n_models), who.size * reach)
    home = inst.home[users]
    remote = nodes != home
    acc = z.acc[models, u.task[users]]
    delay = (inst.access_s[users] + remote * (e.edge_rtt_s + e.edge_rtt_per_km_s
                                              * inst.dist_km[home, nodes]
                                              + 8.0 * u.data_mb[users] / e.edge_mbps)
             + z.tflop[models] / c.gpu_tflops[nodes])
    rate = u.rate[users]
    revenue = rate * u.price[users]
    cost = rate * (c.compute_cost[nodes] * z.tflop[models]
                   + remote * e.edge_transfer_per_mb * u.data_mb[users])
    payoff = revenue + rate * (e.gamma * acc - e.beta * delay) - cost
    gain = payoff - inst.cloud.payoff[users]
    keep = (acc >= u.acc_req[users]) & (delay <= u.deadline_s[users]) & (gain > 1e-12)
    load = rate * z.tflop[models]
    keep &= load <= c.compute_tflops[nodes]
    # a model larger than a cloudlet's whole storage can never be cached there: dropping these
    # options changes no integer solution and tightens the LP relaxation (and its rounding)
    keep &= z.model_gb[models] <= c.storage_gb[nodes] + 1e-9
    return (users[keep], nodes[keep], models[keep], delay[keep], acc[keep], gain[keep],
            load[keep], cost[keep], revenue[keep])
