"""The Exploratory Job Placement Problem (EJPP): an exact ILP and the threshold-guided heuristic.

CouchSurfer (paper 06) places waiting exploratory jobs as surfers on GPUs that deterministic
hosts already hold. An instance is a snapshot: per GPU its node, host utilisation and memory,
and whether its surfer slot is free; per job its GPU count, utilisation and memory. A plan maps
a job to GPUs of *one* node (gang). Its value is ``W * placed + sum(gang rate)`` where a gang
surfer runs at the rate of its slowest GPU and ``W = jobs + 1`` makes "place one more job"
worth more than any rate gain, because queuing latency is what EJPP minimises.

* :func:`solve_ilp` — exact, via HiGHS (``scipy.optimize.milp``); for small clusters.
* :func:`place_threshold` — the paper's fast algorithm: filter GPUs by thresholds on host
  utilisation, memory headroom and predicted interference, then give each job (FIFO) the node
  whose n-th best surfer rate is highest. Vectorised over GPUs: well under 1 ms per decision.
* :func:`brute_force` — enumeration, the reference the ILP is tested against.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.couchsurfer.fusion import FusionParams
from schedlab.couchsurfer.interference import predict_speed

Plan = dict[int, tuple[int, ...]]


@dataclass(frozen=True)
class Thresholds:
    """The threshold-guided algorithm's knobs (why each exists, in the system's doc)."""

    max_host_util: float = 0.9
    mem_headroom_gib: float = 1.0
    max_interference: float = math.inf
    min_surfer_rate: float = 0.2

    def __post_init__(self) -> None:
        if not 0 < self.max_host_util <= 1:
            raise ConfigError("must be in (0, 1]", field="max_host_util")
        if self.mem_headroom_gib < 0 or self.max_interference < 0:
            raise ConfigError("must be non-negative", field="mem_headroom_gib/max_interference")
        if not 0 <= self.min_surfer_rate <= 1:
            raise ConfigError("must be in [0, 1]", field="min_surfer_rate")


@dataclass
class EjppInstance:
    """A placement snapshot: GPU arrays (length G) and job arrays (length E)."""

    gpu_node: np.ndarray
    host_util: np.ndarray
    host_mem: np.ndarray
    has_host: np.ndarray
    slot_free: np.ndarray
    job_gpus: np.ndarray
    job_util: np.ndarray
    job_mem: np.ndarray
    fusion: FusionParams
    thresholds: Thresholds
    gpu_mem: np.ndarray | None = None  # per-GPU memory (GiB); None: fusion.gpu_memory_gib
    mode: str = "jfm"  # fusion mode the surfers run in (jfm, priority, bubble)

    @property
    def n_jobs(self) -> int:
        return int(self.job_gpus.size)

    @property
    def weight(self) -> float:
        return float(self.n_jobs + 1)


def surfer_rates(inst: EjppInstance, e: int) -> np.ndarray:
    """Job e's predicted surfer rate on every GPU; NaN where a threshold or a limit forbids it.

    Mirrors :func:`.fusion.pair_rates` in the instance's mode (``jfm`` on the *predicted*
    interference), vectorised (a test checks they agree). A GPU without a host gives rate 1.
    """
    p = inst.fusion
    u_s = float(inst.job_util[e])
    u_h = inst.host_util
    pred_h = predict_speed(np.maximum(u_h, 1e-9), u_s, p.coef)
    pred_s = predict_speed(u_s, np.maximum(u_h, 1e-9), p.coef)
    plain = p.priority_residual * np.maximum(0.0, 1.0 / pred_h - 1.0)
    if inst.mode == "bubble":  # Hydro: the filler gets the host's idle GPU time
        rate = np.minimum(1.0, p.bubble_efficiency * np.maximum(0.0, 1.0 - u_h))
        slowdown = np.full_like(plain, p.bubble_host_slowdown)
        return _allowed(inst, e, np.where(inst.has_host, rate, 1.0), slowdown)
    if math.isfinite(p.guard) and inst.mode == "jfm":
        with np.errstate(divide="ignore", invalid="ignore"):
            duty = np.where(plain > 0, np.clip(p.guard * (1.0 - p.guard_margin) / plain, 0, 1),
                            1.0)
    else:
        duty = np.ones_like(plain)
    rate = np.minimum(1.0, p.efficiency * duty * pred_s)
    slowdown = plain * duty
    return _allowed(inst, e, np.where(inst.has_host, rate, 1.0), slowdown)


def _allowed(inst: EjppInstance, e: int, rate: np.ndarray, slowdown: np.ndarray) -> np.ndarray:
    """``rate`` where the thresholds and memory allow job e, NaN elsewhere."""
    p, t = inst.fusion, inst.thresholds
    mem, u_h = float(inst.job_mem[e]), inst.host_util
    cap = inst.gpu_mem if inst.gpu_mem is not None else p.gpu_memory_gib
    ok = inst.slot_free & (cap - inst.host_mem - mem >= t.mem_headroom_gib - 1e-9)
    ok &= ~inst.has_host | ((u_h <= t.max_host_util) & (slowdown <= t.max_interference + 1e-12))
    ok &= rate >= t.min_surfer_rate
    return np.where(ok, rate, np.nan)


def best_gang(inst: EjppInstance, e: int, taken: np.ndarray) -> tuple[tuple[int, ...], float]:
    """The n GPUs of one node with the highest n-th best rate for job e (ties: lower GPU id)."""
    rates = surfer_rates(inst, e)
    rates[taken] = np.nan
    n = int(inst.job_gpus[e])
    valid = ~np.isnan(rates)
    if n == 1:
        if not valid.any():
            return (), 0.0
        g = int(np.nanargmax(rates))
        return (g,), float(rates[g])
    best: tuple[tuple[int, ...], float] = ((), 0.0)
    for node in np.unique(inst.gpu_node[valid]):
        ids = np.flatnonzero((inst.gpu_node == node) & valid)
        if ids.size < n:
            continue
        order = ids[np.argsort(-rates[ids], kind="stable")][:n]
        gang_rate = float(rates[order].min())
        if gang_rate > best[1]:
            best = (tuple(int(g) for g in sorted(order)), gang_rate)
    return best


def place_threshold(inst: EjppInstance) -> Plan:
    """Threshold-guided greedy: jobs in queue order, each to its best gang among allowed GPUs."""
    taken = ~inst.slot_free.copy()
    plan: Plan = {}
    for e in range(inst.n_jobs):
        gpus, _ = best_gang(inst, e, taken)
        if gpus:
            plan[e] = gpus
            taken[list(gpus)] = True
    return plan


def evaluate(inst: EjppInstance, plan: Plan) -> float:
    """W * placed + sum of gang rates; -inf for a plan that breaks a constraint."""
    used: set[int] = set()
    value = 0.0
    for e, gpus in plan.items():
        rates = surfer_rates(inst, e)[list(gpus)]
        nodes = {int(inst.gpu_node[g]) for g in gpus}
        if len(gpus) != inst.job_gpus[e] or len(nodes) != 1 or np.isnan(rates).any() \
                or used & set(gpus):
            return -math.inf
        used |= set(gpus)
        value += inst.weight + float(rates.min())
    return value


def solve_ilp(inst: EjppInstance, time_limit: float = 30.0) -> Plan:
    """Optimal EJPP plan by HiGHS. Variables: x[e,g] (allowed pairs), y[e,node], r[e] (rate)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    rates = [surfer_rates(inst, e) for e in range(inst.n_jobs)]
    pairs = [(e, g) for e in range(inst.n_jobs) for g in np.flatnonzero(~np.isnan(rates[e]))]
    nodes = np.unique(inst.gpu_node)
    E, X, N = inst.n_jobs, len(pairs), nodes.size
    if X == 0:
        return {}
    y0, r0 = X, X + E * N
    nvar = r0 + E
    rows: list[tuple[dict[int, float], float, float]] = []
    for e in range(E):  # gang on one node: sum_{g in node} x = n_e * y[e,node]
        for k, node in enumerate(nodes):
            coef = {i: 1.0 for i, (ee, g) in enumerate(pairs)
                    if ee == e and inst.gpu_node[g] == node}
            coef[y0 + e * N + k] = -float(inst.job_gpus[e])
            rows.append((coef, 0.0, 0.0))
        rows.append(({y0 + e * N + k: 1.0 for k in range(N)}, -np.inf, 1.0))
        rows.append(({r0 + e: 1.0, **{y0 + e * N + k: -1.0 for k in range(N)}}, -np.inf, 0.0))
    for g in np.unique([g for _, g in pairs]):  # one surfer per GPU
        rows.append(({i: 1.0 for i, (_, gg) in enumerate(pairs) if gg == g}, -np.inf, 1.0))
    for i, (e, g) in enumerate(pairs):  # r[e] <= rate on every GPU it takes
        rows.append(({r0 + e: 1.0, i: 1.0 - float(rates[e][g])}, -np.inf, 1.0))
    a = lil_matrix((len(rows), nvar))
    for row, (coef, _, _) in enumerate(rows):
        for col, value in coef.items():
            a[row, col] = value
    c = np.zeros(nvar)
    c[y0:r0] = -inst.weight
    c[r0:] = -1.0
    integrality = np.r_[np.ones(r0), np.zeros(E)]
    result = milp(c, constraints=LinearConstraint(a.tocsr(), [r[1] for r in rows],
                                                  [r[2] for r in rows]),
                  integrality=integrality, bounds=Bounds(0, 1),
                  options={"time_limit": time_limit})
    if result.x is None:
        return {}
    plan: Plan = {}
    for i, (e, g) in enumerate(pairs):
        if result.x[i] > 0.5:
            plan.setdefault(e, ())
            plan[e] = (*plan[e], int(g))
    return {e: tuple(sorted(g)) for e, g in plan.items()}


