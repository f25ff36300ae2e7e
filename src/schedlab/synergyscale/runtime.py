"""The offloading training runtime: real chunks, real copies, real files (SynergyScale, paper 11).

:class:`OffloadTrainer` trains a staged GPT under any :class:`OffloadPlan`. Model states live in
chunks placed on the device tier, the host tier or NVMe files; every iteration is a task graph
(:mod:`schedule`) whose operations this class implements: fetch a chunk (NVMe read, host→device
copy), forward a stage (keeping only its input as a checkpoint), backward a stage (recompute, then
gradients into the chunk's device gradient buffer), send gradients to the host, run CPU Adam
(reading and writing optimizer states on NVMe when they live there).

The device tier's budget is enforced on every allocation, so an offloading plan really keeps the
device small. On a CPU-only machine the "device" is a separate CPU arena and host↔device copies
are memcpy; with CUDA the same operations run on CUDA streams (``executor="cuda"``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from schedlab.core.errors import ConfigError
from schedlab.synergyscale.adam import AdamConfig, adam_step
from schedlab.synergyscale.model import GPTConfig, init_params, stage_forward, stage_shapes
from schedlab.synergyscale.plan import OffloadPlan, Problem, memory_needs
from schedlab.synergyscale.schedule import Step, build_iteration
from schedlab.synergyscale.taskgraph import Trace, run_cuda, run_threads
from schedlab.synergyscale.tiers import (
    FLOAT_BYTES,
    MemoryTier,
    NvmeStore,
    aligned_host_buffer,
    build_layout,
    stage_views,
)

_OPTIM_FILES = (("p", "param"), ("m", "m"), ("v", "v"))


@dataclass
class StepReport:
    loss: float
    seconds: float
    device_idle: float
    trace: Trace = field(repr=False)


class OffloadTrainer:
    """Trains ``cfg`` under ``plan`` with tier budgets taken from ``problem.hardware``."""

    def __init__(self, cfg: GPTConfig, plan: OffloadPlan, problem: Problem, seed: int = 0,
                 nvme_dir: str | Path | None = None, adam: AdamConfig | None = None,
                 device: str = "cpu") -> None:
        self.cfg, self.plan, self.adam = cfg, plan, adam or AdamConfig()
        self.device = device
        self.cuda = device.startswith("cuda")
        hw = problem.hardware
        needs = memory_needs(problem, plan)
        self.nvme: NvmeStore | None = None
        if "nvme" in plan.placement:
            if nvme_dir is None:
                raise ConfigError("the plan puts chunks on NVMe but no --nvme directory was "
                                  "given", field="nvme")
            self.nvme = NvmeStore(nvme_dir)
            self.nvme.preflight(needs["nvme"])
        self.device_tier = MemoryTier("device", hw.device_bytes, device)
        self.host_tier = MemoryTier("host", hw.host_bytes, pinned=self.cuda)
        self.layout = build_layout(stage_shapes(cfg), plan.groups)
        self.step_no = 0
        self.dev: dict[str, object] = {}  # device buffers: p{c}, g{c}, m{c}, v{c}
        self.home: dict[str, object] = {}  # host buffers and staging
        self.act: dict[str, object] = {}  # checkpoints, activation grads, loss
        self._initialise(seed)

    # ----------------------------------------------------------------- set-up
    def _initialise(self, seed: int) -> None:
        """Write each chunk's initial parameters (and zero optimizer states) to its home."""
        stages = init_params(self.cfg, seed)
        for chunk, where in zip(self.layout.chunks, self.plan.placement, strict=True):
            c, n = chunk.index, chunk.numel
            if where == "device":
                buffers = {k: self.device_tier.alloc(f"{k}{c}", n) for k in "pgmv"}
                self.dev.update({f"{k}{c}": b for k, b in buffers.items()})
                param = buffers["p"]
            elif where == "host":
                buffers = {k: self.host_tier.alloc(f"h{k}{c}", n) for k in "pgmv"}
                self.home.update({f"h{k}{c}": b for k, b in buffers.items()})
                param = buffers["p"]
            else:
                param = self.host_tier.alloc(f"init{c}", n, aligned=True)
            for stage in chunk.stages:
                for name, view in stage_views(param, chunk, stage).items():
                    view.copy_(stages[stage][name])
            if where == "nvme":
                zeros = aligned_host_buffer(n).zero_()
                self.nvme.write(f"c{c}.param", param)
                self.nvme.write(f"c{c}.m", zeros)
                self.nvme.write(f"c{c}.v", zeros)
                self.host_tier.free(f"init{c}")

    # ------------------------------------------------------------ operations
    def make(self, op: str, chunk: int, stage: int | None = None, release: bool = False) -> Step:
        """The :class:`~schedlab.synergyscale.schedule.Actions` hook: one closure per task."""
        n = self.layout.chunks[chunk].numel
        table = {
            "fetch_read": (lambda: self._fetch_read(chunk), n * FLOAT_BYTES),
            "fetch": (lambda: self._fetch(chunk), n * FLOAT_BYTES),
            "fwd": (lambda: self._forward(chunk, stage, release), 0),
            "bwd": (lambda: self._backward(chunk, stage), 0),
            "grad_out": (lambda: self._grad_out(chunk), n * FLOAT_BYTES),
            "optim_read": (lambda: self._optim_read(chunk), 3 * n * FLOAT_BYTES),
            "adam": (lambda: self._adam(chunk), 0),
            "optim_write": (lambda: self._optim_write(chunk), 3 * n * FLOAT_BYTES),
            "adam_device": (lambda: self._adam(chunk), 0),
        }
        fn, nbytes = table[op]
        return Step(fn, 0.0, nbytes)

    def _keep(self, tensor) -> None:
        """Tell the CUDA caching allocator a buffer is used on the current stream."""
        if self.cuda:  # pragma: no cover - needs a GPU
            import torch

            tensor.record_stream(torch.cuda.current_stream())

    def _fetch_read(self, c: int) -> None:
        buf = self.host_tier.alloc(f"sf{c}", self.layout.chunks[c].numel, aligned=True)
        self.nvme.read(f"c{c}.param", buf)
        self.home[f"sf{c}"] = buf

    def _fetch(self, c: int) -> None:
        n = self.layout.chunks[c].numel
        staged = self.home.pop(f"sf{c}", None)
        source = staged[:n] if staged is not None else self.home[f"hp{c}"]
        dst = self.device_tier.alloc(f"p{c}", n)
        dst.copy_(source, non_blocking=self.cuda and staged is None)
        self.dev[f"p{c}"] = dst
        if staged is not None:
            self.host_tier.free(f"sf{c}")

    def _release(self, c: int, grad: bool) -> None:
        for key in (f"p{c}", f"g{c}") if grad else (f"p{c}",):
            del self.dev[key]
            self.device_tier.free(key)

    def _forward(self, c: int, s: int, release: bool) -> None:
        import torch

        chunk = self.layout.chunks[c]
        x = self.act.pop("tokens") if s == 0 else self.act.pop(f"out{s - 1}")
        if s > 0:
            self.device_tier.reserve(f"ck{s}", x.numel() * x.element_size())
        self.act[f"ck{s}"] = x
        param = self.dev[f"p{c}"]
        self._keep(param)
        with torch.no_grad():
            out = stage_forward(s, stage_views(param, chunk, s), x, self.act["targets"], self.cfg)
        if s == self.cfg.n_stages - 1:
            self.act["loss"] = out
        else:
            self.act[f"out{s}"] = out
        if release:
            self._release(c, grad=False)

    def _backward(self, c: int, s: int) -> None:
        import torch

        chunk = self.layout.chunks[c]
        if f"g{c}" not in self.dev:
            self.dev[f"g{c}"] = self.device_tier.alloc(f"g{c}", chunk.numel)
        param, grad = self.dev[f"p{c}"], self.dev[f"g{c}"]
        self._keep(param)
        self._keep(grad)
        leaves = {k: v.detach().requires_grad_() for k, v in stage_views(param, chunk, s).items()}
        x = self.act.pop(f"ck{s}")
        if s > 0:
            self.device_tier.free(f"ck{s}")
            x = x.detach().requires_grad_()
        upstream = self.act.pop(f"gx{s + 1}", None)
        with torch.enable_grad():
            out = stage_forward(s, leaves, x, self.act["targets"], self.cfg)
            inputs = [*leaves.values(), *([x] if s > 0 else [])]
            grads = torch.autograd.grad(out, inputs, grad_outputs=upstream)
        for view, value in zip(stage_views(grad, chunk, s).values(), grads, strict=False):
            view.copy_(value)
        if s > 0:
            self.act[f"gx{s}"] = grads[-1]

    def _grad_out(self, c: int) -> None:
        n = self.layout.chunks[c].numel
        if self.plan.placement[c] == "nvme":
            dst = self.host_tier.alloc(f"sg{c}", n)
            self.home[f"sg{c}"] = dst
        else:
            dst = self.home[f"hg{c}"]
        dst.copy_(self.dev[f"g{c}"], non_blocking=self.cuda)
        self._release(c, grad=True)

    def _optim_read(self, c: int) -> None:
        for k, name in _OPTIM_FILES:
            buf = self.host_tier.alloc(f"so{k}{c}", self.layout.chunks[c].numel, aligned=True)
            self.nvme.read(f"c{c}.{name}", buf)
            self.home[f"so{k}{c}"] = buf

    def _adam(self, c: int) -> None:
        n = self.layout.chunks[c].numel
        where = self.plan.placement[c]
        if where == "device":
            p, g, m, v = (self.dev[f"{k}{c}"] for k in "pgmv")
        elif where == "host":
            p, g, m, v = (self.home[f"h{k}{c}"] for k in "pgmv")
        else:
            g = self.home.pop(f"sg{c}")
            p, m, v = (self.home[f"so{k}{c}"][:n] for k in "pmv")
        adam_step(p, g, m, v, self.step_no, self.adam)
        if where == "nvme":
            self.host_tier.free(f"sg{c}")

    def _optim_write(self, c: int) -> None:
        for k, name in _OPTIM_FILES:
            self.nvme.write(f"c{c}.{name}", self.home.pop(f"so{k}{c}"))
            self.host_tier.free(f"so{k}{c}")

    # ------------------------------------------------------------ iteration
    def step(self, tokens, targets, executor: str = "threads") -> StepReport:
        """One training iteration; returns the loss (before the update) and its trace."""
        self.step_no += 1
        self.act = {"tokens": tokens.to(self.device), "targets": targets.to(self.device)}
        graph = build_iteration(self.plan, self)
        start = time.perf_counter()
        trace = run_cuda(graph) if executor == "cuda" else run_threads(graph)
        seconds = time.perf_counter() - start
        loss = float(self.act.pop("loss"))
        return StepReport(loss, seconds, trace.device_idle_fraction(), trace)

    def parameters(self) -> list[dict]:
        """Current parameters per stage, wherever they live (for checks and checkpoints)."""
        out: list[dict] = [{} for _ in range(self.cfg.n_stages)]
        for chunk, where in zip(self.layout.chunks, self.plan.placement, strict=True):
            c = chunk.index
            if where == "device":
                buf = self.dev[f"p{c}"].cpu()
            elif where == "host":
                buf = self.home[f"hp{c}"]
            else:
                buf = self.host_tier.alloc(f"peek{c}", chunk.numel, aligned=True)
                self.nvme.read(f"c{c}.param", buf)
                self.host_tier.free(f"peek{c}")
            for stage in chunk.stages:
                out[stage] = {k: v.clone() for k, v in stage_views(buf, chunk, stage).items()}
        return out

    def close(self) -> None:
        if self.nvme is not None:
            self.nvme.cleanup()
