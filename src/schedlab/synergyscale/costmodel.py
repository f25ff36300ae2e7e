"""Analytic cost model: predicted task durations, simulated on the same task graph (paper 11).

SynergyScale chooses its offloading parameters with a model of data movement versus compute.
:class:`AnalyticActions` gives each operation of :mod:`schedule` a duration from the
:class:`~schedlab.synergyscale.hardware.Hardware` figures (bytes / bandwidth, FLOPs / FLOP/s,
parameters / Adam rate, plus a fixed per-task overhead); :func:`estimate` simulates the graph
with in-order streams and reports iteration time, TFLOP/s, device idle fraction and bytes moved
per tier. The auto-tuner and the large-model extrapolation both call :func:`estimate`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from schedlab.synergyscale.plan import OffloadPlan, Problem, check_fits, memory_needs
from schedlab.synergyscale.schedule import Step, build_iteration
from schedlab.synergyscale.taskgraph import TaskGraph, simulate


class AnalyticActions:
    """Durations only (no callables): the cost model's view of every operation."""

    def __init__(self, problem: Problem, plan: OffloadPlan) -> None:
        self.p, self.plan = problem, plan
        self.numel = plan.chunk_numel(problem)

    def make(self, op: str, chunk: int, stage: int | None = None,
             release: bool = False) -> Step:
        hw, st, n = self.p.hardware, self.p.state, self.numel[chunk]
        over = hw.task_overhead
        if op == "fwd":
            return Step(None, over + self.p.stage_flops[stage] / hw.device_flops)
        if op == "bwd":  # recompute the forward, then twice its FLOPs for the gradients
            return Step(None, over + 3 * self.p.stage_flops[stage] / hw.device_flops)
        if op == "adam_device":
            return Step(None, over + n / hw.device_adam_rate)
        if op == "adam":
            return Step(None, over + n / hw.cpu_adam_rate)
        table = {
            "fetch": (n * st.dev_param, hw.h2d_bw),
            "grad_out": (n * st.dev_grad, hw.d2h_bw),
            "fetch_read": (n * st.fetch_read, hw.nvme_read_bw),
            "optim_read": (n * st.optim_read, hw.nvme_read_bw),
            "optim_write": (n * st.optim_write, hw.nvme_write_bw),
        }
        nbytes, bandwidth = table[op]
        return Step(None, over + nbytes / bandwidth, nbytes)


@dataclass(frozen=True)
class Estimate:
    policy: str
    params: int
    iteration_s: float
    tflops: float
    device_idle: float
    h2d_bytes: int
    d2h_bytes: int
    nvme_read_bytes: int
    nvme_write_bytes: int
    device_need: int
    host_need: int
    nvme_need: int

    def row(self) -> dict:
        return asdict(self)


def bytes_by_kind(graph: TaskGraph) -> dict[str, int]:
    out = {"h2d": 0, "d2h": 0, "nvme_read": 0, "nvme_write": 0}
    for task in graph.tasks:
        if task.kind in out:
            out[task.kind] += task.nbytes
    return out


def estimate(problem: Problem, plan: OffloadPlan, check: bool = True) -> Estimate:
    """Predicted iteration of ``plan``; raises BudgetExceededError if it does not fit."""
    needs = check_fits(problem, plan) if check else memory_needs(problem, plan)
    graph = build_iteration(plan, AnalyticActions(problem, plan))
    trace = simulate(graph)
    moved = bytes_by_kind(graph)
    seconds = trace.makespan
    return Estimate(plan.policy, problem.params, seconds,
                    problem.train_flops() / seconds / 1e12 if seconds > 0 else 0.0,
                    trace.device_idle_fraction(), moved["h2d"], moved["d2h"],
                    moved["nvme_read"], moved["nvme_write"], needs["device"], needs["host"],
                    needs["nvme"])


#: which Hardware rate explains each task kind's duration
_RATE_OF_KIND = {"compute": ("device_flops", "device_adam_rate"), "h2d": ("h2d_bw",),
                 "d2h": ("d2h_bw",), "nvme_read": ("nvme_read_bw",),
                 "nvme_write": ("nvme_write_bw",), "cpu_adam": ("cpu_adam_rate",)}


def calibrate(problem: Problem, plan: OffloadPlan, measured: TaskGraph, trace) -> Problem:
    """Scale the hardware rates by measured/predicted time per task kind (warm-up profile).

    ``measured`` must be the graph of ``plan`` the runtime ran (same builder, so task ids line
    up with the analytic graph); a kind that did not run keeps its rate.
    """
    from dataclasses import replace

    predicted = build_iteration(plan, AnalyticActions(problem, plan))
    hw = problem.hardware
    updates = {}
    for kind, rates in _RATE_OF_KIND.items():
        ids = [t.id for t in measured.tasks if t.kind == kind]
        spent = sum(s.end - s.start for s in trace.spans if s.kind == kind)
        model = sum(predicted.tasks[i].duration - hw.task_overhead for i in ids)
        if ids and spent > 0 and model > 0:
            for rate in rates:
                updates[rate] = getattr(hw, rate) * model / spent
    return replace(problem, hardware=replace(hw, **updates))
