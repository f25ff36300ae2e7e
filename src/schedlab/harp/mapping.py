"""Mapping static weights onto crossbars: how many copies (replicas) each weight matrix gets.

HARP (../shared/papers/16-harp.md) explores latency-, area- and balanced mappings. Weights are
programmed once and reused by every token (the costly crossbar write is never repeated during
inference); replicating a matrix r times lets r tokens use it at once, so the op's pipeline
interval falls from t to t/r at r times its crossbars. The choice is an ILP solved with HiGHS
(``scipy.optimize.milp``):

    x[i,c] in {0,1}: op i gets c copies;  sum_c x[i,c] = 1
    T >= sum_c (t_i / c) x[i,c]            (T: the pipeline's bottleneck interval)
    T >= T_digital                         (digital units' share of every row)
    sum_{i,c} xb_i c x[i,c] <= crossbar budget
    minimise  w_T T / T_1 + w_A A / A_1    (normalised by the one-copy mapping)

with (w_T, w_A) = (1, 1e-3) for latency and (1e-3, 1) for area; balanced is the latency
objective under a tighter budget of ``BALANCED_AREA`` (2x) the one-copy area, i.e. the fastest
pipeline that at most doubles the chip's crossbars. Where the
ILP grows past ``ILP_MAX_VARIABLES`` the documented greedy heuristic is used instead: start at
one copy everywhere and keep giving the bottleneck op its next copy count while the budget
allows and the objective improves. :func:`sweep_levels` solves the same problem exactly by
enumerating bottleneck levels; the tests check all three against brute force.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.core.registry import lookup
from schedlab.harp.arch import ArchConfig
from schedlab.harp.costs import analog_row_ns, digital_row_cycles, row_share, tiling
from schedlab.harp.workloads import Workload

ILP_MAX_VARIABLES = 20_000
WEIGHTS: dict[str, tuple[float, float]] = {
    "latency": (1.0, 1e-3), "area": (1e-3, 1.0), "balanced": (1.0, 1e-3),
}
#: a balanced mapping is the fastest one within this multiple of the minimum area
BALANCED_AREA = 2.0


@dataclass(frozen=True)
class Problem:
    """The mapping problem in plain arrays: per static op its interval and crossbars per copy."""

    ops: tuple[str, ...]
    interval: np.ndarray  # ns per token for one copy
    crossbars: np.ndarray  # crossbars per copy
    candidates: tuple[int, ...]
    budget: int
    floor: float  # digital bound on the interval (ns per token)


@dataclass(frozen=True)
class Mapping:
    """Copies per static op, and what they cost."""

    strategy: str
    solver: str
    replicas: dict[str, int]
    crossbars: int
    bottleneck_ns: float

    def replicas_of(self, op: str) -> int:
        return self.replicas.get(op, 1)


def problem(work: Workload, arch: ArchConfig) -> Problem:
    """Build the mapping problem for a workload on an architecture; checks that it fits."""
    static = work.static_ops
    interval = np.array([analog_row_ns(op, arch) * row_share(op, work.tokens) for op in static])
    xbars = np.array([tiling(op, arch).crossbars for op in static], dtype=np.int64)
    if xbars.sum() > arch.max_crossbars:
        raise ConfigError(
            f"{work.name} needs {int(xbars.sum())} crossbars for one copy of its weights but the "
            f"architecture has {arch.max_crossbars}", field="max_crossbars",
            hint="raise max_crossbars or use larger crossbars")
    digital = 0.0
    for op in work.ops:
        if op.kind != "static":
            base, grow = digital_row_cycles(op, arch, data_parallel=op.kind == "dynamic")
            share = row_share(op, work.tokens)
            digital += (base + grow * (work.tokens + 1) / 2) * share * arch.digital.cycle_ns
    return Problem(tuple(o.name for o in static), interval, xbars,
                   tuple(range(1, arch.max_replication + 1)), arch.max_crossbars,
                   digital / arch.digital.count)


def _objective(prob: Problem, strategy: str) -> Callable[[float, float], float]:
    w_t, w_a = WEIGHTS[strategy]
    t1 = max(float(prob.interval.max()), prob.floor)
    a1 = float(prob.crossbars.sum())
    return lambda t, a: w_t * t / t1 + w_a * a / a1


def evaluate(prob: Problem, copies: np.ndarray) -> tuple[float, int]:
    """(bottleneck interval, crossbars) of a copy vector."""
    bottleneck = max(float((prob.interval / copies).max()), prob.floor)
    return bottleneck, int((prob.crossbars * copies).sum())


def solve_ilp(prob: Problem, strategy: str) -> np.ndarray:
    """Optimal copies by MILP (HiGHS through scipy.optimize.milp).

    Ops with the same (interval, crossbars) are one variable group weighted by their count:
    for a fixed bottleneck every such op needs the same copies, so grouping loses nothing and
    removes the layer symmetry that would otherwise make branch-and-bound crawl.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import lil_matrix

    keys = np.stack([prob.interval, prob.crossbars.astype(float)], axis=1)
    groups, member, count = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    member = member.ravel()
    interval, xbars = groups[:, 0], groups[:, 1] * count
    n, cands = len(groups), np.array(prob.candidates, dtype=float)
    m = len(cands)
    w_t, w_a = WEIGHTS[strategy]
    t1 = max(float(prob.interval.max()), prob.floor)
    a1 = float(prob.crossbars.sum())
    nvar = n * m + 1  # x[g, c] row-major, then T
    cost = np.zeros(nvar)
    cost[:-1] = w_a * np.outer(xbars, cands).ravel() / a1
    cost[-1] = w_t / t1
    rows = lil_matrix((2 * n + 1, nvar))
    for i in range(n):
        rows[i, i * m:(i + 1) * m] = 1.0  # one choice per group
        rows[n + i, i * m:(i + 1) * m] = -interval[i] / cands  # T - t_i/c >= 0
        rows[n + i, nvar - 1] = 1.0
    rows[2 * n, :-1] = np.outer(xbars, cands).ravel()
    lower = np.r_[np.ones(n), np.zeros(n), -np.inf]
    upper = np.r_[np.ones(n), np.full(n, np.inf), _budget(prob, strategy)]
    integrality = np.r_[np.ones(n * m), 0]
    bounds = Bounds(np.r_[np.zeros(n * m), prob.floor], np.r_[np.ones(n * m), np.inf])
    res = milp(cost, constraints=LinearConstraint(rows.tocsr(), lower, upper),
               integrality=integrality, bounds=bounds, options={"time_limit": 20.0})
    if res.x is None:
        raise ConfigError(f"mapping ILP found no solution: {res.message}", field="max_crossbars")
    choice = res.x[:-1].reshape(n, m).argmax(axis=1)
    return cands[choice].astype(np.int64)[member]


