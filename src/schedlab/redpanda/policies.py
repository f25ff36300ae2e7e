"""Compilation flows: RedPanda's middle end and the baselines it is compared against.

RedPanda (../shared/papers/08-redpanda.md) contributes branch handling, memory ordering, loop
pipelining, time-multiplexing-aware compilation and instruction-count reduction. Each flow
answers the same questions (the :class:`Flow` protocol); the lowering engine
(:mod:`schedlab.redpanda.lowering`) asks them and never looks at a flow's name. The baselines
each switch one contribution off, plus ``baseline`` = a prior dataflow-CGRA flow with all of
them off (predication-only branches, fully serialised memory, no fusion), and ``dynamatic`` =
the DHLS baseline (``baseline`` without pipelining: a Dynamatic-like flow with every memory
access ordered). ``share_units`` only matters to the DHLS back end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from schedlab.core.registry import lookup
from schedlab.redpanda.analysis import Access, loop_carries_dependence, may_alias_same_iteration

Mode = Literal["spatial", "temporal"]
BranchMode = Literal["steer", "predicate"]


@dataclass(frozen=True)
class BranchShape:
    """Static facts about one scf.if the branch-handling decision needs."""

    ops_then: int
    ops_else: int
    live_ins: int      # distinct dynamic values imported into both branches together
    results: int
    has_memory: bool
    has_loops: bool


class Flow(Protocol):
    """One compilation strategy; every decision the lowering makes goes through here."""

    name: str
    pipelined: bool      # False: an iteration starts only after the previous one completed
    fuse: bool           # instruction-count reduction (steer fusion into producers)
    size_buffers: bool   # slack-based FIFO sizing from the modulo schedule
    share_units: bool    # DHLS: time-multiplexing-aware sharing of multipliers/dividers

    def memory_key(self, memref: str) -> str:
        """Accesses with different keys are never ordered against each other."""
        ...

    def orders_reads(self) -> bool:
        """Whether two loads of one key are ordered too."""
        ...

    def may_alias(self, a: Access, b: Access) -> bool:
        """May two accesses of one iteration touch the same address?"""
        ...

    def carried(self, loop: object, accesses: list[Access]) -> bool:
        """Must the ordering token of a key travel from one iteration to the next?"""
        ...

    def branch_mode(self, shape: BranchShape, mode: Mode) -> BranchMode:
        """Steer/merge (control flow) or predication (if-conversion) for one scf.if."""
        ...


@dataclass(frozen=True)
class RedPanda:
    """The paper's flow: every contribution on."""

    name: str = "redpanda"
    pipelined: bool = True
    fuse: bool = True
    size_buffers: bool = True
    share_units: bool = True
    precise_memory: bool = True
    branch_choice: bool = True
    #: False: per-array ordering without RedPanda's dependence test (every load/store pair of
    #: one array with a store is ordered, within and across iterations)
    dependence_analysis: bool = True
    #: without ``branch_choice``: every scf.if predicated, or (True) every one steered
    steer_all: bool = False

    def memory_key(self, memref: str) -> str:
        return memref if self.precise_memory else "memory"

    def orders_reads(self) -> bool:
        return not self.precise_memory

    def may_alias(self, a: Access, b: Access) -> bool:
        if self.precise_memory and self.dependence_analysis:
            return may_alias_same_iteration(a, b)
        return True

    def carried(self, loop: object, accesses: list[Access]) -> bool:
        if self.precise_memory and self.dependence_analysis:
            return loop_carries_dependence(loop, accesses)
        return True

    def branch_mode(self, shape: BranchShape, mode: Mode) -> BranchMode:
        if shape.has_loops:
            return "steer"  # a loop cannot be if-converted
        if not self.branch_choice:
            return "steer" if self.steer_all else "predicate"
        steer_cost = shape.live_ins + shape.results + (3 if shape.has_memory else 0)
        predicate_cost = shape.results + (2 if shape.has_memory else 0)
        if mode == "temporal":
            # time-multiplexed fabric: II is resource-bound, so static instructions decide
            return "predicate" if predicate_cost <= steer_cost else "steer"
        # spatial fabric: also avoid executing long untaken paths
        wasted = min(shape.ops_then, shape.ops_else)
        return "predicate" if predicate_cost + wasted <= steer_cost + 2 else "steer"


def _variant(**changes) -> Callable[[], Flow]:
    return lambda: RedPanda(**changes)


#: the paper's method and every baseline, by CLI name
FLOWS: dict[str, Callable[[], Flow]] = {
    "redpanda": RedPanda,
    "non-pipelined": _variant(name="non-pipelined", pipelined=False),
    "serial-memory": _variant(name="serial-memory", precise_memory=False),
    "predication-only": _variant(name="predication-only", branch_choice=False),
    "baseline": _variant(name="baseline", precise_memory=False, branch_choice=False,
                         fuse=False, size_buffers=False, share_units=False),
    # the strongest prior CGRA flows (issue 57): memory ordered per array (accesses of
    # different arrays never ordered, loads of one array never ordered among themselves, every
    # load/store pair of one array with a store kept in program order -- no dependence test),
    # slack-sized FIFOs and steer fusion; every branch predicated, or every branch steered
    "per-array-pred": _variant(name="per-array-pred", dependence_analysis=False,
                               branch_choice=False, share_units=False),
    "per-array-steer": _variant(name="per-array-steer", dependence_analysis=False,
                                branch_choice=False, steer_all=True, share_units=False),
    # the DHLS baseline of the paper: a Dynamatic-like flow, every memory access ordered and
    # no RedPanda pipelining (each iteration waits for the previous one's memory accesses)
    "dynamatic": _variant(name="dynamatic", precise_memory=False, branch_choice=False,
                          fuse=False, size_buffers=False, share_units=False, pipelined=False),
}

#: the flows the CGRA experiment compares (the DHLS one adds "dynamatic")
CGRA_FLOWS = ("redpanda", "non-pipelined", "serial-memory", "predication-only", "baseline",
              "per-array-pred", "per-array-steer")
#: the prior flows; per kernel the best of them is "the strongest prior flow"
PRIOR_FLOWS = ("baseline", "per-array-pred", "per-array-steer")


def get_flow(name: str) -> Flow:
    return lookup(FLOWS, "flow", name)()
