"""What a policy decides and what it must fit in (SynergyScale, 11-synergyscale.md).

A :class:`Problem` describes one training job as the planner sees it: parameters and FLOPs per
stage, activation and workspace memory, the bytes each model state costs in each tier, and the
hardware. An :class:`OffloadPlan` is a policy's answer as plain data: which stages form each
chunk, where each chunk lives (``device``, ``host`` or ``nvme``), how many chunks to prefetch, and
which stream runs each kind of task. The runtime and the cost model execute any plan the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schedlab.core.errors import ConfigError
from schedlab.synergyscale.hardware import Hardware
from schedlab.synergyscale.model import GPTConfig, stage_shapes
from schedlab.synergyscale.tiers import ALIGN_FLOATS, BudgetExceededError

PLACEMENTS = ("device", "host", "nvme")


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each model state in each tier.

    fp32 (our CPU runtime): the device works on fp32 copies; the home keeps param, grad, m, v.
    Mixed precision (the analytic GPU model, as in ZeRO-Offload/Infinity): fp16 working param and
    grad on the device, fp32 master + m + v (+ fp16 copy) at home, 16 B/param in all.
    """

    dev_param: int
    dev_grad: int
    host_home: int
    nvme_home: int
    resident: int
    fetch_read: int
    optim_read: int
    optim_write: int
    staging_fetch: int
    staging_optim: int

    @classmethod
    def fp32(cls) -> StateBytes:
        return cls(4, 4, 16, 12, 16, 4, 12, 12, 4, 16)

    @classmethod
    def mixed(cls) -> StateBytes:
        return cls(2, 2, 16, 14, 16, 2, 12, 14, 2, 16)


@dataclass(frozen=True)
class Problem:
    stage_numel: tuple[int, ...]
    stage_flops: tuple[float, ...]  # forward FLOPs of each stage per iteration
    activation_bytes: int  # checkpointed stage inputs, kept on the device
    workspace_bytes: int  # one stage's autograd temporaries during recompute
    state: StateBytes
    hardware: Hardware
    tokens: int

    @property
    def params(self) -> int:
        return sum(self.stage_numel)

    def train_flops(self) -> float:
        """Model FLOPs per iteration (6N per token convention: recompute not counted)."""
        return 3.0 * sum(self.stage_flops)


def _aligned(n: int) -> int:
    return -(-n // ALIGN_FLOATS) * ALIGN_FLOATS


def problem_for(cfg: GPTConfig, hardware: Hardware) -> Problem:
    """The planner's view of training ``cfg`` on ``hardware`` (fp32 unless mixed precision)."""
    state = StateBytes.mixed() if hardware.mixed_precision else StateBytes.fp32()
    elem = 2 if hardware.mixed_precision else 4
    tokens = cfg.batch * cfg.seq
    d, v = cfg.d_model, cfg.vocab
    numel = tuple(sum(_aligned(_prod(s)) for _, s in shapes) for shapes in stage_shapes(cfg))
    block = 2.0 * tokens * 12 * d * d + 4.0 * cfg.batch * cfg.seq**2 * d
    flops = (float(tokens * d), *([block] * cfg.n_layer), 2.0 * tokens * d * v)
    activations = tokens * 8 + (cfg.n_layer + 1) * tokens * d * elem
    workspace = max(20 * tokens * d * elem, 3 * tokens * v * elem)
    return Problem(numel, flops, activations, workspace, state, hardware, tokens)


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


def group_stages(stage_numel: tuple[int, ...], chunk_params: int) -> tuple[tuple[int, ...], ...]:
    """Consecutive stages packed into chunks of at most ``chunk_params`` parameters; a stage
    larger than that is a chunk of its own (a stage is never split)."""
    if chunk_params < 1:
        raise ConfigError("must be positive", field="chunk_params")
    groups: list[list[int]] = [[]]
    size = 0
    for stage, numel in enumerate(stage_numel):
        if groups[-1] and size + numel > chunk_params:
            groups.append([])
            size = 0
        groups[-1].append(stage)
        size += numel
    return tuple(tuple(g) for g in groups)


@dataclass(frozen=True)
class OffloadPlan:
    """A policy's decision; ``streams`` maps each task kind to a stream name."""

    policy: str
    groups: tuple[tuple[int, ...], ...]
    placement: tuple[str, ...]
    prefetch_depth: int
    streams: dict[str, str]
    chunk_params: int
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.groups) != len(self.placement):
            raise ConfigError("one placement per chunk is needed", field="placement")
        bad = [p for p in self.placement if p not in PLACEMENTS]
        if bad:
            raise ConfigError(f"unknown placement {bad[0]!r}; valid: {', '.join(PLACEMENTS)}",
                              field="placement")
        if self.prefetch_depth < 0:
            raise ConfigError("must be >= 0", field="prefetch_depth")

    def chunk_numel(self, problem: Problem) -> list[int]:
        return [sum(problem.stage_numel[s] for s in g) for g in self.groups]

    def summary(self) -> dict:
        counts = {p: self.placement.count(p) for p in PLACEMENTS}
        return dict(policy=self.policy, chunks=len(self.groups), chunk_params=self.chunk_params,
                    prefetch_depth=self.prefetch_depth, streams=len(set(self.streams.values())),
                    **{f"chunks_{p}": n for p, n in counts.items()})