def _budget(prob: Problem, strategy: str) -> float:
    """The crossbar budget; balanced mappings may use at most BALANCED_AREA x the minimum."""
    if strategy == "balanced":
        return min(prob.budget, BALANCED_AREA * float(prob.crossbars.sum()))
    return prob.budget


def sweep_levels(prob: Problem, strategy: str) -> np.ndarray:
    """Exact optimum by enumerating bottleneck levels T = t_i / c (and the digital floor).

    For a fixed T the cheapest mapping gives each op the fewest copies with t_i / c <= T, and
    both objective terms grow with T's area, so the best level is the best mapping.
    """
    cands = np.array(prob.candidates)
    objective = _objective(prob, strategy)
    levels = np.unique(np.r_[np.outer(prob.interval, 1.0 / cands).ravel(), prob.floor])
    best, best_copies = np.inf, np.ones(len(prob.ops), dtype=np.int64)
    for level in levels[(levels >= prob.floor) & (levels > 0)]:
        with np.errstate(over="ignore"):  # a tiny level needs more copies than any candidate
            ratio = np.ceil(prob.interval / level - 1e-9)
        if not np.isfinite(ratio).all() or ratio.max() > cands.max():
            continue
        need = ratio.astype(np.int64)
        copies = cands[np.searchsorted(cands, need)]
        t, a = evaluate(prob, copies)
        value = objective(t, a)
        if a <= _budget(prob, strategy) and value < best - 1e-12:
            best, best_copies = value, copies
    return best_copies


def greedy(prob: Problem, strategy: str) -> np.ndarray:
    """Heuristic: give the bottleneck op its next copy count while that pays and fits."""
    cands = list(prob.candidates)
    objective = _objective(prob, strategy)
    copies = np.full(len(prob.ops), cands[0], dtype=np.int64)
    current = objective(*evaluate(prob, copies))
    best, best_copies = current, copies.copy()
    while True:
        worst = int(np.argmax(prob.interval / copies))
        slower = copies[worst]
        if slower == cands[-1]:
            break
        copies[worst] = cands[cands.index(slower) + 1]
        t, a = evaluate(prob, copies)
        if a > _budget(prob, strategy):
            break
        current = objective(t, a)
        if current < best - 1e-12:  # keep climbing through plateaus of tied bottlenecks
            best, best_copies = current, copies.copy()
    return best_copies


def brute_force(prob: Problem, strategy: str) -> np.ndarray:
    """Reference optimum over every copy vector; only for tiny problems (tests)."""
    objective = _objective(prob, strategy)
    best, best_copies = np.inf, None
    for combo in itertools.product(prob.candidates, repeat=len(prob.ops)):
        copies = np.array(combo)
        t, a = evaluate(prob, copies)
        if a <= _budget(prob, strategy) and objective(t, a) < best - 1e-12:
            best, best_copies = objective(t, a), copies
    if best_copies is None:
        raise ConfigError("no mapping fits the crossbar budget", field="max_crossbars")
    return best_copies


SOLVERS: dict[str, Callable[[Problem, str], np.ndarray]] = {
    "ilp": solve_ilp, "levels": sweep_levels, "greedy": greedy, "brute-force": brute_force,
}


class Mapper(Protocol):
    """Chooses the copies of every static weight for a workload on an architecture."""

    name: str

    def map(self, work: Workload, arch: ArchConfig) -> Mapping: ...


@dataclass(frozen=True)
class StrategyMapper:
    """One mapping strategy (a weighting of latency vs area) with a solver."""

    name: str
    solver: str = "auto"

    def map(self, work: Workload, arch: ArchConfig) -> Mapping:
        prob = problem(work, arch)
        solver = self.solver
        if solver == "auto":
            size = len(prob.ops) * len(prob.candidates)
            solver = "ilp" if size <= ILP_MAX_VARIABLES else "greedy"
        if solver not in SOLVERS:
            raise UnknownNameError("solver", solver, sorted(SOLVERS))
        copies = SOLVERS[solver](prob, self.name)
        bottleneck, xbars = evaluate(prob, copies)
        return Mapping(self.name, solver, dict(zip(prob.ops, (int(c) for c in copies),
                                                   strict=True)), xbars, bottleneck)


MAPPERS: dict[str, Callable[..., Mapper]] = {
    name: (lambda name=name, **kw: StrategyMapper(name, **kw)) for name in WEIGHTS
}


def make_mapper(strategy: str, solver: str = "auto") -> Mapper:
    return lookup(MAPPERS, "mapping strategy", strategy)(solver=solver)
