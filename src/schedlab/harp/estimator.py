"""Analytical latency estimate of a plan: vectorised max-plus recurrences, no event queue.

HARP (../shared/papers/16-harp.md) must be "a fast and accurate performance estimator" that can
sit inside design-space exploration or NAS. Instead of replaying events, each stage's item
finish times follow in closed form from its producers' finish times:

* ready time of an item = latest finish among the producer rows it needs — for ``rows`` and
  ``prefix`` the running maximum of producer finishes up to its last row, for ``all`` the
  producer's last finish;
* a stage with ``m`` usable servers (pool capacity, capped by its in-flight limit) serves items
  in row order: ``s[k] = max(ready[k], f[k-m])``, ``f[k] = s[k] + d[k]``;
* a pool shared by several stages (the digital units) is modelled as a fluid: a stage gets
  ``capacity * (1 - rho)`` servers' worth of throughput, where ``rho`` is the share of the
  pool needed, while it is active, by the other stages the pool serves *before* it (a lower
  ``priority``: strict-priority queueing), so its item starts are spaced by at least
  ``d[k] / (capacity * (1 - rho))``. Two passes refine the activity windows. (Counting every
  other stage, as a first version did, slowed the head of a causal pipeline by load that
  the simulator serves after it: +43 % on GPT-2 small where the digital pool is busy.)
* work conservation: a stage's last item cannot finish before its pool has done all work
  queued on it so far (stages on one pool form a chain in a transformer block).

What it gives up against the simulator (:mod:`schedlab.harp.simulator`): exact priorities on
shared pools, and items that finish out of row order. The tests and the headline experiment
measure the resulting error on every built-in model. The per-item recurrence is one
Numba-compiled loop over flat arrays (one pass over ~15k items for BERT-base), which is what
keeps an estimate in the low milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedlab.harp.plan import Plan


def _njit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compile with Numba where installed (cached on disk); plain Python otherwise."""
    try:
        import numba
    except ImportError:  # pragma: no cover - numba ships with schedlab[mcs]/[all]
        return fn
    return numba.njit(cache=True, nogil=True)(fn)

PASSES = 2
MAX_SHARE = 0.95


@dataclass
class Estimate:
    """Latency of a plan, and each pool's busy time (for utilisation)."""

    latency_ns: float
    stage_start: np.ndarray
    stage_finish: np.ndarray
    busy_ns: dict[str, float]


@_njit
def _recurrence(stage_ptr, dur, servers, fluid, dep_ptr, dep_src, dep_all, cover_ptr, cover,
                pool_of, pool_cap, finish, running, start, end):  # pragma: no cover - jitted
    """One pass over all stages in topological order (see the module docstring)."""
    pool_start = np.full(len(pool_cap), -1.0)
    pool_work = np.zeros(len(pool_cap))
    for u in range(len(stage_ptr) - 1):
        lo, hi = stage_ptr[u], stage_ptr[u + 1]
        ready = np.zeros(hi - lo)
        for di in range(dep_ptr[u], dep_ptr[u + 1]):
            base = stage_ptr[dep_src[di]]
            if dep_all[di]:
                last = running[stage_ptr[dep_src[di] + 1] - 1]
                for k in range(hi - lo):
                    ready[k] = max(ready[k], last)
            else:
                c0 = cover_ptr[di]
                for k in range(hi - lo):
                    ready[k] = max(ready[k], running[base + cover[c0 + k]])
        srv, fl, prev, peak, work = servers[u], fluid[u], -1.0, 0.0, 0.0
        for k in range(hi - lo):
            s = ready[k]
            if k >= srv:
                s = max(s, finish[lo + k - srv])
            if k > 0:
                s = max(s, prev + dur[lo + k] / fl)
            prev = s
            finish[lo + k] = s + dur[lo + k]
            peak = max(peak, finish[lo + k])
            running[lo + k] = peak
            work += dur[lo + k]
        p = pool_of[u]
        if pool_start[p] < 0:
            pool_start[p] = ready[0]
        pool_work[p] += work
        bound = pool_start[p] + pool_work[p] / pool_cap[p]  # work conservation on the pool
        if bound > finish[hi - 1]:
            finish[hi - 1] = bound
            running[hi - 1] = max(running[hi - 1], bound)
        start[u], end[u] = ready[0], running[hi - 1]