def memory_needs(problem: Problem, plan: OffloadPlan) -> dict[str, int]:
    """Peak bytes per tier the runtime may allocate under ``plan`` (an upper bound)."""
    st, numel = problem.state, plan.chunk_numel(problem)
    off = [n for n, p in zip(numel, plan.placement, strict=True) if p != "device"]
    on_nvme = [n for n, p in zip(numel, plan.placement, strict=True) if p == "nvme"]
    window = (plan.prefetch_depth + 1) * max(off, default=0) * (st.dev_param + st.dev_grad)
    device = sum(n * st.resident for n, p in zip(numel, plan.placement, strict=True)
                 if p == "device") + window + problem.activation_bytes + problem.workspace_bytes
    staging = ((plan.prefetch_depth + 1) * st.staging_fetch + 2 * st.staging_optim) * max(
        on_nvme, default=0)
    if on_nvme:  # O_DIRECT buffers are padded to whole 4 KiB blocks
        staging += (plan.prefetch_depth + 6) * 4096
    host = sum(n * st.host_home for n, p in zip(numel, plan.placement, strict=True)
               if p == "host") + staging
    return dict(device=device, host=host, nvme=sum(on_nvme) * st.nvme_home)


def check_fits(problem: Problem, plan: OffloadPlan) -> dict[str, int]:
    """Raise :class:`BudgetExceededError` naming the first tier ``plan`` does not fit."""
    needs = memory_needs(problem, plan)
    hw = problem.hardware
    for tier, cap in (("device", hw.device_bytes), ("host", hw.host_bytes),
                      ("nvme", hw.nvme_bytes)):
        if needs[tier] > cap:
            raise BudgetExceededError(
                f"policy '{plan.policy}' needs {needs[tier]:,} B of {tier} memory but the "
                f"budget is {cap:,} B", field=f"{tier}_budget")
    return needs


def check_minimum(problem: Problem) -> None:
    """Even with everything offloaded the device must hold one stage, its gradient, the
    checkpointed activations and the recompute workspace."""
    st = problem.state
    need = (max(problem.stage_numel) * (st.dev_param + st.dev_grad)
            + problem.activation_bytes + problem.workspace_bytes)
    if need > problem.hardware.device_bytes:
        raise ConfigError(
            f"device budget {problem.hardware.device_bytes:,} B cannot hold even one layer: the "
            f"largest stage with its gradient, activations and workspace needs {need:,} B",
            field="device_budget")
