"""The MNSIM 2.0 baselines against an independent replay of MNSIM's latency recurrence."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.harp import ArchConfig, simulate
from schedlab.harp.mapping import Mapping
from schedlab.harp.policies import MnsimScheduler, make_scheduler
from schedlab.harp.workloads import Op, Workload

ARCH = ArchConfig()
TOKENS = 12


def _chain() -> Workload:
    """static -> layernorm -> static -> gelu, every dependency row by row."""
    ops = (
        Op("a", 0, "static", (), k=256, n=256),
        Op("ln", 0, "nonlinear", (("a", "rows"),), elems=256, func="layernorm"),
        Op("b", 0, "static", (("ln", "rows"),), k=256, n=512),
        Op("act", 0, "nonlinear", (("b", "rows"),), elems=512, func="gelu"),
    )
    return Workload("chain", TOKENS, ops)


def _mnsim_replay(durations: list[np.ndarray], copies: list[int], barrier: bool) -> float:
    """MNSIM's rule written out: vector t of layer L begins at max(input ready, copy free)."""
    ready = np.zeros(TOKENS)
    for dur, r in zip(durations, copies, strict=True):
        free = np.zeros(r)
        finish = np.zeros(TOKENS)
        gate = np.full(TOKENS, ready.max()) if barrier else ready
        for t in range(TOKENS):
            c = int(np.argmin(free))
            begin = max(gate[t], free[c])
            finish[t] = free[c] = begin + dur[t]
        ready = finish
    return float(ready.max())


@pytest.mark.parametrize("barrier", [False, True])
@pytest.mark.parametrize("replicas", [1, 3])
def test_mnsim_rule_matches_replay(barrier: bool, replicas: int) -> None:
    work = _chain()
    mapping = Mapping("latency", "test", {"a": replicas, "b": 1}, 0, 0.0)
    sched = MnsimScheduler(barrier=barrier)
    plan = sched.plan(work, mapping, ARCH)
    copies = [replicas, 1, 1, 1]  # digital ops: one vector of an op at a time (MNSIM's rule)
    expected = _mnsim_replay([s.durations() for s in plan.stages], copies, barrier)
    assert simulate(plan).latency_ns == pytest.approx(expected, rel=1e-9)


def test_variants_order() -> None:
    """More digital concurrency never slows the baseline; the barrier never speeds it up."""
    work = _chain()
    mapping = Mapping("latency", "test", {"a": 2, "b": 2}, 0, 0.0)
    lat = {
        name: simulate(sched.plan(work, mapping, ARCH)).latency_ns
        for name, sched in {
            "rule": MnsimScheduler(),
            "all-units": MnsimScheduler(digital_inflight=0),
            "nopipe": MnsimScheduler(barrier=True),
            "one": MnsimScheduler(static_inflight=1),
        }.items()
    }
    assert lat["all-units"] <= lat["rule"] <= lat["one"]
    assert lat["nopipe"] > lat["rule"]


def test_registered_names() -> None:
    assert make_scheduler("mnsim-nopipe").barrier
    assert not make_scheduler("mnsim-pipeline").barrier