@dataclass
class _Flat:
    """A plan as flat arrays for the compiled recurrence; built once per estimate."""

    stage_ptr: np.ndarray
    dur: np.ndarray
    servers: np.ndarray
    dep_ptr: np.ndarray
    dep_src: np.ndarray
    dep_all: np.ndarray
    cover_ptr: np.ndarray
    cover: np.ndarray
    pool_of: np.ndarray
    pool_cap: np.ndarray
    work: np.ndarray


def _flatten(plan: Plan) -> _Flat:
    pools = list(plan.pools)
    durations = [s.durations() for s in plan.stages]
    sizes = np.array([len(d) for d in durations], dtype=np.int64)
    dep_src, dep_all, covers, cover_ptr = [], [], [], [0]
    for stage in plan.stages:
        for dep in stage.deps:
            dep_src.append(dep.stage)
            dep_all.append(dep.pattern == "all")
            if dep.pattern == "all":
                covers.append(np.zeros(0, np.int64))
            else:
                bounds = plan.stages[dep.stage].bounds
                covers.append(np.searchsorted(bounds, stage.bounds[1:], "left") - 1)
            cover_ptr.append(cover_ptr[-1] + len(covers[-1]))
    return _Flat(
        stage_ptr=np.r_[0, np.cumsum(sizes)].astype(np.int64),
        dur=np.concatenate(durations),
        servers=np.array([min(plan.pools[s.pool], s.max_inflight or 1 << 30)
                          for s in plan.stages], dtype=np.int64),
        dep_ptr=np.r_[0, np.cumsum([len(s.deps) for s in plan.stages])].astype(np.int64),
        dep_src=np.array(dep_src, dtype=np.int64),
        dep_all=np.array(dep_all, dtype=np.bool_),
        cover_ptr=np.array(cover_ptr, dtype=np.int64),
        cover=np.concatenate(covers).astype(np.int64) if covers else np.zeros(0, np.int64),
        pool_of=np.array([pools.index(s.pool) for s in plan.stages], dtype=np.int64),
        pool_cap=np.array([float(plan.pools[p]) for p in pools]),
        work=np.array([d.sum() for d in durations]),
    )


def _shares(plan: Plan, start: np.ndarray, end: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Per stage, the share of its pool the other stages on that pool need while it runs."""
    share = np.zeros(len(plan.stages))
    pools = np.array([s.pool for s in plan.stages])
    for pool, capacity in plan.pools.items():
        members = np.flatnonzero(pools == pool)
        if len(members) < 2:
            continue
        s, e, w = start[members], end[members], work[members]
        span = np.maximum(e - s, 1e-9)
        overlap = np.clip(np.minimum(e[:, None], e[None, :]) - np.maximum(s[:, None],
                                                                        s[None, :]), 0, None)
        demand = overlap * (w / span)[None, :]  # others' work falling in my window
        prio = np.array([plan.stages[m].priority for m in members])
        demand *= prio[None, :] < prio[:, None]  # only stages the pool serves before mine
        np.fill_diagonal(demand, 0.0)
        share[members] = np.minimum(demand.sum(axis=1) / (capacity * span), MAX_SHARE)
    return share


def estimate(plan: Plan) -> Estimate:
    """Estimated end-to-end latency of one inference under ``plan``."""
    flat = _flatten(plan)
    n = len(plan.stages)
    capacity = flat.pool_cap[flat.pool_of]
    share = np.zeros(n)
    start, end = np.zeros(n), np.zeros(n)
    finish, running = np.zeros(len(flat.dur)), np.zeros(len(flat.dur))
    for _ in range(PASSES):
        # an uncontended stage has no fluid limit beyond its integer servers
        fluid = np.where(share > 0, capacity * (1.0 - share), np.inf)
        _recurrence(flat.stage_ptr, flat.dur, flat.servers, fluid,
                    flat.dep_ptr, flat.dep_src, flat.dep_all, flat.cover_ptr, flat.cover,
                    flat.pool_of, flat.pool_cap, finish, running, start, end)
        share = _shares(plan, start, end, flat.work)
    busy: dict[str, float] = dict.fromkeys(plan.pools, 0.0)
    for stage, w in zip(plan.stages, flat.work, strict=True):
        busy[stage.pool] += float(w)
    return Estimate(float(end.max(initial=0.0)), start.copy(), end.copy(), busy)
