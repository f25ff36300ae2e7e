"""The joint caching + offloading problem: the paper's NLIP, its exact ILP, and HiGHS.

NLIP (per coalition S; x[n,m] = cloudlet n caches model m, y[u,n,m] = user u is offloaded to
model m on cloudlet n, D[u,n,m] = payoff gain over the cloud, c_n = storage price, s_b = block
size, f = TFLOP/s a request stream puts on n)::

    max  sum_{u,n,m} D[u,n,m] * y[u,n,m] * x[n,m]
         - sum_n c_n * sum_b s_b * (1 - prod_{m ∋ b} (1 - x[n,m]))          (union of blocks)
    s.t. sum_{n,m} y[u,n,m] <= 1                              (one server, else the cloud)
         sum_b s_b * (1 - prod_{m ∋ b} (1 - x[n,m])) <= S_n              (storage, shared)
         sum_{u,m} f[u,m] * y[u,n,m] * x[n,m] <= C_n                      (compute)
         x, y binary

Two kinds of products make it non-linear. The ILP replaces each, exactly for binaries:

1. ``w = y * x`` (served only if cached): McCormick gives w <= y, w <= x, w >= x + y - 1.
   y appears nowhere except through w, so y is dropped and w renamed y with ``y <= x``.
2. ``z[n,b] = 1 - prod_{m ∋ b}(1 - x[n,m])`` (block b is on n iff some cached model uses it)
   is the OR of binaries: ``z >= x[n,m]`` for every m containing b and ``z <= sum_m x[n,m]``.

Storage and its cost become linear in z, compute linear in y. Only triples in
:class:`~schedlab.mec_coalition.model.Candidates` (feasible, profitable) get a y variable, and
only (n, m) pairs some triple uses get an x: other variables are zero at every optimum.

Solver honesty: every :func:`solve` result carries a :class:`SolveInfo` (HiGHS's status, the
MIP gap, the time limit, the dual bound and whether optimality was proven). A time-limited
answer is *not* the optimum and says so. Before a model is built its size is estimated
(:func:`estimate`): a model above ``max_nonzeros`` (default 5 M constraint-matrix non-zeros,
about 2 GB of HiGHS memory at the ~400 B per non-zero we measured) is refused with a one-line
:class:`~schedlab.core.errors.BadInputError` instead of growing until the machine kills it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_matrix

from schedlab.core.errors import BadInputError
from schedlab.mec_coalition.model import Instance

#: constraint-matrix non-zeros above which :func:`solve` refuses to build the model
MAX_NONZEROS = 5_000_000
#: HiGHS memory per non-zero (bytes), measured on the 125/50/800 market (MIP with presolve)
BYTES_PER_NONZERO = 400
_STATUS = {0: "optimal", 1: "time or iteration limit", 2: "infeasible", 3: "unbounded",
           4: "other"}


class NoIncumbentError(BadInputError):
    """HiGHS stopped (time limit) before it found any feasible solution."""


@dataclass
class SolveInfo:
    """What HiGHS reported for one solve: status, gap, limit and whether the optimum is proven."""

    status: str
    status_code: int
    proven_optimal: bool
    mip_gap: float  # relative gap |primal - dual| / |primal| (nan for an LP)
    dual_bound: float  # HiGHS's upper bound on the objective (maximisation; nan if unknown)
    time_limit_s: float
    seconds: float
    relaxed: bool
    variables: int
    nonzeros: int
    message: str = ""
    objective: float = float("nan")  # HiGHS's primal objective (what mip_gap and dual_bound
    # refer to: gain over the cloud minus storage cost, not the reported payoff metric)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Placement:
    """A caching + offloading decision: ``cached[n, m]``; ``choice[u]`` = candidate index or -1."""

    cached: np.ndarray
    choice: np.ndarray
    value: float = float("nan")  # objective (gain over the cloud minus storage cost)
    optimal: bool = False
    bound: float = float("nan")  # an upper bound on the optimum when known (the LP's)
    solver: SolveInfo | None = None  # set when HiGHS produced this placement

    @classmethod
    def empty(cls, inst: Instance) -> Placement:
        return cls(np.zeros((inst.cloudlets.n, inst.zoo.n_models), dtype=bool),
                   np.full(inst.users.n, -1, dtype=np.int64), 0.0)


@dataclass
class LPModel:
    """The ILP in matrix form plus the index maps needed to read a solution back."""

    c: np.ndarray
    constraint: LinearConstraint
    idx: np.ndarray  # candidate indices (the y variables)
    pairs: np.ndarray  # [P, 2] (node, model) for the x variables
    n_y: int
    n_x: int


def estimate(inst: Instance, idx: np.ndarray) -> tuple[int, int]:
    """(variables, constraint non-zeros) of the ILP over ``idx``, without building it."""
    cand, zoo, M = inst.cand, inst.zoo, inst.zoo.n_models
    idx = np.asarray(idx, dtype=np.int64)
    pair_key = np.unique(cand.node[idx] * M + cand.model[idx])
    blocks_per_model = zoo.blocks.sum(axis=1)
    inc = int(blocks_per_model[pair_key % M].sum())
    n_z = inc  # upper bound: blocks shared by models on one node are counted once in the model
    return idx.size + pair_key.size + n_z, 4 * idx.size + 3 * inc + 2 * n_z


def check_size(inst: Instance, idx: np.ndarray, max_nonzeros: int = MAX_NONZEROS) -> int:
    """Refuse (one line) a model beyond ``max_nonzeros``; return its estimated non-zeros."""
    variables, nnz = estimate(inst, idx)
    if nnz > max_nonzeros:
        gb = nnz * BYTES_PER_NONZERO / 1e9
        raise BadInputError(
            f"the ILP would have {variables:,} variables and ~{nnz:,} non-zeros (~{gb:.1f} GB "
            f"for HiGHS), above the bound of {max_nonzeros:,} non-zeros "
            f"(~{max_nonzeros * BYTES_PER_NONZERO / 1e9:.1f} GB); use --method rounding or "
            "coalition, or a smaller market", field="ilp")
    return nnz


def build_ilp(inst: Instance, idx: np.ndarray) -> LPModel:
    """The linearised model over candidate triples ``idx`` (all of one coalition's)."""
    cand, zoo, M = inst.cand, inst.zoo, inst.zoo.n_models
    idx = np.asarray(idx, dtype=np.int64)
    t_node, t_model, t_user = cand.node[idx], cand.model[idx], cand.user[idx]
    pair_key, t_pair = np.unique(t_node * M + t_model, return_inverse=True)
    pairs = np.column_stack([pair_key // M, pair_key % M])
    p_rows, b_cols = np.nonzero(zoo.blocks[pairs[:, 1]])  # (pair, block) incidences
    nb_key, inc_q = np.unique(pairs[p_rows, 0] * zoo.blocks.shape[1] + b_cols,
                              return_inverse=True)
    q_node, q_block = nb_key // zoo.blocks.shape[1], nb_key % zoo.blocks.shape[1]
    n_y, n_x, n_z = idx.size, len(pairs), len(nb_key)
    X0, Z0 = n_y, n_y + n_x
    users, t_urow = np.unique(t_user, return_inverse=True)
    nodes, q_nrow = np.unique(q_node, return_inverse=True)
    t_nrow = np.searchsorted(nodes, t_node)
    rows, cols, vals, ub = [], [], [], []
    r = 0

    def add(rr, cc, vv, bound):
        nonlocal r
        rows.append(np.asarray(rr) + r)
        cols.append(np.asarray(cc))
        vals.append(np.asarray(vv, dtype=float))
        ub.append(np.asarray(bound, dtype=float))
        r += len(bound)

    ones_t, ones_i = np.ones(n_y), np.ones(len(p_rows))
    add(t_urow, np.arange(n_y), ones_t, np.ones(len(users)))  # one option per user
    add(np.r_[np.arange(n_y), np.arange(n_y)], np.r_[np.arange(n_y), X0 + t_pair],
        np.r_[ones_t, -ones_t], np.zeros(n_y))  # y <= x
    inc = np.arange(len(p_rows))
    add(np.r_[inc, inc], np.r_[X0 + p_rows, Z0 + inc_q], np.r_[ones_i, -ones_i],
        np.zeros(len(p_rows)))  # x <= z
    add(np.r_[np.arange(n_z), inc_q], np.r_[Z0 + np.arange(n_z), X0 + p_rows],
        np.r_[np.ones(n_z), -ones_i], np.zeros(n_z))  # z <= sum x (exact OR)
    add(q_nrow, Z0 + np.arange(n_z), zoo.block_gb[q_block],
        inst.cloudlets.storage_gb[nodes])  # storage
    add(t_nrow, np.arange(n_y), cand.load[idx], inst.cloudlets.compute_tflops[nodes])
    A = coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                   shape=(r, n_y + n_x + n_z)).tocsr()
    c = np.r_[-cand.gain[idx], np.zeros(n_x),
              inst.cloudlets.storage_cost[q_node] * zoo.block_gb[q_block]]
    return LPModel(c, LinearConstraint(A, -np.inf, np.concatenate(ub)), idx, pairs, n_y, n_x)


def solve(inst: Instance, idx: np.ndarray, relax: bool = False, time_limit: float = 60.0,
          max_nonzeros: int = MAX_NONZEROS
          ) -> tuple[Placement, np.ndarray, np.ndarray, np.ndarray]:
    """Solve the ILP (or its LP relaxation) with HiGHS (``scipy.optimize.milp``).

    Returns the placement (empty when ``relax``: read the fractional y and x instead, whose
    objective is ``value``), the raw y and x vectors and the (node, model) pair of each x.
    ``placement.solver`` says what HiGHS reported; ``placement.optimal`` is True only when
    HiGHS proved optimality (status 0) - a time-limited answer is a feasible plan, not the
    optimum.
    """
    if time_limit <= 0:
        raise BadInputError(f"must be positive, got {time_limit}", field="time_limit")
    if len(idx) == 0:
        place = Placement.empty(inst)
        place.optimal = True
        place.solver = SolveInfo("optimal (empty model)", 0, True, 0.0, 0.0, time_limit, 0.0,
                                 relax, 0, 0, objective=0.0)
        return place, np.zeros(0), np.zeros(0), np.zeros((0, 2), dtype=int)
    nnz = check_size(inst, idx, max_nonzeros)
    start = time.perf_counter()
    lp = build_ilp(inst, idx)
    integrality = np.zeros(lp.c.size) if relax else np.ones(lp.c.size)
    res = milp(lp.c, constraints=lp.constraint, integrality=integrality, bounds=Bounds(0, 1),
               options=dict(time_limit=time_limit, mip_rel_gap=1e-9, presolve=True))
    seconds = time.perf_counter() - start
    if res.x is None:
        raise NoIncumbentError(f"HiGHS found no solution within {time_limit:g} s "
                            f"(status {res.status}: {res.message})", field="ilp")
    gap = getattr(res, "mip_gap", None)
    dual = getattr(res, "mip_dual_bound", None)
    info = SolveInfo(
        status=_STATUS.get(int(res.status), str(res.status)), status_code=int(res.status),
        proven_optimal=int(res.status) == 0,
        mip_gap=float("nan") if relax or gap is None else float(gap),
        dual_bound=float("nan") if relax or dual is None else -float(dual),
        time_limit_s=float(time_limit), seconds=seconds, relaxed=relax,
        variables=int(lp.c.size), nonzeros=nnz, message=str(res.message),
        objective=-float(res.fun))
    y, x = res.x[: lp.n_y], res.x[lp.n_y: lp.n_y + lp.n_x]
    place = Placement.empty(inst)
    if not relax:
        chosen = lp.idx[y > 0.5]
        place.choice[inst.cand.user[chosen]] = chosen
        keep = x > 0.5
        place.cached[lp.pairs[keep, 0], lp.pairs[keep, 1]] = True
    place.optimal = info.proven_optimal
    place.solver = info
    place.value = info.objective
    return place, y, x, lp.pairs


def nlip_objective(inst: Instance, cached: np.ndarray, choice: np.ndarray) -> float:
    """Evaluate the NLIP objective literally (products of binaries), for checking the ILP."""
    zoo, cand = inst.zoo, inst.cand
    served = choice >= 0
    t = choice[served]
    gain = float(np.sum(cand.gain[t] * cached[cand.node[t], cand.model[t]]))
    storage = 0.0
    for n in range(inst.cloudlets.n):
        # z_b = 1 - prod_{m ∋ b}(1 - x[n, m]); models without block b contribute a factor 1
        not_held = np.prod(1 - cached[n][:, None] * zoo.blocks, axis=0)
        storage += inst.cloudlets.storage_cost[n] * float(zoo.block_gb @ (1 - not_held))
    return gain - storage


def brute_force(inst: Instance, idx: np.ndarray) -> float:
    """Reference optimum by enumeration (tiny instances only): every cache set, every choice."""
    cand, zoo = inst.cand, inst.zoo
    idx = np.asarray(idx)
    pairs = sorted({(int(cand.node[t]), int(cand.model[t])) for t in idx})
    users = sorted({int(cand.user[t]) for t in idx})
    if len(pairs) > 10 or len(users) > 6:
        raise BadInputError("brute force is for at most 10 (node, model) pairs and 6 users",
                            field="instance")
    options = {u: [-1] + [int(t) for t in idx if cand.user[t] == u] for u in users}
    best = 0.0
    for mask in range(1 << len(pairs)):
        cached = np.zeros((inst.cloudlets.n, zoo.n_models), dtype=bool)
        for k, (n, m) in enumerate(pairs):
            cached[n, m] = bool(mask >> k & 1)
        held = (cached.astype(int) @ zoo.blocks.astype(int)) > 0
        if ((held @ zoo.block_gb) > inst.cloudlets.storage_gb + 1e-9).any():
            continue
        storage = float(inst.cloudlets.storage_cost @ (held @ zoo.block_gb))
        usable = {u: [t for t in options[u] if t < 0 or cached[cand.node[t], cand.model[t]]]
                  for u in users}
        for combo in itertools.product(*(usable[u] for u in users)):
            load = np.zeros(inst.cloudlets.n)
            gain = 0.0
            for t in combo:
                if t >= 0:
                    load[cand.node[t]] += cand.load[t]
                    gain += cand.gain[t]
            if (load <= inst.cloudlets.compute_tflops + 1e-9).all():
                best = max(best, gain - storage)
    return best
