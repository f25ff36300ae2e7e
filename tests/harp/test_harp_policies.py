"""Every scheduler through the same invariants, checked on the simulator's item trace."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.harp import ArchConfig, build_workload, make_mapper, make_scheduler, simulate
from schedlab.harp.estimator import estimate
from schedlab.harp.policies import SCHEDULERS

ARCH = ArchConfig()
CASES = [("bert-base", 24, "latency"), ("gpt2-small", 24, "balanced"), ("vit-b16", 20, "area")]


def _plan(model: str, tokens: int, strategy: str, scheduler: str):
    work = build_workload(model, tokens)
    mapping = make_mapper(strategy, "levels").map(work, ARCH)
    return make_scheduler(scheduler).plan(work, mapping, ARCH)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize(("model", "tokens", "strategy"), CASES)
def test_schedule_invariants(scheduler: str, model: str, tokens: int, strategy: str) -> None:
    """Dependencies, pool capacity and in-flight limits hold; nothing runs twice or never."""
    plan = _plan(model, tokens, strategy, scheduler)
    trace = simulate(plan)
    assert np.all(np.isfinite(trace.finish))
    durations = np.concatenate([s.durations() for s in plan.stages])
    assert np.allclose(trace.finish - trace.start, durations)
    for u, stage in enumerate(plan.stages):
        mine = slice(trace.offsets[u], trace.offsets[u + 1])
        for dep in stage.deps:
            prod = plan.stages[dep.stage]
            pf = trace.finish[trace.offsets[dep.stage]:trace.offsets[dep.stage + 1]]
            for k, (lo, hi) in enumerate(zip(stage.bounds[:-1], stage.bounds[1:], strict=True)):
                if dep.pattern == "all":
                    need = pf.max()
                else:
                    first = 0 if dep.pattern == "prefix" else np.searchsorted(
                        prod.bounds, lo, "right") - 1
                    last = np.searchsorted(prod.bounds, hi, "left") - 1
                    need = pf[first:last + 1].max()
                assert trace.start[mine][k] >= need - 1e-6
    _check_capacity(plan, trace)
    # the estimator reads the same plan and must be finite and positive
    assert 0 < estimate(plan).latency_ns < np.inf


def _check_capacity(plan, trace) -> None:
    """At no instant does a pool (or a stage with an in-flight limit) exceed its servers."""
    pools = np.array([plan.stages[s].pool for s in trace.stage_of])
    for pool, capacity in plan.pools.items():
        mask = pools == pool
        assert _peak(trace.start[mask], trace.finish[mask]) <= capacity
    for u, stage in enumerate(plan.stages):
        if stage.max_inflight:
            mine = slice(trace.offsets[u], trace.offsets[u + 1])
            assert _peak(trace.start[mine], trace.finish[mine]) <= stage.max_inflight


def _peak(start: np.ndarray, finish: np.ndarray) -> int:
    events = np.r_[np.c_[start, np.ones_like(start)], np.c_[finish, -np.ones_like(finish)]]
    order = np.lexsort((events[:, 1], events[:, 0]))  # finishes before starts at a tie
    return int(np.cumsum(events[order, 1]).max(initial=0))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_latency_respects_critical_path_and_pool_work(scheduler: str) -> None:
    """No schedule beats token 0's dependency chain, or any pool's work over its servers."""
    plan = _plan("gpt2-small", 16, "latency", scheduler)
    trace = simulate(plan)
    chain = np.zeros(len(plan.stages))
    for u, stage in enumerate(plan.stages):
        chain[u] = max((chain[d.stage] for d in stage.deps), default=0.0) + stage.durations()[0]
    assert trace.latency_ns >= chain.max() - 1e-6
    total = dict.fromkeys(plan.pools, 0.0)
    for s in plan.stages:
        total[s.pool] += float(s.durations().sum())
    assert trace.latency_ns >= max(total[p] / c for p, c in plan.pools.items()) - 1e-6


def test_harp_beats_both_baselines_on_every_model() -> None:
    """The paper's direction: HARP's schedule is faster than non-pipelined and single-vector."""
    for model, tokens, strategy in CASES:
        latency = {name: simulate(_plan(model, tokens, strategy, name)).latency_ns
                   for name in ("harp", "non-pipelined", "single-vector")}
        assert latency["harp"] < latency["non-pipelined"]
        assert latency["harp"] <= latency["single-vector"]


def test_single_vector_never_overlaps_items_of_one_op() -> None:
    plan = _plan("bert-base", 16, "latency", "single-vector")
    trace = simulate(plan)
    for u in range(len(plan.stages)):
        mine = slice(trace.offsets[u], trace.offsets[u + 1])
        assert _peak(trace.start[mine], trace.finish[mine]) == 1


def test_non_pipelined_runs_op_after_op() -> None:
    """Every item of an op starts after every item of each producer finished."""
    plan = _plan("bert-base", 16, "area", "non-pipelined")
    trace = simulate(plan)
    for u, stage in enumerate(plan.stages):
        first_start = trace.start[trace.offsets[u]:trace.offsets[u + 1]].min()
        for dep in stage.deps:
            last = trace.finish[trace.offsets[dep.stage]:trace.offsets[dep.stage + 1]].max()
            assert first_start >= last - 1e-6


def test_harp_uses_data_parallel_only_where_rows_arrive_together() -> None:
    encoder = _plan("bert-base", 128, "latency", "harp")
    decoder = _plan("gpt2-small", 128, "latency", "harp")
    short = _plan("bert-base", 16, "latency", "harp")  # one row per unit: setup not repaid
    modes = {s.name.split(".")[-1]: s.mode for s in encoder.stages}
    assert modes["qk"] == modes["av"] == "data-parallel"
    assert modes["gelu"] == modes["ln1"] == "vector"
    assert all(s.mode != "data-parallel" for s in decoder.stages)
    assert all(s.mode != "data-parallel" for s in short.stages)
