"""SynergyScale and its baselines behind one protocol (paper: 11-synergyscale.md).

Every policy turns a :class:`~schedlab.synergyscale.plan.Problem` into an
:class:`~schedlab.synergyscale.plan.OffloadPlan` or raises ``BudgetExceededError`` when the model
cannot be trained within the tier budgets. The runtime and the cost model execute whatever plan
they get; the registry :data:`POLICIES` is keyed by CLI name.

* ``synergyscale`` - the paper's method: hierarchical placement (device, then host, then NVMe,
  chunks with the least compute per byte kept closest), every task kind on its own stream, and
  chunk size and prefetch depth chosen by simulating each candidate with the cost model.
* ``no-offload`` - everything on the device; fails past the device budget (plain PyTorch).
* ``zero-offload`` - ZeRO-Offload-like: all states offloaded to host memory, CPU Adam, and every
  task on one stream (synchronous: no overlap of compute, copies and the optimizer).
* ``zero-infinity`` - ZeRO-Infinity-like: all states on NVMe, fixed one-stage chunks, prefetch
  depth 1; copies overlap compute but NVMe I/O and CPU Adam share one stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from schedlab.core.registry import lookup
from schedlab.synergyscale.costmodel import estimate
from schedlab.synergyscale.plan import (
    OffloadPlan,
    Problem,
    check_fits,
    check_minimum,
    group_stages,
    memory_needs,
)
from schedlab.synergyscale.tiers import BudgetExceededError

OVERLAPPED = {"compute": "compute", "h2d": "h2d", "d2h": "d2h", "nvme_read": "nvme",
              "nvme_write": "nvme", "cpu_adam": "cpu"}
SYNCHRONOUS = dict.fromkeys(OVERLAPPED, "main")
PARTIAL = {"compute": "compute", "h2d": "copy", "d2h": "copy", "nvme_read": "optim",
           "nvme_write": "optim", "cpu_adam": "optim"}


class OffloadPolicy(Protocol):
    """Decides chunking, placement, prefetch depth and streams for one training problem."""

    name: str

    def plan(self, problem: Problem) -> OffloadPlan: ...


def _per_stage(problem: Problem) -> tuple[tuple[int, ...], ...]:
    return group_stages(problem.stage_numel, max(problem.stage_numel))


class NoOffload:
    """Everything on the device (plain PyTorch); fails past the device budget."""

    name = "no-offload"

    def plan(self, problem: Problem) -> OffloadPlan:
        check_minimum(problem)
        groups = _per_stage(problem)
        plan = OffloadPlan(self.name, groups, ("device",) * len(groups), 0, OVERLAPPED,
                           max(problem.stage_numel))
        check_fits(problem, plan)
        return plan


class _Uniform:
    """Baselines that send every chunk to one tier with fixed parameters."""

    name = ""
    tier = "host"
    depth = 0
    streams: dict[str, str] = SYNCHRONOUS

    def plan(self, problem: Problem) -> OffloadPlan:
        check_minimum(problem)
        groups = _per_stage(problem)
        plan = OffloadPlan(self.name, groups, (self.tier,) * len(groups), self.depth,
                           self.streams, max(problem.stage_numel))
        check_fits(problem, plan)
        return plan


class ZeroOffload(_Uniform):
    """ZeRO-Offload-like: all states in host memory, CPU Adam, one synchronous stream."""

    name, tier, depth, streams = "zero-offload", "host", 0, SYNCHRONOUS


class ZeroInfinity(_Uniform):
    """ZeRO-Infinity-like: all states on NVMe, fixed chunks, prefetch 1, partial overlap."""

    name, tier, depth, streams = "zero-infinity", "nvme", 1, PARTIAL


class SynergyScale:
    """Auto-tuned hierarchical offloading with multi-stream overlap."""

    name = "synergyscale"

    def __init__(self, chunk_multiples: tuple[int, ...] = (1, 2, 4, 8),
                 depths: tuple[int, ...] = (0, 1, 2, 3)) -> None:
        self.chunk_multiples, self.depths = chunk_multiples, depths

    def plan(self, problem: Problem) -> OffloadPlan:
        check_minimum(problem)
        best, best_time, tried = None, float("inf"), 0
        largest = max(problem.stage_numel)
        sizes = sorted({largest * m for m in self.chunk_multiples})
        for chunk_params in sizes:
            groups = group_stages(problem.stage_numel, chunk_params)
            for depth in self.depths:
                plan = self.place(problem, groups, depth, chunk_params)
                if plan is None:
                    continue
                tried += 1
                seconds = estimate(problem, plan, check=False).iteration_s
                if seconds < best_time:
                    best, best_time = plan, seconds
        if best is None:
            raise BudgetExceededError(
                f"no placement of {problem.params:,} parameters fits the device "
                f"({problem.hardware.device_bytes:,} B), host ({problem.hardware.host_bytes:,} B) "
                f"and NVMe ({problem.hardware.nvme_bytes:,} B) budgets", field="nvme_budget")
        return replace(best, notes=dict(candidates=tried, predicted_s=best_time))

    def place(self, problem: Problem, groups, depth: int, chunk_params: int) -> OffloadPlan | None:
        """Fill the device, then the host, then NVMe; chunks with the fewest FLOPs per
        parameter go closest (their transfers are the hardest to hide behind compute)."""
        numel = [sum(problem.stage_numel[s] for s in g) for g in groups]
        flops = [sum(problem.stage_flops[s] for s in g) for g in groups]
        order = sorted(range(len(groups)), key=lambda c: flops[c] / max(numel[c], 1))

        def make(resident: int, hosted: int) -> OffloadPlan:
            placement = ["nvme"] * len(groups)
            for rank, chunk in enumerate(order):
                if rank < resident:
                    placement[chunk] = "device"
                elif rank < resident + hosted:
                    placement[chunk] = "host"
            return OffloadPlan(self.name, groups, tuple(placement), depth, OVERLAPPED,
                               chunk_params)

        hw = problem.hardware
        resident = 0
        while resident < len(groups) and self._fits(problem, make(resident + 1, 0), "device"):
            resident += 1
        if not self._fits(problem, make(resident, 0), "device"):
            return None
        # not monotone: the last chunk leaving NVMe also frees the NVMe staging buffers
        hosted = next((h for h in range(len(groups) - resident, 0, -1)
                       if memory_needs(problem, make(resident, h))["host"] <= hw.host_bytes), 0)
        plan = make(resident, hosted)
        needs = memory_needs(problem, plan)
        if needs["host"] > hw.host_bytes or needs["nvme"] > hw.nvme_bytes:
            return None
        return plan

    @staticmethod
    def _fits(problem: Problem, plan: OffloadPlan, tier: str) -> bool:
        cap = {"device": problem.hardware.device_bytes}[tier]
        return memory_needs(problem, plan)[tier] <= cap


POLICIES: dict[str, Callable[[], OffloadPolicy]] = {
    "synergyscale": SynergyScale,
    "zero-offload": ZeroOffload,
    "zero-infinity": ZeroInfinity,
    "no-offload": NoOffload,
}


def make_policy(name: str) -> OffloadPolicy:
    return lookup(POLICIES, "policy", name)()
