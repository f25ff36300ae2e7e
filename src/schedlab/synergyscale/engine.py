"""``synergyscale.initialize(model, optimizer, config)``: offloaded training of any ``nn.Module``.

SynergyScale (11-synergyscale.md) keeps model states across device memory, host memory and NVMe
and overlaps their movement with compute. This module does that for a model the project did not
write, the way ZeRO-3 does it, with hooks instead of a staged model:

* **Units.** Every submodule that owns parameters directly is a unit. A parameter shared by two
  units (GPT-2's tied ``wte``/``lm_head``) is one *slot*, optimised by the first unit that owns it.
* **Fetch before use, release after.** A forward pre-hook fetches a unit's parameters into the
  device tier (host master → device buffer, or NVMe file → aligned staging → device) and prefetches
  the next ``prefetch_depth`` units on an I/O thread pool. The post-hook releases them: the
  parameter's ``.data`` becomes a one-element placeholder expanded to its shape.
* **Backward without keeping parameters.** A ``saved_tensors_hooks`` pair replaces every tensor
  autograd saves that lives in a fetched parameter's storage (the weight, ``weight.t()``...) by a
  reference; unpacking it in backward fetches the parameter again (prefetched in reverse forward
  order). Parameters that backward does not read (an embedding table, a bias) are never fetched
  for backward. The last ``prefetch_depth + 1`` units stay fetched across the forward→backward turn.
* **Gradient offload and an overlapped optimizer.** A post-accumulate-grad hook copies each final
  gradient to the host, frees it on the device, and once all gradients of a unit have arrived the
  unit's optimizer step (the user's optimizer class, same hyper-parameters, on the fp32 masters)
  runs on a worker thread while backward continues with earlier layers. NVMe units read their
  masters and optimizer states ahead (reader pool) and write them back asynchronously (writer
  pool); the next forward's fetch of a unit waits only for that unit's step.
* **Copy threads and the planner's window** (issue 46, item 3). Where fetches are asynchronous
  (NVMe, CUDA, an emulated ``link_bandwidth``) one unit's fetches are one job on the h2d copy
  thread and its gradients one job on the d2h thread. ``prefetch_depth="auto"`` times the
  second step per unit and takes the window the stream model of ``overlap.py`` finds fastest.
* **Residency.** The planner keeps the units used last in forward (first in backward) wholly on
  the device while their states fit the device budget next to the fetch window.
* **Offload-only baseline** (``schedule="offload-only"``): same engine and the same parameter
  prefetch as ZeRO-Infinity's own design (``prefetch_depth`` units ahead, on the I/O pool where
  fetches are pooled, the last units kept across the forward→backward turn), but no residency
  and every optimizer step and NVMe state swap synchronous after backward (DeepSpeed's default
  ``pipeline_read/write: false``).

The device tier is CUDA memory when ``device="cuda"`` (pinned host masters and gradient buffers,
a copy stream per direction, event waits and ``record_stream``), otherwise a separate CPU arena.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedlab.core.errors import BadInputError, ConfigError, SchedlabError
from schedlab.core.io import validate_model
from schedlab.synergyscale.access import OWNERS, Access, Released
from schedlab.synergyscale.config import EngineConfig
from schedlab.synergyscale.optim import check_optimizer, make_unit_optimizer, sync_hyperparameters
from schedlab.synergyscale.tiers import BudgetExceededError, MemoryTier

__all__ = ["EngineConfig", "SynergyEngine", "initialize"]

@dataclass
class _Slot:
    """One managed parameter."""

    index: int
    name: str
    param: Any
    shape: tuple[int, ...]
    numel: int
    owner: int = -1  # unit index whose optimizer updates it
    resident: bool = False  # fp32 resident: states live on the device, never fetched
    master: Any = None  # fp32 host master (its .data is a placeholder while on NVMe)
    host_grad: Any = None
    dev: Any = None  # the fetched device working copy
    fetching: Future | None = None
    saved: bool = False  # backward will read it (a saved tensor refers to it)
    pos: int = 0  # last forward position of a unit using it
    grad_event: Any = None
    grad_future: Future | None = None  # its gradient's d2h copy on the copy thread
    has_grad: bool = False  # host_grad holds a gradient of this step (accumulate into it)
    grad_ref: Any = None  # the tensor the step reads as this slot's gradient (for edit checks)
    grad_version: int = 0  # grad_ref._version after the engine's own last write
    placeholder: Any = None  # the released parameter's .data (made once)
    cls: Any = None  # the parameter's own class (a released one is access.Released)
    opt_edits: int = 0  # in-place writes of .grad by the optimizer's own step (Rprop: 1)
    dev_version: int = 0  # param._version when fetched: a change means an in-place write


@dataclass
class _Unit:
    index: int
    name: str
    module: Any
    slots: list[_Slot]
    owned: list[_Slot] = field(default_factory=list)
    resident: bool = False
    optimizer: Any = None
    pending: int = 0
    step_future: Future | None = None
    state_reads: dict | None = None
    submitted: bool = False
    early: bool = False  # this pass's step was submitted during backward
    job_learns: bool = False
    group_ids: list[int] = field(default_factory=list)  # user param group of each unit group
    step_lists: list = field(default_factory=list)  # (shared optimizer group, master) it owns
    d2h: list = field(default_factory=list)  # gradients gathered for its next d2h job
    d2h_future: Future = field(default_factory=Future)  # completed by that job


class _Ref:
    __slots__ = ("slot", "size", "stride", "offset")

    def __init__(self, slot, size, stride, offset):
        self.slot, self.size, self.stride, self.offset = slot, size, stride, offset


class _Part:
    """One slot's share of a unit's fetch job."""

    __slots__ = ("future", "k")

    def __init__(self, future: Future, k: int) -> None:
        self.future, self.k = future, k

    def result(self):
        return self.future.result()[self.k]

    def done(self) -> bool:
        return self.future.done()


class _Done:
    """A finished fetch done inline: what a Future of it would answer, without its lock."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value

    @staticmethod
    def done() -> bool:
        return True


def _fit_link(samples, bandwidth) -> tuple[float, float]:
    """Seconds per copy and per byte from (copies, bytes, seconds) of measured fetches, by
    least squares; an emulated link's own bandwidth when one is set (only the per-copy cost,
    the thread hand-off, is fitted then)."""
    if bandwidth:
        per_byte = 1 / bandwidth
        copies = sum(c for c, _, _ in samples)
        left = sum(t - b * per_byte for _, b, t in samples)
        return (max(0.0, left / copies) if copies else 0.0), per_byte
    scc = sum(c * c for c, _, _ in samples)
    scb = sum(c * b for c, b, _ in samples)
    sbb = sum(b * b for _, b, _ in samples)
    sct = sum(c * t for c, _, t in samples)
    sbt = sum(b * t for _, b, t in samples)
    det = scc * sbb - scb * scb
    if det > 0:
        latency, per_byte = (sbb * sct - scb * sbt) / det, (scc * sbt - scb * sct) / det
        if latency >= 0 and per_byte > 0:
            return latency, per_byte
    total_b = sum(b for _, b, _ in samples)
    total_t = sum(t for _, _, t in samples)
    return 0.0, (total_t / total_b if total_b and total_t > 0 else 1e-10)


def _placeholder(shape, dtype, device):
    """One NaN expanded to the shape: a read the engine did not fetch for poisons the loss
    instead of training quietly on an uninitialised element."""
    import torch

    return torch.full((1,), float("nan"), dtype=dtype, device=device).expand(shape)


