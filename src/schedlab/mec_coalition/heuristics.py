"""Caching heuristics: the resource-aware randomized algorithm, greedy rules, LFU, assignment.

The randomized algorithm (the paper's, in the form we can state and check):

1. Solve the LP relaxation of the ILP in :mod:`schedlab.mec_coalition.ilp` (HiGHS).
2. *Threshold rounding per cloudlet*: draw one U_n ~ Uniform(0, rho] per cloudlet and cache
   model m on n iff x*[n, m] >= U_n. Each model is cached with probability min(1, x*/rho), and
   a shared block b is present iff the largest x* among the models using it clears U_n, so its
   probability is max_m x*[n, m]/rho <= z*[n, b]/rho: the expected storage is at most the LP's
   storage over rho, hence at most S_n/rho. Independent per-model coins would instead make a
   shared block's probability grow with the number of models using it.
3. *Repair (resource-aware)*: while a cloudlet overflows, drop the cached model whose LP value
   per GB freed is lowest; then greedily add models while storage allows.
4. *Assignment*: serve each user from its best cached option while compute capacity lasts.
5. Repeat ``samples`` times with independent U and keep the best.

By Markov's inequality a cloudlet overflows with probability at most 1/rho before repair;
``docs/systems/mec_coalition.md`` states what we prove and what we only measure (the ratio to
the ILP optimum).
"""

from __future__ import annotations

import numpy as np

from schedlab.mec_coalition import ilp
from schedlab.mec_coalition.ilp import Placement
from schedlab.mec_coalition.model import Instance


def held_blocks(inst: Instance, cached: np.ndarray) -> np.ndarray:
    """Blocks present on each cloudlet: the union over its cached models."""
    return (cached.astype(np.int32) @ inst.zoo.blocks.astype(np.int32)) > 0


def storage_used(inst: Instance, cached: np.ndarray, shared: bool = True) -> np.ndarray:
    """GB used per cloudlet, with shared blocks stored once (or every model on its own)."""
    if shared:
        return held_blocks(inst, cached) @ inst.zoo.block_gb
    return cached.astype(float) @ inst.zoo.model_gb


def objective(inst: Instance, cached: np.ndarray, choice: np.ndarray,
              shared: bool = True) -> float:
    """Gain over the all-cloud market minus storage cost: the ILP's objective."""
    served = choice[choice >= 0]
    storage = float(inst.cloudlets.storage_cost @ storage_used(inst, cached, shared))
    return float(inst.cand.gain[served].sum()) - storage


def assign(inst: Instance, idx: np.ndarray, cached: np.ndarray,
           key: str = "gain", exact: bool = False) -> np.ndarray:
    """Route requests: the price- and delay-aware offloading every policy uses by default.

    Each user takes its best cached option among ``idx`` (``key="gain"``: the highest payoff
    gain over the cloud, which prices delay, accuracy, compute and transfer), best options
    first, while compute lasts. When no cloudlet's compute binds (the fast path below) every
    user gets its best option, which is the optimal routing for ``cached``
    (:func:`routing_regret` is then 0); when compute binds and ``exact``, the greedy pass is
    replaced by HiGHS's optimal routing of ``cached`` when that is better (every policy's
    final plan is routed so, :func:`reroute`). ``key="delay"`` is a
    price-blind rule: the lowest-delay cached option (TrimCaching's own serving rule, nearest
    replica first), greedy under compute.
    """
    cand = inst.cand
    idx = np.asarray(idx, dtype=np.int64)
    usable = idx[cached[cand.node[idx], cand.model[idx]]]
    choice = np.full(inst.users.n, -1, dtype=np.int64)
    if usable.size == 0:
        return choice
    if key not in ("gain", "delay"):
        raise ValueError(f"unknown routing key {key!r}")
    score = -cand.gain[usable] if key == "gain" else cand.delay_s[usable]
    order = usable[np.argsort(score, kind="stable")]
    left = inst.cloudlets.compute_tflops.astype(float).copy()
    users, nodes, loads = cand.user[order], cand.node[order], cand.load[order]
    # Fast path: when every user's best option fits, no capacity is ever binding.
    _, first = np.unique(users, return_index=True)
    top = order[first]
    if (np.bincount(cand.node[top], cand.load[top], left.size) <= left + 1e-9).all():
        choice[cand.user[top]] = top
        return choice
    for k in range(order.size):
        u, n = users[k], nodes[k]
        if choice[u] < 0 and loads[k] <= left[n] + 1e-12:
            choice[u] = order[k]
            left[n] -= loads[k]
    if exact and key == "gain":  # compute binds: the optimal routing, if HiGHS finds it
        exact = _route_milp(inst, usable)
        if exact is not None and _routed(inst, exact) > _routed(inst, choice) + 1e-9:
            return exact
    return choice


def reroute(inst: Instance, idx: np.ndarray, place: Placement,
            shared: bool = True) -> Placement:
    """``place`` with its caches routed by :func:`assign` with ``exact=True`` if that is better."""
    choice = assign(inst, idx, place.cached, exact=True)
    if _routed(inst, choice) <= _routed(inst, place.choice) + 1e-9:
        return place
    return Placement(place.cached, choice, objective(inst, place.cached, choice, shared),
                     place.optimal, place.bound, place.solver)