def brute_force(inst: EjppInstance) -> tuple[Plan, float]:
    """Best plan by enumerating every gang choice of every job (tiny instances only)."""
    options: list[list[tuple[int, ...] | None]] = []
    for e in range(inst.n_jobs):
        allowed = np.flatnonzero(~np.isnan(surfer_rates(inst, e)))
        choices: list[tuple[int, ...] | None] = [None]
        for node in np.unique(inst.gpu_node[allowed]):
            on_node = [int(g) for g in allowed if inst.gpu_node[g] == node]
            choices += list(itertools.combinations(on_node, int(inst.job_gpus[e])))
        options.append(choices)
    best_plan: Plan = {}
    best_value = 0.0
    for combo in itertools.product(*options):
        plan = {e: gpus for e, gpus in enumerate(combo) if gpus is not None}
        value = evaluate(inst, plan)
        if value > best_value + 1e-12:
            best_plan, best_value = plan, value
    return best_plan, best_value


def random_instance(rng: np.random.Generator, nodes: int, gpus_per_node: int, jobs: int,
                    fusion: FusionParams | None = None,
                    thresholds: Thresholds | None = None) -> EjppInstance:
    """A seeded snapshot: most GPUs hosted (utilisation and memory as in :mod:`.workloads`)."""
    fusion = fusion or FusionParams()
    g = nodes * gpus_per_node
    has_host = rng.random(g) < 0.85
    return EjppInstance(
        gpu_node=np.repeat(np.arange(nodes), gpus_per_node),
        host_util=np.where(has_host, rng.uniform(0.2, 0.95, g), 0.0),
        host_mem=np.where(has_host, rng.uniform(4, 28, g), 0.0),
        has_host=has_host,
        slot_free=rng.random(g) < 0.8,
        job_gpus=rng.choice([1, 1, 1, 2, 4], size=jobs).clip(max=gpus_per_node),
        job_util=rng.uniform(0.2, 0.9, jobs),
        job_mem=rng.uniform(2, 12, jobs),
        fusion=fusion,
        thresholds=thresholds or Thresholds(),
    )
