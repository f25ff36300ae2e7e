"""The task graph: structure, prefetch window, simulation semantics, thread execution."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.synergyscale.plan import OffloadPlan
from schedlab.synergyscale.policies import OVERLAPPED, PARTIAL, SYNCHRONOUS
from schedlab.synergyscale.schedule import Step, build_iteration
from schedlab.synergyscale.taskgraph import Span, TaskGraph, Trace, run_threads, simulate


class Recorder:
    """Actions that count device residency of offloaded chunks while the graph runs."""

    def __init__(self, plan: OffloadPlan, seed: int) -> None:
        self.plan, self.lock = plan, threading.Lock()
        self.resident: set[int] = set()
        self.peak = 0
        self.ops: list[tuple[str, int, int | None]] = []
        self.seed = seed

    def make(self, op, chunk, stage=None, release=False) -> Step:
        self.ops.append((op, chunk, stage))

        def fn() -> None:
            with self.lock:
                if op == "fetch":
                    assert chunk not in self.resident, "fetched twice"
                    self.resident.add(chunk)
                    self.peak = max(self.peak, len(self.resident))
                if (op == "fwd" and release) or op == "grad_out":
                    self.resident.discard(chunk)

        duration = 1.0 + ((hash((op, chunk, stage)) ^ self.seed) % 7)
        return Step(fn, duration, 1)


plans = st.builds(
    lambda sizes, placement, depth, streams: OffloadPlan(
        "x", tuple(tuple(range(sum(sizes[:i]), sum(sizes[:i + 1]))) for i in range(len(sizes))),
        tuple(placement[: len(sizes)]) + ("host",) * (len(sizes) - len(placement)), depth,
        streams, 1),
    st.lists(st.integers(1, 3), min_size=1, max_size=6),
    st.lists(st.sampled_from(["device", "host", "nvme"]), min_size=6, max_size=6),
    st.integers(0, 3),
    st.sampled_from([OVERLAPPED, SYNCHRONOUS, PARTIAL]),
)


@settings(max_examples=60)
@given(plan=plans, seed=st.integers(0, 1000))
def test_graph_structure_and_prefetch_window(plan: OffloadPlan, seed: int) -> None:
    rec = Recorder(plan, seed)
    graph = build_iteration(plan, rec)
    stages = [s for g in plan.groups for s in g]
    fwd = [s for op, _, s in rec.ops if op == "fwd"]
    bwd = [s for op, _, s in rec.ops if op == "bwd"]
    assert fwd == stages and bwd == stages[::-1]
    for chunk, where in enumerate(plan.placement):
        adam = [op for op, c, _ in rec.ops if c == chunk and op in ("adam", "adam_device")]
        assert adam == (["adam_device"] if where == "device" else ["adam"])
        fetches = sum(op == "fetch" for op, c, _ in rec.ops if c == chunk)
        assert fetches == (0 if where == "device" else fetches) and fetches <= 2
    assert all(d < t.id for t in graph.tasks for d in t.deps)
    run_threads(graph)
    assert rec.peak <= plan.prefetch_depth + 1
    assert not rec.resident


@settings(max_examples=40)
@given(plan=plans, seed=st.integers(0, 1000))
def test_simulation_bounds(plan: OffloadPlan, seed: int) -> None:
    graph = build_iteration(plan, Recorder(plan, seed))
    trace = simulate(graph)
    total = sum(t.duration for t in graph.tasks)
    compute = sum(t.duration for t in graph.tasks if t.kind == "compute")
    assert compute <= trace.makespan + 1e-9 <= total + 1e-9
    if len(set(plan.streams.values())) == 1:
        assert trace.makespan == pytest.approx(total)  # one stream: no overlap at all
    for t in graph.tasks:  # nothing starts before its dependencies finish
        span = trace.spans[t.id]
        assert all(trace.spans[d].end <= span.start + 1e-12 for d in t.deps)


@given(st.lists(st.tuples(st.floats(0, 10), st.floats(0, 5)), min_size=1, max_size=20))
def test_busy_is_union_of_intervals(raw: list[tuple[float, float]]) -> None:
    spans = [Span(i, "s", "compute", a, a + w) for i, (a, w) in enumerate(raw)]
    trace = Trace(spans)
    grid = [i / 200 for i in range(0, 3001)]
    covered = sum(1 for x in grid if any(s.start <= x < s.end for s in spans)) / 200
    assert trace.busy("compute") == pytest.approx(covered, abs=0.1 * len(spans) + 0.05)
    assert trace.busy("compute") <= trace.makespan + 1e-9


def test_thread_executor_propagates_errors() -> None:
    graph = TaskGraph(dict(OVERLAPPED))

    def boom() -> None:
        raise RuntimeError("kaput")

    first = graph.add("a", "compute", [], boom)
    graph.add("b", "h2d", [first], lambda: None)
    with pytest.raises(RuntimeError, match="kaput"):
        run_threads(graph)


def test_streams_overlap_in_simulation() -> None:
    graph = TaskGraph(dict(OVERLAPPED))
    graph.add("c", "compute", [], duration=2.0)
    graph.add("h", "h2d", [], duration=2.0)
    assert simulate(graph).makespan == pytest.approx(2.0)
    sync = TaskGraph(dict(SYNCHRONOUS))
    sync.add("c", "compute", [], duration=2.0)
    sync.add("h", "h2d", [], duration=2.0)
    assert simulate(sync).makespan == pytest.approx(4.0)