def _routed(inst: Instance, choice: np.ndarray) -> float:
    return float(inst.cand.gain[choice[choice >= 0]].sum())


def _route_milp(inst: Instance, usable: np.ndarray, time_limit: float = 10.0
                ) -> np.ndarray | None:
    """Optimal routing of fixed caches under compute (HiGHS): max gain, one option per user."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    cand = inst.cand
    k = usable.size
    users, urow = np.unique(cand.user[usable], return_inverse=True)
    nodes, nrow = np.unique(cand.node[usable], return_inverse=True)
    rows = np.r_[urow, users.size + nrow]
    a = coo_matrix((np.r_[np.ones(k), cand.load[usable]], (rows, np.r_[np.arange(k),
                                                                        np.arange(k)])),
                   shape=(users.size + nodes.size, k)).tocsr()
    ub = np.r_[np.ones(users.size), inst.cloudlets.compute_tflops[nodes]]
    res = milp(-cand.gain[usable], constraints=LinearConstraint(a, -np.inf, ub),
               integrality=np.ones(k), bounds=Bounds(0, 1),
               options=dict(time_limit=time_limit, mip_rel_gap=1e-9))
    if res.x is None:
        return None
    choice = np.full(inst.users.n, -1, dtype=np.int64)
    picked = usable[res.x > 0.5]
    choice[cand.user[picked]] = picked
    return choice


def routing_regret(inst: Instance, cached: np.ndarray, choice: np.ndarray,
                   label: np.ndarray | None = None) -> float:
    """Payoff/s lost to routing: the optimal routing of ``cached`` minus ``choice``'s gain.

    Usable options = cached on a cloudlet of the user's home coalition (``label[n]``: coalition
    of cloudlet n; None = one grand coalition). The optimum is every user's best usable option
    when compute does not bind, else HiGHS's optimal routing under compute (no incumbent:
    the best-option sum, an upper bound). 0 means ``choice`` is an optimal routing.
    """
    cand = inst.cand
    ok = cached[cand.node, cand.model]
    if label is not None:
        ok &= label[cand.node] == label[inst.home[cand.user]]
    usable = np.nonzero(ok)[0]
    best = np.zeros(inst.users.n)
    np.maximum.at(best, cand.user[usable], cand.gain[usable])
    top = usable[np.isclose(cand.gain[usable], best[cand.user[usable]], rtol=0, atol=1e-12)]
    top = top[np.unique(cand.user[top], return_index=True)[1]]
    bound = float(best.sum())
    load = np.bincount(cand.node[top], cand.load[top], inst.cloudlets.n)
    if (load > inst.cloudlets.compute_tflops + 1e-9).any():
        exact = _route_milp(inst, usable)
        if exact is not None:
            bound = _routed(inst, exact)
    return max(bound - _routed(inst, choice), 0.0)


def covered_rate(inst: Instance, idx: np.ndarray, cached: np.ndarray) -> float:
    """Request rate of users with some cached option in ``idx`` (TrimCaching's hit objective)."""
    cand = inst.cand
    idx = np.asarray(idx, dtype=np.int64)
    users = np.unique(cand.user[idx[cached[cand.node[idx], cand.model[idx]]]])
    return float(inst.users.rate[users].sum())


def greedy_cache(inst: Instance, idx: np.ndarray, weight: np.ndarray | None = None,
                 start: np.ndarray | None = None, use_cost: bool = True,
                 shared: bool = True, per_gb: bool = True) -> np.ndarray:
    """Add the (cloudlet, model) with the best marginal value per marginal GB until none fits.

    ``weight`` per candidate (default: its payoff gain). With the rate as weight, no storage
    cost and ``shared=True`` this is the TrimCaching greedy (hit ratio with parameter sharing).
    ``per_gb=False`` ranks by marginal value alone (the other half of the classical
    best-of-two greedy for knapsack-constrained coverage).
    """
    cand, zoo = inst.cand, inst.zoo
    idx = np.asarray(idx, dtype=np.int64)
    cached = np.zeros((inst.cloudlets.n, zoo.n_models), dtype=bool) if start is None \
        else start.copy()
    if idx.size == 0:
        return cached
    w = cand.gain[idx] if weight is None else np.asarray(weight, dtype=float)
    nodes, local = np.unique(cand.node[idx], return_inverse=True)
    users, ul = np.unique(cand.user[idx], return_inverse=True)
    M = zoo.n_models
    pair = local * M + cand.model[idx]
    sized = zoo.blocks * zoo.block_gb  # [M, B]
    storage, price = inst.cloudlets.storage_gb[nodes], inst.cloudlets.storage_cost[nodes]
    sub = cached[nodes]
    best = _best_per_user(np.where(sub[local, cand.model[idx]], w, 0.0), ul, users.size)
    while True:
        held = (sub.astype(np.int32) @ zoo.blocks.astype(np.int32)) > 0
        if shared:
            used = held @ zoo.block_gb
            extra = zoo.model_gb[None, :] - held.astype(float) @ sized.T
        else:
            used = sub.astype(float) @ zoo.model_gb
            extra = np.broadcast_to(zoo.model_gb, sub.shape)
        gains = np.bincount(pair, np.maximum(w - best[ul], 0.0), nodes.size * M)
        net = gains.reshape(nodes.size, M) - (price[:, None] * extra if use_cost else 0.0)
        ok = ~sub & (net > 1e-12) & (extra <= (storage - used)[:, None] + 1e-9)
        if not ok.any():
            break
        score = np.where(ok, net / np.maximum(extra, 1e-2) if per_gb else net, -np.inf)
        n, m = np.unravel_index(int(np.argmax(score)), score.shape)
        sub[n, m] = True
        hit = pair == n * M + m
        np.maximum.at(best, ul[hit], w[hit])
    cached[nodes] = sub
    return cached


def _best_per_user(values: np.ndarray, ul: np.ndarray, n_users: int) -> np.ndarray:
    best = np.zeros(n_users)
    np.maximum.at(best, ul, values)
    return best


def lfu_cache(inst: Instance, idx: np.ndarray) -> np.ndarray:
    """Popularity caching: each cloudlet stores its most requested models, whole, until full."""
    cand, zoo = inst.cand, inst.zoo
    idx = np.asarray(idx, dtype=np.int64)
    cached = np.zeros((inst.cloudlets.n, zoo.n_models), dtype=bool)
    rate = inst.users.rate[cand.user[idx]]
    popularity = np.zeros((inst.cloudlets.n, zoo.n_models))
    np.add.at(popularity, (cand.node[idx], cand.model[idx]), rate)
    for n in np.unique(cand.node[idx]):
        free = inst.cloudlets.storage_gb[n]
        for m in np.argsort(-popularity[n], kind="stable"):
            if popularity[n, m] <= 0:
                break
            if zoo.model_gb[m] <= free + 1e-9:
                cached[n, m] = True
                free -= zoo.model_gb[m]
    return cached


def randomized_rounding(inst: Instance, idx: np.ndarray, seed: int, samples: int = 8,
                        rho: float = 1.0) -> Placement:
    """LP relaxation, per-cloudlet threshold rounding, repair, augmentation; best of samples."""
    idx = np.asarray(idx, dtype=np.int64)
    if idx.size == 0:
        return Placement.empty(inst)
    lp_place, y, x, pairs = ilp.solve(inst, idx, relax=True)
    rng = np.random.default_rng(seed)
    value_of_pair = _lp_value_per_pair(inst, idx, y, pairs)
    frac = np.zeros((inst.cloudlets.n, inst.zoo.n_models))
    frac[pairs[:, 0], pairs[:, 1]] = x
    best = Placement.empty(inst)
    best.value = -np.inf
    for _ in range(max(1, samples)):
        u = rng.uniform(1e-9, 1.0, inst.cloudlets.n) * rho
        cached = (frac >= u[:, None]) & (frac > 1e-9)
        cached = _repair(inst, cached, value_of_pair)
        cached = greedy_cache(inst, idx, start=cached)
        choice = assign(inst, idx, cached)
        cached &= used_pairs(inst, choice, cached.shape)  # unused models only cost storage
        value = objective(inst, cached, choice)
        if value > best.value:
            best = Placement(cached, choice, value)
    best.bound = lp_place.value if lp_place.optimal else float("nan")
    best.solver = lp_place.solver  # the LP relaxation's HiGHS report
    return best


def _lp_value_per_pair(inst: Instance, idx: np.ndarray, y: np.ndarray,
                       pairs: np.ndarray) -> np.ndarray:
    value = np.zeros((inst.cloudlets.n, inst.zoo.n_models))
    np.add.at(value, (inst.cand.node[idx], inst.cand.model[idx]), y * inst.cand.gain[idx])
    return value


def _repair(inst: Instance, cached: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Drop the least valuable model per GB freed until every cloudlet fits its storage."""
    over = np.nonzero(storage_used(inst, cached) > inst.cloudlets.storage_gb + 1e-9)[0]
    for n in over:
        row = cached[n].copy()
        while True:
            held = (row.astype(np.int32) @ inst.zoo.blocks.astype(np.int32)) > 0
            if held @ inst.zoo.block_gb <= inst.cloudlets.storage_gb[n] + 1e-9:
                break
            models = np.nonzero(row)[0]
            freed = np.array([_freed_gb(inst, row, m) for m in models])
            m = models[int(np.argmin(value[n, models] / np.maximum(freed, 1e-3)))]
            row[m] = False
        cached[n] = row
    return cached


def _freed_gb(inst: Instance, row: np.ndarray, m: int) -> float:
    others = row.copy()
    others[m] = False
    still = (others.astype(np.int32) @ inst.zoo.blocks.astype(np.int32)) > 0
    return float(inst.zoo.block_gb[inst.zoo.blocks[m] & ~still].sum())


def used_pairs(inst: Instance, choice: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    used = np.zeros(shape, dtype=bool)
    t = choice[choice >= 0]
    used[inst.cand.node[t], inst.cand.model[t]] = True
    return used
