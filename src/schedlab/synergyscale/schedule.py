"""One training iteration of any :class:`OffloadPlan` as a multi-stream task graph (paper 11).

The builder is shared by the real runtime and the analytic cost model: both hand it an
:class:`Actions` object that turns an operation on a chunk into a callable and/or a predicted
duration. The builder reads only plan *data* (groups, placement, prefetch depth, streams); it
never looks at which policy produced the plan.

Prefetching as residency items. Every offloaded chunk is fetched to the device once for the
forward pass and once for the backward pass, except the last ``depth + 1``, which stay resident
across the turn from forward to backward (they are the first the backward pass needs: eviction
follows the access order). Item ``k`` is fetched only after item ``k - depth - 1`` has been
released, so at most ``depth + 1`` offloaded chunks occupy the device at a time: that is the
memory bound the planner budgets for, and the dependency that enforces it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from schedlab.core.errors import SchedlabError
from schedlab.synergyscale.plan import OffloadPlan
from schedlab.synergyscale.taskgraph import TaskGraph

OP_KIND = {
    "fetch_read": "nvme_read", "fetch": "h2d", "fwd": "compute", "bwd": "compute",
    "grad_out": "d2h", "optim_read": "nvme_read", "adam": "cpu_adam",
    "optim_write": "nvme_write", "adam_device": "compute",
}


@dataclass(frozen=True)
class Step:
    fn: Callable[[], None] | None = None
    duration: float = 0.0
    nbytes: int = 0


class Actions(Protocol):
    """Turns (operation, chunk, stage) into work: a callable, a predicted duration, or both."""

    def make(self, op: str, chunk: int, stage: int | None = None,
             release: bool = False) -> Step: ...


class _Builder:
    def __init__(self, plan: OffloadPlan, actions: Actions) -> None:
        self.plan, self.actions = plan, actions
        self.graph = TaskGraph(dict(plan.streams))
        self.depth = plan.prefetch_depth
        off = [c for c, p in enumerate(plan.placement) if p != "device"]
        keep = min(self.depth + 1, len(off))  # the window's chunks stay resident at the turn
        self.kept = set(off[len(off) - keep:])
        self.items = [(c, "fwd") for c in off] + [
            (c, "bwd") for c in reversed(off[:len(off) - keep])]
        self.item_of = {key: k for k, key in enumerate(self.items)}
        for c in self.kept:
            self.item_of[(c, "bwd")] = self.item_of[(c, "fwd")]
        self.fetched: dict[int, int] = {}
        self.released: dict[int, int] = {}
        self.next_fetch = 0

    def add(self, op: str, chunk: int, deps: list, stage: int | None = None,
            release: bool = False) -> int:
        step = self.actions.make(op, chunk, stage, release)
        name = f"{op}[c{chunk}" + (f",s{stage}]" if stage is not None else "]")
        return self.graph.add(name, OP_KIND[op], deps, step.fn, step.duration, step.nbytes)

    def fetch_upto(self, limit: int) -> None:
        """Submit fetches of items up to ``limit``, each gated on an earlier item's release."""
        while self.next_fetch < len(self.items) and self.next_fetch <= limit:
            k = self.next_fetch
            chunk = self.items[k][0]
            gate = None
            if k > self.depth:
                if k - self.depth - 1 not in self.released:
                    return  # its gate is released later, in backward order; resumed from there
                gate = self.released[k - self.depth - 1]
            deps = [gate]
            if self.plan.placement[chunk] == "nvme":
                deps = [self.add("fetch_read", chunk, [gate])]
            self.fetched[k] = self.add("fetch", chunk, deps)
            self.next_fetch += 1

    def need(self, k: int) -> int:
        self.fetch_upto(k)
        if k not in self.fetched:
            raise SchedlabError(f"internal: chunk item {k} is needed before it can be fetched")
        return self.fetched[k]

    def forward(self) -> int | None:
        prev = None
        for chunk, stages in enumerate(self.plan.groups):
            k = self.item_of.get((chunk, "fwd"))
            if k is not None:
                self.need(k)
            release = k is not None and chunk not in self.kept
            for i, stage in enumerate(stages):
                last = i == len(stages) - 1
                prev = self.add("fwd", chunk, [prev, self.fetched.get(k)], stage,
                                release=release and last)
            if release:
                self.released[k] = prev
                self.fetch_upto(k + self.depth + 1)
        return prev

    def backward(self, prev: int | None) -> None:
        for chunk in reversed(range(len(self.plan.groups))):
            k = self.item_of.get((chunk, "bwd"))
            if k is not None:
                self.need(k)
            for stage in reversed(self.plan.groups[chunk]):
                prev = self.add("bwd", chunk, [prev, self.fetched.get(k)], stage)
            if self.plan.placement[chunk] == "device":
                prev = self.add("adam_device", chunk, [prev])
                continue
            grad = self.add("grad_out", chunk, [prev])
            self.released[k] = grad
            self.fetch_upto(k + self.depth + 1)
            if self.plan.placement[chunk] == "nvme":
                read = self.add("optim_read", chunk, [])
                adam = self.add("adam", chunk, [grad, read])
                self.add("optim_write", chunk, [adam])
            else:
                self.add("adam", chunk, [grad])


def build_iteration(plan: OffloadPlan, actions: Actions) -> TaskGraph:
    """Forward, backward and optimizer step of one iteration under ``plan``."""
    builder = _Builder(plan, actions)
    builder.fetch_upto(builder.depth)
    builder.backward(builder.forward())
    return builder.graph
