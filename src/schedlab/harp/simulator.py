"""Discrete-event simulation of a plan: the reference the analytical estimator is checked against.

HARP (../shared/papers/16-harp.md) is both an estimator and a scheduler; to know how far the
fast estimate can be trusted, this module executes the same plan item by item. Every item waits
for its dataflow dependencies, then for a free server of its pool (and for its stage's in-flight
limit), is picked from the pool's ready queue in the plan's priority order, and holds the server
for its duration. The loop is a plain binary-heap event queue: faster than SimPy processes for
tens of thousands of items and with nothing hidden.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from schedlab.harp.plan import Plan


@dataclass
class Trace:
    """What happened: per-item start/finish, and each pool's busy time."""

    latency_ns: float
    start: np.ndarray
    finish: np.ndarray
    stage_of: np.ndarray
    offsets: np.ndarray
    busy_ns: dict[str, float]


@dataclass
class _Graph:
    offsets: np.ndarray
    stage_of: np.ndarray
    duration: np.ndarray
    remaining: np.ndarray
    succ_ptr: np.ndarray
    succ: np.ndarray
    all_waiters: list[list[int]]
    prefix_waiters: list[list[int]]
    prefix_ptr: dict[tuple[int, int], int]  # (producer, waiter) -> waiter items released


def _rows_edges(plan: Plan, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Explicit item edges for ``rows`` deps: each item waits on producers covering its rows."""
    srcs, dsts = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for u, stage in enumerate(plan.stages):
        lo, hi = stage.bounds[:-1], stage.bounds[1:]
        for dep in stage.deps:
            if dep.pattern != "rows":
                continue
            pb = plan.stages[dep.stage].bounds
            jlo = np.searchsorted(pb, lo, side="right") - 1
            jhi = np.searchsorted(pb, hi, side="left") - 1
            counts = jhi - jlo + 1
            dst = np.repeat(np.arange(stage.items), counts)
            src = np.repeat(jlo, counts) + (np.arange(counts.sum()) - np.repeat(
                np.cumsum(counts) - counts, counts))
            srcs.append(src + offsets[dep.stage])
            dsts.append(dst + offsets[u])
    return np.concatenate(srcs), np.concatenate(dsts)


def _graph(plan: Plan) -> _Graph:
    sizes = np.array([s.items for s in plan.stages], dtype=np.int64)
    offsets = np.r_[0, np.cumsum(sizes)]
    total = int(offsets[-1])
    stage_of = np.repeat(np.arange(len(plan.stages)), sizes)
    duration = np.concatenate([s.durations() for s in plan.stages])
    src, dst = _rows_edges(plan, offsets)
    remaining = np.bincount(dst, minlength=total).astype(np.int64)
    order = np.argsort(src, kind="stable")
    succ = dst[order]
    succ_ptr = np.r_[0, np.cumsum(np.bincount(src, minlength=total))]
    all_waiters: list[list[int]] = [[] for _ in plan.stages]
    prefix_waiters: list[list[int]] = [[] for _ in plan.stages]
    for u, stage in enumerate(plan.stages):
        for dep in stage.deps:
            if dep.pattern == "all":
                all_waiters[dep.stage].append(u)
            elif dep.pattern == "prefix":
                prefix_waiters[dep.stage].append(u)
            else:
                continue
            remaining[offsets[u]:offsets[u + 1]] += 1
    return _Graph(offsets, stage_of, duration, remaining, succ_ptr, succ, all_waiters,
                  prefix_waiters, {})


def simulate(plan: Plan) -> Trace:
    """Run the plan to completion; returns per-item times and pool busy time."""
    g = _graph(plan)
    stages = plan.stages
    n_items = len(g.duration)
    pool_of = [s.pool for s in stages]
    limit = [s.max_inflight or 1 << 30 for s in stages]
    lows = np.concatenate([s.bounds[:-1] for s in stages]).astype(float)
    prio = np.repeat([s.priority for s in stages], [s.items for s in stages])
    keys = list(zip(lows, prio, strict=True)) if plan.order == "token-first" else list(
        zip(prio, lows, strict=True))
    free = dict(plan.pools)
    ready: dict[str, list] = {p: [] for p in plan.pools}
    deferred: list[list] = [[] for _ in stages]
    inflight = [0] * len(stages)
    done = np.zeros(n_items, dtype=bool)
    done_count = [0] * len(stages)
    frontier = [0] * len(stages)  # items of the stage finished contiguously from item 0
    start = np.full(n_items, np.nan)
    finish = np.full(n_items, np.nan)
    remaining = g.remaining
    stage_of, offsets, duration = g.stage_of, g.offsets, g.duration
    events: list[tuple[float, int]] = []
    now = 0.0

    def release(item: int) -> None:
        heapq.heappush(ready[pool_of[stage_of[item]]], (keys[item], item))

    def dispatch(pool: str) -> None:
        queue = ready[pool]
        while free[pool] > 0 and queue:
            entry = heapq.heappop(queue)
            item = entry[1]
            s = stage_of[item]
            if inflight[s] >= limit[s]:
                deferred[s].append(entry)
                continue
            free[pool] -= 1
            inflight[s] += 1
            start[item] = now
            heapq.heappush(events, (now + duration[item], item))

    for item in np.flatnonzero(remaining == 0):
        release(int(item))
    for pool in plan.pools:
        dispatch(pool)
    while events:
        now, item = heapq.heappop(events)
        finish[item] = now
        done[item] = True
        s = int(stage_of[item])
        touched = {pool_of[s]}
        free[pool_of[s]] += 1
        inflight[s] -= 1
        for entry in deferred[s]:
            heapq.heappush(ready[pool_of[s]], entry)
        deferred[s].clear()
        newly: list[int] = []
        for nxt in g.succ[g.succ_ptr[item]:g.succ_ptr[item + 1]]:
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                newly.append(int(nxt))
        done_count[s] += 1
        if done_count[s] == stages[s].items:
            for u in g.all_waiters[s]:
                span = np.arange(offsets[u], offsets[u + 1])
                remaining[span] -= 1
                newly.extend(int(i) for i in span[remaining[span] == 0])
        if g.prefix_waiters[s]:
            newly.extend(_advance_prefix(plan, g, s, done, frontier))
        for nxt in newly:
            release(nxt)
            touched.add(pool_of[stage_of[nxt]])
        for pool in touched:
            dispatch(pool)
    busy: dict[str, float] = dict.fromkeys(plan.pools, 0.0)
    for s, stage in enumerate(stages):
        busy[stage.pool] += float(duration[offsets[s]:offsets[s + 1]].sum())
    if np.isnan(finish).any():
        raise RuntimeError("simulation deadlocked: the plan has an unsatisfiable dependency")
    return Trace(float(finish.max(initial=0.0)), start, finish, stage_of, offsets, busy)


def _advance_prefix(plan: Plan, g: _Graph, s: int, done: np.ndarray,
                    frontier: list[int]) -> list[int]:
    """Release waiting items whose rows [0, hi) are now all produced by stage ``s``."""
    stage = plan.stages[s]
    base = g.offsets[s]
    while frontier[s] < stage.items and done[base + frontier[s]]:
        frontier[s] += 1
    rows = stage.bounds[frontier[s]]
    newly: list[int] = []
    for u in g.prefix_waiters[s]:
        ub = plan.stages[u].bounds
        ptr = g.prefix_ptr.get((s, u), 0)
        while ptr < len(ub) - 1 and ub[ptr + 1] <= rows:
            item = g.offsets[u] + ptr
            g.remaining[item] -= 1
            if g.remaining[item] == 0:
                newly.append(int(item))
            ptr += 1
        g.prefix_ptr[(s, u)] = ptr
    return newly
