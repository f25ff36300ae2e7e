"""Library entry points: train with a policy, train the in-memory reference, plan at scale.

These are what the CLI and the experiments call (SynergyScale, 11-synergyscale.md). ``train``
measures this machine, lets the policy plan within the given budgets, preflights the NVMe
directory and runs the offloading runtime; ``train_reference`` is ordinary in-memory PyTorch
training of the same model with the same data order (the bit-identity oracle).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schedlab.synergyscale.adam import AdamConfig, adam_step
from schedlab.synergyscale.hardware import Hardware, measure_local, with_budgets
from schedlab.synergyscale.model import GPTConfig, reference_model
from schedlab.synergyscale.plan import Problem, problem_for
from schedlab.synergyscale.policies import make_policy
from schedlab.synergyscale.runtime import OffloadTrainer

GiB = 2**30


@dataclass
class TrainReport:
    policy: str
    losses: list[float]
    step_seconds: list[float]
    device_idle: list[float]
    plan: dict
    device_peak: int
    host_peak: int
    device_budget: int
    model_state_bytes: int
    bytes_moved: dict[str, int]
    final_params: list[dict] = field(default_factory=list, repr=False)

    def summary(self) -> dict:
        import statistics

        steady = self.step_seconds[1:] or self.step_seconds  # the first step warms up
        idle = self.device_idle[1:] or self.device_idle
        return dict(**self.plan, steps=len(self.losses), first_loss=self.losses[0],
                    last_loss=self.losses[-1], median_step_s=statistics.median(steady),
                    device_idle=statistics.median(idle), device_peak=self.device_peak,
                    host_peak=self.host_peak, device_budget=self.device_budget,
                    model_state_bytes=self.model_state_bytes,
                    **{f"moved_{k}": v for k, v in self.bytes_moved.items()})


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Pin PyTorch's intra-op threads for a code path (and restore them after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def local_problem(cfg: GPTConfig, device_budget: int, host_budget: int,
                  nvme_dir: str | Path | None = None, hardware: Hardware | None = None,
                  nvme_budget: int | None = None) -> Problem:
    """The planner's problem on this machine: measured rates, the user's tier budgets."""
    hw = hardware or measure_local(nvme_dir)
    return problem_for(cfg, with_budgets(hw, device_budget, host_budget, nvme_budget))


def train(cfg: GPTConfig, batches: list, policy: str = "synergyscale",
          device_budget: int = 2 * GiB, host_budget: int = 8 * GiB,
          nvme_dir: str | Path | None = None, seed: int = 0, hardware: Hardware | None = None,
          executor: str = "threads", device: str = "cpu", nvme_budget: int | None = None,
          adam: AdamConfig | None = None, keep_params: bool = False,
          warmup: bool = True, cpu_threads: int = 1) -> TrainReport:
    """Train ``cfg`` on ``batches`` under ``policy``; raises before training if it cannot fit.

    With ``warmup``, one profiling iteration runs first (on a throw-away copy of the model):
    its measured task times calibrate the cost model and the policy plans again, so chunk size,
    prefetch depth and placement follow this machine's real speeds. Training then starts from
    the same initial weights, so results do not depend on the warm-up.
    """
    problem = local_problem(cfg, device_budget, host_budget, nvme_dir, hardware, nvme_budget)
    chooser = make_policy(policy)
    plan = chooser.plan(problem)
    with contextlib.ExitStack() as stack:
        if nvme_dir is None:
            nvme_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="ss-nvme-"))
        stack.enter_context(torch_threads(cpu_threads))
        if warmup and batches:
            problem, plan = _warm_up(cfg, chooser, problem, plan, batches[0], nvme_dir, seed,
                                     adam, device, executor)
        trainer = OffloadTrainer(cfg, plan, problem, seed, nvme_dir, adam, device)
        stack.callback(trainer.close)
        losses, seconds, idle = [], [], []
        for tokens, targets in batches:
            report = trainer.step(tokens, targets, executor)
            losses.append(report.loss)
            seconds.append(report.seconds)
            idle.append(report.device_idle)
        moved = _moved(trainer, len(batches))
        params = trainer.parameters() if keep_params else []
    return TrainReport(policy, losses, seconds, idle, plan.summary(), trainer.device_tier.peak,
                       trainer.host_tier.peak, problem.hardware.device_bytes,
                       problem.params * problem.state.resident, moved, params)


def _warm_up(cfg, chooser, problem: Problem, plan, batch, nvme_dir, seed: int, adam, device: str,
             executor: str):
    """Profile one iteration of ``plan`` and re-plan with the calibrated cost model."""
    from schedlab.synergyscale.costmodel import calibrate
    from schedlab.synergyscale.schedule import build_iteration

    probe = OffloadTrainer(cfg, plan, problem, seed, nvme_dir, adam, device)
    try:
        report = probe.step(*batch, executor=executor)
        graph = build_iteration(plan, probe)
    finally:
        probe.close()
    calibrated = calibrate(problem, plan, graph, report.trace)
    return calibrated, chooser.plan(calibrated)


def _moved(trainer: OffloadTrainer, steps: int) -> dict[str, int]:
    """Bytes moved per tier per iteration (host<->device copies counted from the plan)."""
    from schedlab.synergyscale.costmodel import bytes_by_kind
    from schedlab.synergyscale.schedule import build_iteration

    per_step = bytes_by_kind(build_iteration(trainer.plan, trainer))
    if trainer.nvme is not None and steps:
        per_step["nvme_read"] = trainer.nvme.bytes_read // steps
        per_step["nvme_write"] = trainer.nvme.bytes_written // steps
    return per_step


def train_reference(cfg: GPTConfig, batches: list, seed: int = 0,
                    adam: AdamConfig | None = None) -> tuple[list[float], list[dict]]:
    """Plain in-memory training: one ``nn.Module``, whole-graph autograd, Adam per parameter."""
    import torch

    adam = adam or AdamConfig()
    with torch_threads(1):
        model = reference_model(cfg, seed)
        state = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for p in model.parameters()}
        losses = []
        for step, (tokens, targets) in enumerate(batches, start=1):
            model.zero_grad(set_to_none=True)
            loss = model(tokens, targets)
            loss.backward()
            losses.append(float(loss.detach()))
            for p in model.parameters():
                adam_step(p.data, p.grad, *state[id(p)], step, adam)
        params = [{k: v.detach().clone() for k, v in model.stage_params(i).items()}
                  for i in range(cfg.n_stages)]
    return losses, params