class SynergyEngine:
    """What :func:`initialize` returns: call it like the model, then ``backward`` and ``step``."""

    def __init__(self, model, optimizer, config: EngineConfig) -> None:
        import torch

        self.torch = torch
        self.model, self.config = model, config
        self.cuda = config.device.startswith("cuda")
        self.link = config.link_bandwidth
        if self.link is not None and self.cuda:
            raise ConfigError(
                "link_bandwidth emulates a link on a CPU device; a GPU has a real one",
                field="link_bandwidth",
            )
        if self.cuda and not torch.cuda.is_available():
            raise ConfigError("device is cuda but torch sees no GPU", field="device")
        self.device = torch.device(config.device)
        self.work_dtype = torch.bfloat16 if config.precision == "bf16" else torch.float32
        self.overlap = config.schedule == "overlap"
        # The offload-only baseline prefetches too, and its window is planned the same way.
        self.auto_depth = config.prefetch_depth == "auto"
        self.depth = 2 if self.auto_depth else config.prefetch_depth
        self.async_fetch = config.async_fetch
        if self.async_fetch is None:
            self.async_fetch = config.tier == "nvme" or self.cuda
        if self.link is not None:
            self.async_fetch = True  # the link's copy engine works next to compute
        # Gradients go to the host on a copy thread (the d2h copy engine) while backward runs,
        # whenever fetches are asynchronous too; inline otherwise (host tier on CPU).
        self.async_grads = self.async_fetch and not self.cuda
        self.plan: dict | None = None  # the prefetch planner's choice (prefetch_depth 'auto')
        self._profile: dict | None = None  # per-unit times of the profiled (second) step
        self.phase = "idle"
        self.step_count = 0
        self.accumulation = config.gradient_accumulation_steps
        self.micro = 0  # backward passes since the last step()
        self.clip = config.gradient_clipping
        self.grad_norm: float | None = None
        # Gradients the user's loop can see and edit between backward() and step(): on a CPU
        # device with fp32 working copies an offloaded parameter's .grad *is* its host buffer.
        self.expose_grads = not self.cuda and self.work_dtype == torch.float32
        self._user_grads = False  # the loop edits gradients: every step waits for step()
        self._steps_seen = 0  # steps of this engine object (early steps start after the first)
        self.forward_order: list[int] = []
        self._order_known = False
        self._live: dict[int, _Slot] = {}  # storage data_ptr -> fetched slot
        self._lock = threading.RLock()
        self._ready: list[_Unit] = []  # units submitted for a step, not yet taken by the worker
        self._draining = False  # a _drain job is queued or running
        self.timings: dict[str, float] = {"fetch_wait": 0.0, "optimizer_wait": 0.0}
        self._build_units(optimizer)
        self.state_bytes = 16 * sum(s.numel for s in self.slots)
        budget = config.device_budget
        if isinstance(budget, float):
            budget = int(budget * self.state_bytes)
        self.device_tier = MemoryTier("device", budget or 2**62, config.device)
        self.host_tier = MemoryTier("host", 2**62, pinned=self.cuda)
        self.io = ThreadPoolExecutor(config.io_threads, thread_name_prefix="ss-fetch")
        # One copy thread per direction for an emulated link (a GPU's two copy engines);
        # fetches otherwise use the I/O pool.
        self.h2d_pool = (
            ThreadPoolExecutor(1, thread_name_prefix="ss-h2d") if self.link else self.io
        )
        self.d2h_pool = (
            ThreadPoolExecutor(1, thread_name_prefix="ss-d2h") if self.async_grads else None
        )
        self._opt_time = [0.0, 0]  # optimizer seconds and parameters stepped (planner input)
        self.opt_pool = ThreadPoolExecutor(1, thread_name_prefix="ss-optim")
        self.nvme = None
        if config.tier == "nvme":
            from schedlab.synergyscale.aio import AsyncNvme

            self.nvme = AsyncNvme(
                config.nvme_dir,
                readers=config.io_threads,
                writers=max(1, config.io_threads // 2),
                direct=config.direct_io,
            )
            self.nvme.preflight(12 * sum(s.numel for s in self.slots))
        if self.cuda:  # pragma: no cover - needs a GPU
            self.h2d = torch.cuda.Stream(self.device)
            self.d2h = torch.cuda.Stream(self.device)
        self._plan_residency()
        if self.cuda:  # pragma: no cover - needs a GPU
            for buffer in model.buffers():
                buffer.data = buffer.data.to(self.device)
            for p in model.parameters():
                if not p.requires_grad:
                    p.data = p.data.to(self.device)
        self._materialise(optimizer)
        self._install_hooks()
        self._slot_of = {id(s.param): s for s in self.slots}
        self._access_ctl = Access(
            self._slot_of,
            self._access,
            self._release,
            lambda: self.phase in ("forward", "backward"),
        )
        for slot in self.slots:  # released now: ops on them go through Released (access.py)
            if not slot.resident:
                OWNERS[id(slot.param)] = self._access_ctl
                slot.param.__class__ = Released
        # Everything resident (the model fits the budget): no parameter is ever offloaded, so
        # neither the access tracer nor the saved-tensor hooks have anything to do.
        self.offloads = any(not s.resident for s in self.slots)
        if self.auto_depth and self.offloads and self.async_fetch:
            # The second step is timed without prefetch (the first is cold: first touches of
            # fresh buffers and optimizer states), the third is planned.
            self._profile = {"on": False}
        # Everything resident on a CPU device: the optimizer would overlap backward on the same
        # cores it runs on (nothing to hide, only thread contention), so step() runs it on the
        # calling thread, all units in one optimizer.step().
        self.inline_steps = self.overlap and not self.cuda and not self.offloads
        for unit in self.units:  # model.state_dict() gathers the real values from every tier
            self.handles.append(
                unit.module.register_state_dict_post_hook(
                    functools.partial(SynergyEngine._state_dict_values, self)
                )
            )
        self.handles.append(optimizer.register_step_pre_hook(self._refuse_user_step))
        # Instance attributes, removed by close(): the engine clears gradients itself, and a
        # user's zero_grad() while an overlapped step reads .grad would race it.
        optimizer.zero_grad = self.zero_grad
        model.zero_grad = self.zero_grad
        _ENGINES.add(self)
        _install_clip_interception()

    # ------------------------------------------------------------------ set-up
    def _build_units(self, optimizer) -> None:
        torch = self.torch
        group_of: dict[int, int] = {}
        for g, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                group_of[id(p)] = g
        check_optimizer(optimizer)
        self.user_optimizer = optimizer
        self.user_state = optimizer.state
        self.group_of = group_of
        slots: dict[int, _Slot] = {}
        units: list[_Unit] = []
        names: dict[int, str] = {}
        for n, p in self.model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), n)
        for mname, module in self.model.named_modules():
            direct = [p for p in module.parameters(recurse=False) if p.requires_grad]
            if not direct:
                continue
            unit = _Unit(len(units), mname or type(module).__name__, module, [])
            for p in direct:
                if id(p) not in group_of:
                    raise ConfigError(
                        f"parameter '{names.get(id(p), '?')}' requires grad but "
                        "is not in the optimizer",
                        field="optimizer",
                    )
                if p.dtype != torch.float32:
                    raise ConfigError(
                        f"parameter '{names.get(id(p), '?')}' is {p.dtype}; "
                        "initialize takes an fp32 model (use precision='bf16' "
                        "for mixed precision)",
                        field="model",
                    )
                if id(p) not in slots:
                    slots[id(p)] = _Slot(
                        len(slots),
                        names.get(id(p), "?"),
                        p,
                        tuple(p.shape),
                        p.numel(),
                        owner=unit.index,
                        cls=type(p),
                    )
                    unit.owned.append(slots[id(p)])
                unit.slots.append(slots[id(p)])
            units.append(unit)
        if not units:
            raise ConfigError("the model has no trainable parameters", field="model")
        self.units, self.slots = units, list(slots.values())
        self.unit_of_module = {id(u.module): u for u in units}

    def _plan_residency(self) -> None:
        """Keep whole units on the device, last-used-in-forward first, while the budget holds
        them next to the fetch window ((depth + 2) × the largest unit's working params and its
        gradient)."""
        elem = 2 if self.work_dtype == self.torch.bfloat16 else 4
        largest = max(sum(s.numel for s in u.slots) for u in self.units)
        window = (self.depth + 2) * largest * elem + largest * elem
        budget = self.device_tier.budget
        if window > budget:
            raise ConfigError(
                f"device budget {budget:,} B cannot hold the fetch window "
                f"{window:,} B ((prefetch_depth + 2) x the largest unit, "
                f"{largest:,} params, plus its gradient)",
                field="device_budget",
            )
        self.window_bytes = window
        if not self.overlap or elem != 4:
            return  # bf16 keeps fp32 masters off the device: no residency
        room = budget - window
        for unit in reversed(self.units):
            need = 16 * sum(s.numel for s in unit.owned)
            shared = any(s.owner != unit.index for s in unit.slots)
            if shared:
                continue
            if need > room:
                break
            unit.resident = True
            room -= need

    def _materialise(self, optimizer) -> None:
        torch = self.torch
        every_group: dict[int, list] = {}
        for unit in self.units:
            masters, groups = [], {}
            for slot in unit.owned:
                p = slot.param
                if unit.resident and self.work_dtype == torch.float32:
                    slot.resident = True
                    self.device_tier.reserve(f"r{slot.index}", 16 * slot.numel)
                    if p.device != self.device:
                        p.data = p.data.to(self.device)
                    master = p
                else:
                    if self.cuda:  # pragma: no cover - needs a GPU
                        master = p.detach().to("cpu", copy=True).pin_memory()
                        slot.host_grad = torch.empty_like(master).pin_memory()
                    else:
                        master = p.detach().clone()
                        slot.host_grad = torch.empty_like(master)
                    p.data = _placeholder(slot.shape, self.work_dtype, self.device)
                    if self.nvme is not None:
                        self.nvme.write(f"p{slot.index}", master, wait=True)
                        master.data = _placeholder(slot.shape, torch.float32, "cpu")
                slot.master = master
                masters.append(master)
                groups.setdefault(self.group_of[id(p)], []).append(master)
                state = self.user_state.get(p)
                if state:
                    slot_state = {
                        k: (v.detach().clone() if torch.is_tensor(v) else v)
                        for k, v in state.items()
                    }
                    unit_state_target = (slot, slot_state)
                    unit.__dict__.setdefault("_restore", []).append(unit_state_target)
            for g, group_masters in groups.items():
                every_group.setdefault(g, []).extend(group_masters)
            unit.step_lists = [(g, m) for g, ms in groups.items() for m in ms]
        # One instance of the user's class over every master: a step of any set of units is one
        # optimizer.step() over their masters (_step_units), not one call per unit.
        shared, order = make_unit_optimizer(optimizer, every_group)
        self.shared_optimizer, self.shared_groups = shared, order
        position = {g: i for i, g in enumerate(order)}
        for unit in self.units:
            if not unit.step_lists:
                continue
            unit.optimizer, unit.group_ids = shared, order
            unit.step_lists = [(position[g], m) for g, m in unit.step_lists]
            restore = unit.__dict__.pop("_restore", [])
            for slot, slot_state in restore:
                shared.state[slot.master] = slot_state
            if restore:
                self._swap_out_states(unit, wait=True)
        optimizer.state.clear()  # the engine owns the states now

    def _checkpoint_wrap(self) -> int:
        import torch.utils.checkpoint as ckpt

        wanted = set(self.config.activation_checkpointing)
        found = {type(m).__name__ for m in self.model.modules()}
        missing = wanted - found
        if missing:
            raise ConfigError(
                f"no submodule of class {sorted(missing)[0]!r} (classes: "
                f"{', '.join(sorted(found)[:12])}...)",
                field="activation_checkpointing",
            )
        for module in self.model.modules():
            direct = any(p.requires_grad for p in module.parameters(recurse=False))
            if type(module).__name__ in wanted and direct:
                # Its recomputation would run without the unit's fetch hooks (torch's
                # checkpoint then fails on the saved tensors' metadata): refuse up front.
                raise ConfigError(
                    f"class {type(module).__name__!r} owns parameters directly; checkpoint a "
                    "block class that contains such modules (e.g. a transformer layer)",
                    field="activation_checkpointing",
                )
        count = 0
        for module in self.model.modules():
            if type(module).__name__ in wanted:
                original = module.forward

                @functools.wraps(original)
                def wrapped(*args, _f=original, **kwargs):
                    if not self.torch.is_grad_enabled():
                        return _f(*args, **kwargs)
                    return ckpt.checkpoint(_f, *args, use_reentrant=False, **kwargs)

                module.forward = wrapped
                count += 1
        return count

    def _install_hooks(self) -> None:
        self.handles = []
        for unit in self.units:
            m = unit.module
            self.handles.append(
                m.register_forward_pre_hook(functools.partial(self._pre_forward, unit))
            )
            self.handles.append(
                m.register_forward_hook(functools.partial(self._post_forward, unit))
            )
        for slot in self.slots:
            self.handles.append(
                slot.param.register_post_accumulate_grad_hook(
                    functools.partial(self._grad_ready, slot)
                )
            )
        self.checkpointed = self._checkpoint_wrap() if self.config.activation_checkpointing else 0

    def unit_costs(self) -> list:
        """The profiled step as :class:`~schedlab.synergyscale.overlap.UnitCost` per unit in
        forward order, and the measured link: forward compute between the unit's hooks (the
        time its fetch waited excluded), backward split like forward, optimizer seconds per
        parameter, fetch seconds per byte of the first (unprefetched) forward."""
        from schedlab.synergyscale.overlap import Link, UnitCost

        prof = self._profile
        marks = prof["marks"]
        fwd = dict.fromkeys(self.forward_order, 0.0)
        elem = 2 if self.work_dtype == self.torch.bfloat16 else 4
        seen, samples = set(), []  # (copies, bytes, seconds) of each unit's first fetch
        for k, (index, began, ready) in enumerate(marks):
            end = marks[k + 1][1] if k + 1 < len(marks) else prof["forward_end"]
            fwd[index] += max(0.0, end - ready)
            if index not in seen:
                seen.add(index)
                off = [s for s in self.units[index].slots if not s.resident]
                if off:
                    samples.append((len(off), elem * sum(s.numel for s in off), ready - began))
        total = sum(fwd.values()) or 1e-9
        ratio = prof["backward"] / total
        per_param = self._opt_time[0] / max(1, self._opt_time[1])
        costs = []
        for index in self.forward_order:
            unit = self.units[index]
            off = [s for s in unit.slots if not s.resident]
            costs.append(
                UnitCost(
                    fwd=fwd[index],
                    bwd=fwd[index] * ratio,
                    fetch_bytes=elem * sum(s.numel for s in off),
                    bwd_bytes=elem * sum(s.numel for s in off if s.saved),
                    grad_bytes=elem * sum(s.numel for s in unit.owned if not s.resident),
                    opt=per_param * sum(s.numel for s in unit.owned),
                    copies=max(1, len(off)),
                )
            )
        latency, per_byte = _fit_link(samples, self.link)
        return costs, Link(h2d=1 / per_byte, d2h=1 / per_byte, latency=latency)

    def _plan_prefetch(self) -> None:
        """``prefetch_depth: auto``: the window with the shortest modelled step (overlap.py)
        among those the device budget holds next to the resident units."""
        from schedlab.synergyscale.overlap import choose_depth, simulate

        self.synchronize()  # the first step's optimizer time is complete
        costs, link = self.unit_costs()
        self._profile = None
        elem = 2 if self.work_dtype == self.torch.bfloat16 else 4
        largest = elem * max(sum(s.numel for s in u.slots) for u in self.units)
        resident = 16 * sum(s.numel for s in self.slots if s.resident)
        free = self.device_tier.budget - resident - largest
        max_depth = max(0, min(16, len(costs) - 1, free // largest - 2))
        schedule = self.config.schedule
        depth, predicted = choose_depth(costs, link, max_depth, schedule)
        self.depth = depth
        self._turn = len(self.forward_order) - (depth + 1)
        self.plan = dict(
            depth=depth,
            max_depth=max_depth,
            predicted_step_s=predicted,
            predicted_depth2_s=simulate(costs, link, min(2, max_depth), schedule)["step"],
            link_bytes_per_s=link.h2d,
            link_latency_s=link.latency,
            units=len(costs),
        )

    # ------------------------------------------------------------------ fetch
    def _fetch_many(self, slots: list[_Slot]) -> list:
        """Copy thread: one unit's fetches as one job (one hand-off per unit, not per tensor);
        an emulated link is held for all their bytes."""
        started = time.perf_counter()
        out = [self._fetch_job(slot, link=False) for slot in slots]
        self._link_wait(sum(nbytes for _, _, nbytes in out), started)
        return out

    def _fetch_job(self, slot: _Slot, link: bool = True):
        """Worker: bring a slot's master to a device buffer (reading NVMe first if needed)."""
        torch = self.torch
        nbytes = slot.numel * (2 if self.work_dtype == torch.bfloat16 else 4)
        source = slot.master
        if self.nvme is not None:
            source = self.nvme.read_now(f"p{slot.index}", slot.numel).view(slot.shape)
        if self.cuda:  # pragma: no cover - needs a GPU
            if self.nvme is not None:
                source = source.pin_memory()
            with torch.cuda.stream(self.h2d):
                dev = torch.empty(slot.shape, dtype=self.work_dtype, device=self.device)
                dev.copy_(source, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self.h2d)
            return dev, event, nbytes
        started = time.perf_counter()
        dev = torch.empty(slot.shape, dtype=self.work_dtype)
        dev.copy_(source)
        if link:
            self._link_wait(nbytes, started)
        return dev, None, nbytes

    def _link_wait(self, nbytes: int, started: float) -> None:
        """An emulated link: the copy lasts at least ``nbytes / link_bandwidth`` (the rest of
        it slept, costing no CPU, as a copy engine's DMA costs no compute)."""
        if self.link:
            left = started + nbytes / self.link - time.perf_counter()
            if left > 0:
                time.sleep(left)

    def _start_fetch(self, slot: _Slot, prefetch: bool) -> bool:
        return self._start_fetches((slot,), prefetch)

    def _start_fetches(self, slots, prefetch: bool) -> bool:
        """Reserve device memory for each of ``slots`` not fetched yet and submit them as one
        copy job. A prefetch that does not fit (or whose unit is still stepping) stops there,
        submitting what it reserved, and answers False."""
        todo: list[_Slot] = []
        taken: set[int] = set()
        elem = 2 if self.work_dtype == self.torch.bfloat16 else 4
        fits = True
        try:
            for slot in slots:
                if (
                    slot.resident
                    or slot.dev is not None
                    or slot.fetching is not None
                    or slot.index in taken
                ):
                    continue
                owner = self.units[slot.owner]
                if owner.step_future is not None and not owner.step_future.done():
                    if prefetch:
                        fits = False
                        break
                    started = time.perf_counter()
                    owner.step_future.result()
                    self.timings["optimizer_wait"] += time.perf_counter() - started
                try:
                    self.device_tier.reserve(f"p{slot.index}", slot.numel * elem)
                except BudgetExceededError:
                    if prefetch:
                        fits = False
                        break
                    raise
                todo.append(slot)
                taken.add(slot.index)
        finally:
            if todo and self.async_fetch:
                future = self.h2d_pool.submit(self._fetch_many, todo)
                for k, slot in enumerate(todo):
                    slot.fetching = _Part(future, k)
            else:
                for slot in todo:
                    slot.fetching = _Done(self._fetch_job(slot))
        return fits

    def _ensure(self, slot: _Slot) -> None:
        """Make ``slot.param`` usable now (waiting for its fetch)."""
        if slot.resident:
            owner = self.units[slot.owner]
            if owner.step_future is not None and not owner.step_future.done():
                started = time.perf_counter()
                owner.step_future.result()
                self.timings["optimizer_wait"] += time.perf_counter() - started
            return
        if slot.dev is not None:
            return
        self._start_fetch(slot, prefetch=False)
        started = time.perf_counter()
        dev, event, _ = slot.fetching.result()
        self.timings["fetch_wait"] += time.perf_counter() - started
        slot.fetching = None
        if event is not None:  # pragma: no cover - needs a GPU
            stream = self.torch.cuda.current_stream(self.device)
            stream.wait_event(event)
            dev.record_stream(stream)
        slot.dev = dev
        slot.param.__class__ = slot.cls  # fetched: a plain parameter, no tracing
        slot.dev_version = slot.param._version
        slot.param.data = dev
        self._live[dev.untyped_storage().data_ptr()] = slot

    def _access(self, slot: _Slot) -> bool:
        """An op reads ``slot`` outside its owner's forward: make it usable; True when it was
        fetched just for that op (the caller releases it right after)."""
        if slot.resident or slot.dev is not None:
            self._ensure(slot)  # a resident slot: wait for its unit's step
            return False
        prefetched = slot.fetching is not None
        self._ensure(slot)
        return not prefetched

    def _release(self, slot: _Slot) -> None:
        if slot.resident:
            return
        if slot.fetching is not None:  # a prefetch nobody used: finish and drop it
            slot.fetching.result()
            slot.fetching = None
            self.device_tier.free(f"p{slot.index}")
            return
        if slot.dev is None:
            return
        if slot.param._version != slot.dev_version:
            raise SchedlabError(
                f"model wrote parameter '{slot.name}' in place (through a view or .detach()); "
                "the engine trains fetched copies, so the write would be lost"
            )
        self._live.pop(slot.dev.untyped_storage().data_ptr(), None)
        slot.dev = None
        if slot.placeholder is None:  # made once: a release is on every forward's path
            slot.placeholder = _placeholder(slot.shape, self.work_dtype, self.device)
        slot.param.data = slot.placeholder
        slot.param.__class__ = Released
        self.device_tier.free(f"p{slot.index}")

    def _prefetch(self, positions) -> None:
        for pos in positions:
            if not 0 <= pos < len(self.forward_order):
                continue
            unit = self.units[self.forward_order[pos]]
            slots = unit.slots
            if self.phase == "backward":
                slots = [slot for slot in slots if slot.saved]
            if not self._start_fetches(slots, prefetch=True):
                return
            if self.phase == "backward" and self._early_steps() and not self._stepping(unit):
                self._read_states(unit)

    # ------------------------------------------------------------------ hooks
    def _pre_forward(self, unit: _Unit, module, args) -> None:
        if self.phase not in ("forward", "backward"):
            raise SchedlabError(
                "call the engine (engine(batch)), not the model, so that "
                "offloaded parameters are fetched"
            )
        prof = self._profile
        marks = (
            prof["marks"]
            if prof is not None and prof["on"] and "forward_end" not in prof
            else None
        )
        began = time.perf_counter() if marks is not None else 0.0
        if self.phase == "forward":
            if not self._order_known:
                self.forward_order.append(unit.index)
            pos = (
                self._position.get(unit.index, 0)
                if self._order_known
                else len(self.forward_order) - 1
            )
            for slot in unit.slots:
                slot.pos = pos
            if self.offloads and not unit.resident:
                # Its own fetch first, as one job (the link is FIFO), then the window.
                self._start_fetches(unit.slots, prefetch=False)
            if self._order_known and self.offloads:
                self._prefetch(range(pos + 1, pos + 1 + self.depth))
        if unit.resident:  # its states live here: wait only for its own step of last pass
            future = unit.step_future
            if future is not None and not future.done():
                started = time.perf_counter()
                future.result()
                self.timings["optimizer_wait"] += time.perf_counter() - started
        else:
            for slot in unit.slots:
                self._ensure(slot)
        if marks is not None and self.phase == "forward":
            marks.append((unit.index, began, time.perf_counter()))

    def _post_forward(self, unit: _Unit, module, args, output) -> None:
        if self.phase != "forward":
            return  # recomputation inside backward: released when the gradient is final
        if self._order_known and self._position.get(unit.index, 0) >= self._turn:
            return  # stays fetched across the forward -> backward turn
        for slot in unit.slots:
            self._release(slot)

    def _pack(self, tensor):
        if self._live:
            try:
                ptr = tensor.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):
                return tensor
            slot = self._live.get(ptr)
            if slot is not None and tensor.dtype == slot.dev.dtype:
                slot.saved = True
                return _Ref(
                    slot, tuple(tensor.size()), tuple(tensor.stride()), tensor.storage_offset()
                )
        return tensor

    def _unpack(self, packed):
        if isinstance(packed, _Ref):
            slot = packed.slot
            if self.units[slot.owner].submitted:
                raise SchedlabError(
                    f"backward reads parameter '{slot.name}' after its gradient was final "
                    "and its optimizer step started (a detached use of a trained weight)"
                )
            if slot.dev is None:
                self._ensure(slot)
                self._prefetch(range(slot.pos - 1, slot.pos - 1 - self.depth, -1))
            return self.torch.as_strided(slot.dev, packed.size, packed.stride, packed.offset)
        return packed

    def _grad_ready(self, slot: _Slot, param) -> None:
        """A parameter's gradient is final: offload it, free it, maybe start its unit's step."""
        torch = self.torch
        unit = self.units[slot.owner]
        if slot.resident:  # the gradient stays in param.grad next to the device-resident states
            slot.grad_ref = param.grad
            slot.grad_version = param.grad._version
        else:
            grad = param.grad
            if self.cuda and slot.has_grad:  # pragma: no cover - needs a GPU
                if slot.grad_event is not None:
                    slot.grad_event.synchronize()
                    slot.grad_event = None
                slot.host_grad.add_(grad.to("cpu", torch.float32))
            elif self.cuda:  # pragma: no cover - needs a GPU
                ready = torch.cuda.Event()
                ready.record(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(self.d2h):
                    self.d2h.wait_event(ready)
                    slot.host_grad.copy_(grad, non_blocking=True)
                    grad.record_stream(self.d2h)
                    slot.grad_event = torch.cuda.Event()
                    slot.grad_event.record(self.d2h)
            elif self.async_grads:  # the d2h copy thread (one job per unit), backward goes on
                unit.d2h.append((slot, grad, slot.has_grad))
                slot.grad_future = unit.d2h_future
            elif slot.has_grad:
                slot.host_grad.add_(grad)  # accumulation: old + new, as autograd sums .grad
            else:
                slot.host_grad.copy_(grad)
            slot.has_grad = True
            param.grad = None
            slot.master.grad = slot.host_grad
            self._release(slot)
            slot.grad_ref = slot.host_grad
            if slot.grad_future is None:
                slot.grad_version = slot.host_grad._version
        unit.pending -= 1
        if unit.pending == 0 and unit.d2h:
            self._flush_grads(unit)
        if self.phase == "backward":
            if self.offloads:
                self._prefetch(range(slot.pos - 1, slot.pos - 1 - self.depth, -1))
            if self._early_steps() and unit.pending == 0:
                self._submit_step(unit)

    def _flush_grads(self, unit: _Unit) -> None:
        """Submit the unit's gathered gradients as one d2h job (its slots' ``grad_future``
        is the future the job completes)."""
        batch, unit.d2h = unit.d2h, []
        future, unit.d2h_future = unit.d2h_future, Future()
        self.d2h_pool.submit(self._grad_job, batch, future)

    def _grad_job(self, batch: list, future: Future) -> None:
        """d2h copy thread: gradients to their host buffers (summed when accumulating; jobs
        run in order on one thread, so sums happen in plain torch's order)."""
        started = time.perf_counter()
        try:
            nbytes = 0
            for slot, grad, accumulate in batch:
                if accumulate:
                    slot.host_grad.add_(grad)
                else:
                    slot.host_grad.copy_(grad)
                slot.grad_version = slot.host_grad._version
                nbytes += grad.numel() * grad.element_size()
            self._link_wait(nbytes, started)
        except BaseException as exc:  # noqa: BLE001 - raised where the gradient is waited for
            future.set_exception(exc)
        else:
            future.set_result(None)

    def _wait_grads(self, slots) -> None:
        """Wait for the d2h copies of ``slots`` (raising a copy's own error here)."""
        for slot in slots:
            future = slot.grad_future
            if future is not None:
                future.result()
                slot.grad_future = None

    # --------------------------------------------------------------- optimizer
    def _state_keys(self, unit: _Unit) -> list[tuple[_Slot, str]]:
        out = []
        for slot in unit.owned:
            for key, value in unit.optimizer.state.get(slot.master, {}).items():
                if key != "step" and self.torch.is_tensor(value) and value.shape == slot.shape:
                    out.append((slot, key))
        return out

    @staticmethod
    def _stepping(unit: _Unit) -> bool:
        """The unit's step of this pass is submitted and not finished: the worker owns its
        masters and states (the main thread must not read or swap them)."""
        return unit.submitted or (unit.step_future is not None and not unit.step_future.done())

    def _read_states(self, unit: _Unit) -> None:
        """Start reading an NVMe unit's masters and optimizer states (once per step)."""
        if (
            self.nvme is None
            or unit.state_reads is not None
            or unit.optimizer is None
            or unit.resident
        ):
            return
        reads = {}
        for slot in unit.owned:
            reads[(slot.index, "p")] = self.nvme.read(f"p{slot.index}", slot.numel)
        for slot, key in self._state_keys(unit):
            reads[(slot.index, key)] = self.nvme.read(f"s{slot.index}.{key}", slot.numel)
        unit.state_reads = reads

    def _swap_in(self, unit: _Unit) -> None:
        self._read_states(unit)
        reads, unit.state_reads = unit.state_reads, None
        for slot in unit.owned:
            slot.master.data = reads[(slot.index, "p")].result().view(slot.shape)
        for slot, key in self._state_keys(unit):
            state = unit.optimizer.state[slot.master]
            state[key] = reads[(slot.index, key)].result().view(slot.shape)

    def _swap_out_states(self, unit: _Unit, wait: bool) -> None:
        if self.nvme is None or unit.resident:
            return
        torch = self.torch
        for slot in unit.owned:
            self.nvme.write(f"p{slot.index}", slot.master, wait=wait)
            slot.master.data = _placeholder(slot.shape, torch.float32, "cpu")
        for slot, key in self._state_keys(unit):
            state = unit.optimizer.state[slot.master]
            self.nvme.write(f"s{slot.index}.{key}", state[key], wait=wait)
            state[key] = _placeholder(slot.shape, state[key].dtype, "cpu")

    def _step_units(self, units: list[_Unit]) -> None:
        """Worker: one optimizer step over the masters of ``units`` (each unit's params only:
        the shared optimizer's groups hold just them during the call)."""
        started = time.perf_counter()
        seen = []
        lists: list[list] = [[] for _ in self.shared_optimizer.param_groups]
        for unit in units:
            self._wait_grads(unit.owned)
            for slot in unit.owned:
                if slot.grad_event is not None:  # pragma: no cover - needs a GPU
                    slot.grad_event.synchronize()
                    slot.grad_event = None
            if self.nvme is not None and not unit.resident:
                self._swap_in(unit)
            if unit.job_learns:  # no loop edit can race this step: learn the optimizer's own
                seen += [
                    (s, s.grad_ref, s.grad_ref._version)
                    for s in unit.owned
                    if s.grad_ref is not None
                ]
            for g, master in unit.step_lists:
                lists[g].append(master)
        groups = self.shared_optimizer.param_groups
        kept = [group["params"] for group in groups]
        try:
            for group, params in zip(groups, lists, strict=True):
                group["params"] = params
            self.shared_optimizer.step()
        finally:
            for group, params in zip(groups, kept, strict=True):
                group["params"] = params
        for slot, ref, before in seen:  # an optimizer may edit .grad itself (Rprop does)
            slot.opt_edits = ref._version - before
        for unit in units:
            for slot in unit.owned:
                if not slot.resident:  # a resident .grad stays readable until the next backward
                    slot.master.grad = None
            self._swap_out_states(unit, wait=not self.overlap)
        self._opt_time[0] += time.perf_counter() - started
        self._opt_time[1] += sum(s.numel for u in units for s in u.owned)

    def _drain(self) -> None:
        """Worker: step every unit submitted so far, in batches, until none is waiting."""
        while True:
            with self._lock:
                batch, self._ready = self._ready, []
                if not batch:
                    self._draining = False
                    return
            try:
                self._step_units(batch)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on a unit
                for unit in batch:
                    unit.step_future.set_exception(exc)
            else:
                for unit in batch:
                    unit.step_future.set_result(None)

    def _submit_step(self, unit: _Unit) -> None:
        if unit.submitted or unit.optimizer is None:
            return
        if unit.step_future is not None:
            unit.step_future.result()  # last step's: done by now (its forward fetch waited)
        sync_hyperparameters(unit.optimizer, self.user_optimizer, unit.group_ids)
        unit.submitted = True
        unit.early = self.phase == "backward"
        unit.job_learns = not unit.early  # written only here, read by that job
        unit.step_future = Future()
        with self._lock:
            self._ready.append(unit)
            start = not self._draining and not self.inline_steps
            self._draining = self._draining or start
        if start:
            self.opt_pool.submit(self._drain)

    # -------------------------------------------------------------- public API
    def __call__(self, *args, **kwargs):
        if self.phase == "backward":
            raise SchedlabError("forward called during backward")
        torch = self.torch
        if self.phase == "idle":
            self._prepare_step()  # the first forward of a step
        self.phase = "forward"
        for slot in self.slots:
            slot.saved = False
        try:
            if self.offloads:
                with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                    out = self.model(*args, **kwargs)
            else:
                out = self.model(*args, **kwargs)
        finally:
            self.phase = "forward-done"
        prof = self._profile
        if prof is not None and prof["on"] and "forward_end" not in prof:
            prof["forward_end"] = time.perf_counter()
        if not self._order_known:
            seen, order = set(), []
            for index in self.forward_order:
                if index not in seen:
                    seen.add(index)
                    order.append(index)
            self.forward_order = order
            self._position = {u: i for i, u in enumerate(order)}
            self._turn = len(order) - (self.depth + 1)
            self._order_known = True
        if not torch.is_grad_enabled():
            self._finish_pass()
        return out

    forward = __call__

    def _prepare_step(self) -> None:
        prof = self._profile
        if prof is not None and not prof["on"] and self._steps_seen == 1 and self.micro == 0:
            self.synchronize()  # the profiled step's optimizer time is its own
            self._opt_time = [0.0, 0]
            self._profile = {"on": True, "marks": [], "depth": self.depth}
            self.depth, self._turn = 0, len(self.forward_order) - 1  # every fetch on demand
        elif prof is not None and prof["on"] and "backward" in prof:
            self._plan_prefetch()
        for unit in self.units:
            unit.submitted = False
            unit.early = False
        for slot in self.slots:
            slot.has_grad = False
            slot.grad_ref = None

    def _early_steps(self) -> bool:
        """Optimizer steps may start during this backward: the overlap schedule, no global
        clipping (it needs every gradient first), the last accumulated backward, and a loop
        known not to edit gradients between backward() and step() (learnt on the first step,
        which therefore never steps early)."""
        return (
            self.overlap
            and not self.inline_steps
            and self.clip is None
            and self.micro == self.accumulation
            and self._steps_seen > 0
            and not self._user_grads
        )

    def backward(self, loss) -> None:
        """``loss.backward()`` with gradients offloaded and optimizer steps overlapped."""
        if self.phase != "forward-done":
            raise SchedlabError(
                "backward() needs a forward through the engine first (one backward per "
                "forward; gradient_accumulation_steps of them, then step())"
            )
        if self.micro >= self.accumulation:
            raise SchedlabError(
                f"backward() number {self.micro + 1} before step() but "
                f"gradient_accumulation_steps is {self.accumulation}"
            )
        self._clear_grads(first=self.micro == 0)
        self.micro += 1
        for unit in self.units:
            unit.pending = len(unit.owned)
        self.phase = "backward"
        began, waited = time.perf_counter(), self.timings["fetch_wait"]
        try:
            tail = len(self.forward_order) - 1
            self._prefetch(range(tail, tail - self.depth - 1, -1))
            loss.backward()
            ended = time.perf_counter()  # the gradients' last d2h copies are not compute
        finally:
            self.phase = "backward-done"
            for unit in self.units:  # gradients of units some parameter of which got none
                if unit.d2h:
                    self._flush_grads(unit)
            self._wait_grads(self.slots)  # every gradient on the host before the loop sees it
            self._finish_pass()
        if self._profile is not None and self._profile["on"] and "backward" not in self._profile:
            self._profile["backward"] = ended - began - (self.timings["fetch_wait"] - waited)
            self._profile["backward_wall"] = ended - began
        if self.expose_grads:  # what the loop sees (and may edit) before step()
            for slot in self.slots:
                if slot.has_grad and not slot.resident:
                    slot.param.grad = slot.host_grad

    def _finish_pass(self) -> None:
        for slot in self.slots:
            # A resident slot's parameter belongs to the optimizer worker once its unit's step
            # is submitted (the step writes it and clears its .grad): never touch it here.
            # Reading ``param.grad`` while the worker sets it to None segfaults torch 2.13 (a
            # two-thread script reproduces it); that was the intermittent crash.
            if slot.resident or (slot.fetching is None and slot.dev is None):
                continue
            grad = slot.param.grad
            if grad is None or grad is slot.host_grad:  # not a device gradient still pending
                self._release(slot)

    def step(self) -> None:
        """Run the optimizer steps not yet started (all of them, for offload-only)."""
        if self.phase not in ("backward-done", "idle"):
            raise SchedlabError("step() before backward()")
        if self.micro not in (0, self.accumulation):
            raise SchedlabError(
                f"step() after {self.micro} backward passes but "
                f"gradient_accumulation_steps is {self.accumulation}"
            )
        if self.micro:
            self._check_grad_edits()
        if self.clip is not None and self.micro:
            self._clip_gradients()
        for unit in self.units:
            self._submit_step(unit)
        if self.inline_steps:
            self._drain()
            for unit in self.units:
                if unit.submitted:
                    unit.step_future.result()  # raises the step's own error here
        self.micro = 0
        if not self.overlap:
            self.synchronize()
        self.step_count += 1
        self._steps_seen += 1
        self.user_optimizer._opt_called = True  # an LR scheduler's check that step() ran
        self.phase = "idle"

    def _clip_gradients(self) -> None:
        """``torch.nn.utils.clip_grad_norm_`` over every gradient, in ``model.parameters()``
        order (the slots' order), where the steps will read them: host buffers or, for resident
        units, ``param.grad``."""
        for slot in self.slots:
            if slot.grad_event is not None:  # pragma: no cover - needs a GPU
                slot.grad_event.synchronize()
                slot.grad_event = None
        masters = [slot.master for slot in self.slots]
        norm = self.torch.nn.utils.clip_grad_norm_(masters, self.clip)
        self.grad_norm = float(norm)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Also the user optimizer's ``zero_grad``: the engine clears gradients itself at the
        next backward (clearing them while an overlapped step reads them would race), so this
        only refuses the one call that would change training: between backward() and step()."""
        if self.micro:
            raise SchedlabError(
                "zero_grad() between backward() and step() would drop this step's gradients; "
                "call it before the forward or after step() (the engine clears them itself)"
            )

    def _clear_grads(self, first: bool) -> None:
        """Before a backward: no ``.grad`` autograd could accumulate into (exposed host
        buffers are summed by the hooks instead), and at the first backward of a step the
        resident units' gradients of the last step (kept readable until now). At that first
        backward every step of the last pass is done (the forward waited for the units it
        used; the rest are normally done too): this pass's submissions then write the shared
        optimizer's hyper-parameters while no step of the last pass reads them."""
        if first:
            for unit in self.units:
                if unit.step_future is not None and not unit.step_future.done():
                    unit.step_future.result()
        for slot in self.slots:
            if slot.resident:
                if first:
                    slot.param.grad = None
            elif self.expose_grads:
                slot.param.grad = None

    def _check_grad_edits(self) -> None:
        """step(): did the loop edit gradients since backward (``clip_grad_norm_`` on
        ``model.parameters()``, ``p.grad.mul_``, ``p.grad = ...``, ``model.zero_grad()``)?
        Edits of units not yet stepped are taken as plain torch takes them and switch early
        steps off for the rest of training; an edit after a unit's step already ran is one
        line, never a silently different step."""
        for slot in self.slots:
            ref = slot.grad_ref
            if ref is None:
                continue
            exposed = slot.resident or self.expose_grads
            current = slot.param.grad if exposed else ref
            if current is ref and ref._version == slot.grad_version:
                continue
            unit = self.units[slot.owner]
            if unit.early:
                # Any write by the loop is too late or races the step: refuse it. The
                # optimizer's own writes (learnt on a step without early steps) are not the
                # loop's; wait for the step so that they are counted.
                late = current is not ref
                if not late:
                    unit.step_future.result()
                    late = ref._version - slot.grad_version != slot.opt_edits
                if late:
                    raise SchedlabError(
                        f"the gradient of '{slot.name}' changed between backward() and step() "
                        "after the engine had already stepped it (the engine learns on the "
                        "first step whether the loop edits gradients): edit them from the first "
                        "step on, or set gradient_clipping in the engine config"
                    )
                continue
            self._user_grads = True
            if slot.resident:
                continue  # its step reads param.grad itself
            if current is None:  # removed (model.zero_grad()): plain torch skips the parameter
                slot.master.grad = None
            elif current is not ref:
                ref.copy_(current)
                slot.param.grad = ref

    def synchronize(self) -> None:
        """Wait for every optimizer step and NVMe write in flight."""
        started = time.perf_counter()
        for unit in self.units:
            if unit.step_future is not None:
                unit.step_future.result()
        if self.nvme is not None:
            self.nvme.drain()
        self.timings["optimizer_wait"] += time.perf_counter() - started

    # ------------------------------------------------------------- inspection
    def _param_value(self, slot: _Slot):
        """An fp32 CPU copy of a slot's master, on whichever tier (after ``synchronize``)."""
        if self.nvme is not None and not self.units[slot.owner].resident:
            value = self.nvme.read_now(f"p{slot.index}", slot.numel).view(slot.shape)
        else:
            value = slot.master.detach()
        return value.to("cpu", self.torch.float32, copy=True)

    def _state_dict_values(self, module, state_dict, prefix, local_metadata) -> None:
        """``model.state_dict()`` post-hook: the offloaded parameters' real values, not their
        NaN placeholders (``keep_vars=True`` entries, the parameters themselves, are left)."""
        self.synchronize()
        for name, param in module._parameters.items():
            slot = self._slot_of.get(id(param))
            key = prefix + name
            if slot is not None and key in state_dict and state_dict[key] is not param:
                state_dict[key] = self._param_value(slot)

    def _user_clip(self, name: str, original, params: list, args, kwargs):
        """``torch.nn.utils.<name>`` called by the loop on managed parameters: run torch's
        own function on the tensors the steps will read (host masters whose ``.grad`` is the
        host buffer; resident parameters), in the caller's order, so the norm and the scaling
        are plain torch's bit for bit."""
        if self.phase == "backward-done" and any(u.early for u in self.units):
            raise SchedlabError(
                f"torch.nn.utils.{name} after the engine had already stepped units of this "
                "backward (it learns on the first step whether the loop edits gradients): "
                "clip from the first step on, or set gradient_clipping in the engine config"
            )
        self._user_grads = True
        for slot in self.slots:
            if slot.grad_event is not None:  # pragma: no cover - needs a GPU
                slot.grad_event.synchronize()
                slot.grad_event = None
        holders = []
        for p in params:
            slot = self._slot_of.get(id(p))
            holders.append(p if slot is None or slot.resident else slot.master)
        return original(holders, *args, **kwargs)

    def _refuse_user_step(self, optimizer, args, kwargs) -> None:
        raise SchedlabError(
            "the engine steps the parameters: call engine.step(), not optimizer.step() "
            "(the optimizer only holds hyper-parameters for the engine and LR schedulers)"
        )

    def full_state(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """fp32 copies of every parameter and its optimizer state, wherever they live."""
        torch = self.torch
        self.synchronize()
        params, states = {}, {}
        for unit in self.units:
            for slot in unit.owned:
                params[slot.name] = self._param_value(slot)
                entry = {}
                for key, item in (unit.optimizer.state.get(slot.master, {}) or {}).items():
                    if (
                        torch.is_tensor(item)
                        and tuple(item.shape) == slot.shape
                        and self.nvme is not None
                        and not unit.resident
                    ):
                        item = self.nvme.read_now(f"s{slot.index}.{key}", slot.numel)
                        item = item.view(slot.shape)
                    entry[key] = item.to("cpu", copy=True) if torch.is_tensor(item) else item
                states[slot.name] = entry
        return params, states

    def load_full_state(self, params: dict, states: dict) -> None:
        """Put parameters and optimizer states (from :meth:`full_state`) back on their tiers."""
        self.synchronize()
        by_name = {s.name: s for s in self.slots}
        for name in params:
            if name not in by_name:
                raise BadInputError(
                    f"checkpoint has a parameter '{name}' the model lacks", field="checkpoint"
                )
        for name in by_name:
            if name not in params:
                raise BadInputError(f"checkpoint lacks parameter '{name}'", field="checkpoint")
        for unit in self.units:
            for slot in unit.owned:
                value = params[slot.name]
                if tuple(value.shape) != slot.shape:
                    raise BadInputError(
                        f"parameter '{slot.name}' has shape "
                        f"{tuple(value.shape)} in the checkpoint, "
                        f"{slot.shape} in the model",
                        field="checkpoint",
                    )
                if self.nvme is not None and not unit.resident:
                    slot.master.data = value.clone()
                else:
                    with self.torch.no_grad():
                        slot.master.copy_(value)
                unit.optimizer.state[slot.master] = {
                    k: (
                        v.clone().to(slot.master.device)
                        if self.torch.is_tensor(v) and v.numel() > 1
                        else v
                    )
                    for k, v in states.get(slot.name, {}).items()
                }
            self._swap_out_states(unit, wait=True)

    def stats(self) -> dict:
        return dict(
            device_peak=self.device_tier.peak,
            device_budget=self.device_tier.budget,
            model_state_bytes=self.state_bytes,
            window_bytes=self.window_bytes,
            resident_units=sum(u.resident for u in self.units),
            units=len(self.units),
            nvme_read=self.nvme.bytes_read if self.nvme else 0,
            nvme_written=self.nvme.bytes_written if self.nvme else 0,
            checkpointed_modules=self.checkpointed,
            prefetch_depth=self.depth,
            **self.timings,
        )

    def close(self, restore_model: bool = True) -> None:
        """Stop the workers and delete NVMe files; with ``restore_model`` first hand the model
        back as a plain ``nn.Module`` holding the trained fp32 weights (hooks removed), so that
        ``model(x)`` and ``model.state_dict()`` work without the engine."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        _ENGINES.discard(self)
        self.user_optimizer.__dict__.pop("zero_grad", None)
        self.model.__dict__.pop("zero_grad", None)
        with contextlib.suppress(Exception):
            self.synchronize()
        if restore_model:
            self._restore_model()
        for slot in self.slots:
            if OWNERS.get(id(slot.param)) is self._access_ctl:
                del OWNERS[id(slot.param)]
        self.io.shutdown(wait=True)
        self.opt_pool.shutdown(wait=True)
        for pool in (self.h2d_pool, self.d2h_pool):
            if pool is not None and pool is not self.io:
                pool.shutdown(wait=True)
        if self.nvme is not None:
            self.nvme.close(remove=not self.config.keep_nvme_files)

    def _restore_model(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        target = self.device if self.cuda else "cpu"
        for slot in self.slots:
            value = self._param_value(slot)
            OWNERS.pop(id(slot.param), None)
            slot.param.__class__ = slot.cls
            slot.param.data = value.to(target)
            slot.param.grad = None
        self._live.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ checkpoints
    def save_checkpoint(self, directory: str | Path, extra: dict | None = None) -> Path:
        """Weights + optimizer states of every tier (+ ``extra``) as ``directory/state.pt``,
        written atomically (a temporary file, fsync, then rename over the previous one)."""
        torch = self.torch
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise BadInputError("checkpoint path exists and is not a directory", path=directory)
        params, states = self.full_state()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(
                f"cannot create checkpoint directory: {exc.strerror}", path=directory
            ) from None
        tmp = directory / f".state.pt.tmp-{os.getpid()}"
        torch.save(
            {
                "params": params,
                "states": states,
                "step": self.step_count,
                "groups": [
                    {k: v for k, v in group.items() if k != "params"}
                    for group in self.user_optimizer.param_groups
                ],
                "extra": extra or {},
                "format": "synergyscale-engine-1",
            },
            tmp,
        )
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, directory / "state.pt")  # atomic: the old checkpoint or the new one
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself survives a power loss
        finally:
            os.close(fd)
        return directory

    def load_checkpoint(self, directory: str | Path) -> dict:
        """Restore a :meth:`save_checkpoint` directory; returns its ``extra``."""
        torch = self.torch
        path = Path(directory) / "state.pt"
        if not path.is_file():
            raise BadInputError("not a SynergyScale checkpoint (no state.pt)", path=directory)
        try:
            data = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is one bad-input line
            raise BadInputError(
                f"unreadable checkpoint: {str(exc).splitlines()[0][:120]}", path=path
            ) from None
        if not isinstance(data, dict) or data.get("format") != "synergyscale-engine-1":
            raise BadInputError("not a SynergyScale engine checkpoint", path=path)
        self.load_full_state(data["params"], data["states"])
        groups = data.get("groups") or []
        if groups and len(groups) != len(self.user_optimizer.param_groups):
            raise BadInputError(
                f"checkpoint has {len(groups)} optimizer parameter groups, the optimizer "
                f"{len(self.user_optimizer.param_groups)}",
                path=path,
            )
        for group, saved in zip(self.user_optimizer.param_groups, groups, strict=False):
            group.update(saved)  # lr etc. as at the save, as optimizer.load_state_dict does
        self.step_count = int(data["step"])
        return data.get("extra", {})


_ENGINES: weakref.WeakSet = weakref.WeakSet()  # open engines, for the clip interception
_CLIP_ORIGINALS: dict[str, Any] = {}


def _engine_for(params: list):
    for engine in list(_ENGINES):
        slot_of = engine._slot_of
        if any(id(p) in slot_of for p in params):
            return engine
    return None


def _make_clip(name: str, original):
    @functools.wraps(original)
    def clip(parameters, *args, **kwargs):
        import torch

        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        engine = _engine_for(params)
        if engine is None:
            return original(params, *args, **kwargs)
        return engine._user_clip(name, original, params, args, kwargs)

    clip.synergyscale_original = original
    return clip


def _install_clip_interception() -> None:
    """Route ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` /
    ``clip_grads_with_norm_`` on an engine's parameters to the engine (gradients of offloaded
    parameters live in its host buffers, so torch's own function would see ``.grad is None``
    under bf16 or CUDA). Other parameters go to torch's function unchanged. A reference bound
    before this ran (``from torch.nn.utils import clip_grad_norm_`` first) still works on a CPU
    device in fp32, where ``.grad`` is the host buffer itself; edits after an early step are
    caught by the engine's version check either way."""
    if _CLIP_ORIGINALS:
        return
    import torch.nn.utils as nn_utils
    import torch.nn.utils.clip_grad as clip_grad

    for name in ("clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_"):
        original = getattr(clip_grad, name, None)
        if original is None:
            continue
        _CLIP_ORIGINALS[name] = original
        wrapper = _make_clip(name, original)
        setattr(clip_grad, name, wrapper)
        if getattr(nn_utils, name, None) is original:
            setattr(nn_utils, name, wrapper)


def initialize(model, optimizer, config: EngineConfig | dict | None = None) -> SynergyEngine:
    """Offload ``model``'s states under ``config`` and return the training engine.

    ``optimizer`` is any ``torch.optim`` optimizer over the model's parameters; its class and
    per-group hyper-parameters are applied to each unit's fp32 masters (its states, if any, are
    moved over). Bad config fields raise one :class:`~schedlab.core.errors.ConfigError` line.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            f"model must be a torch.nn.Module, got {type(model).__name__}", field="model"
        )
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(
            f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}",
            field="optimizer",
        )
    if config is None:
        config = EngineConfig()
    elif not isinstance(config, EngineConfig):
        config = validate_model(EngineConfig, config)
    return SynergyEngine(model, optimizer, config)


def model_state_bytes(model) -> int:
    """16 B per trainable parameter: fp32 weight, gradient and two Adam moments."""
    return 16 * sum(p.numel() for p in model.parameters() if p.requires_grad)
