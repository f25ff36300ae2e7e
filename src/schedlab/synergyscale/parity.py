"""Train one model twice, with plain torch and through :func:`initialize`, and compare.

The yardstick for "the engine does not alter training semantics" (11-synergyscale.md): the same
model (same seed), optimizer, scheduler and batches, trained with the user's own loop in plain
torch and with the engine's loop; losses, weights and buffers are compared after N steps. Plain
torch is the reference because it is what users would otherwise run, independent of the engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass
class Run:
    losses: list[float]
    params: dict[str, Any]
    buffers: dict[str, Any]


@dataclass
class Loop:
    """What the training loop does besides forward/backward/step."""

    steps: int
    accumulation: int = 1
    clip: float | None = None
    autocast: bool = False  # bf16 autocast around forward and loss
    make_scheduler: Callable[[Any], Any] | None = None
    # Clip in the loop itself, ``user_clip(model.parameters(), clip)`` between the last
    # backward and step (e.g. ``torch.nn.utils.clip_grad_norm_``), in both runs; None: the
    # engine clips (``gradient_clipping``) and plain torch calls ``clip_grad_norm_``.
    user_clip: Callable[..., Any] | None = None


def _autocast(loop: Loop):
    import torch

    if loop.autocast:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _snapshot(model) -> dict[str, Any]:
    return {n: b.detach().clone() for n, b in model.named_buffers()}


def train_plain(make_model, make_optimizer, batches: Sequence, loss_fn, loop: Loop) -> Run:
    """The reference: ``zero_grad``, ``accumulation`` backward passes, clip, step, scheduler."""
    import torch

    model = make_model()
    optimizer = make_optimizer(model)
    scheduler = loop.make_scheduler(optimizer) if loop.make_scheduler else None
    losses = []
    for step in range(loop.steps):
        optimizer.zero_grad()
        for micro in range(loop.accumulation):
            with _autocast(loop):
                loss = loss_fn(model, batches[step * loop.accumulation + micro])
                loss = loss / loop.accumulation
            loss.backward()
            losses.append(loss.item())
        if loop.clip is not None and loop.user_clip is not None:
            loop.user_clip(model.parameters(), loop.clip)
        elif loop.clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), loop.clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return Run(losses, params, _snapshot(model))


def train_engine(
    make_model, make_optimizer, batches: Sequence, loss_fn, loop: Loop, config: dict
) -> Run:
    """The same loop through the engine (clipping and accumulation are config fields)."""
    from schedlab.synergyscale.engine import initialize

    model = make_model()
    optimizer = make_optimizer(model)
    scheduler = loop.make_scheduler(optimizer) if loop.make_scheduler else None
    config = dict(config, gradient_accumulation_steps=loop.accumulation)
    if loop.clip is not None and loop.user_clip is None:
        config["gradient_clipping"] = loop.clip
    engine = initialize(model, optimizer, config)
    losses = []
    try:
        for step in range(loop.steps):
            for micro in range(loop.accumulation):
                with _autocast(loop):
                    loss = loss_fn(engine, batches[step * loop.accumulation + micro])
                    loss = loss / loop.accumulation
                engine.backward(loss)
                losses.append(loss.item())
            if loop.clip is not None and loop.user_clip is not None:
                loop.user_clip(model.parameters(), loop.clip)
            engine.step()
            if scheduler is not None:
                scheduler.step()
        params, _ = engine.full_state()
        for name, p in model.named_parameters():  # frozen ones stay in the model
            if name not in params:
                params[name] = p.detach().clone()
        return Run(losses, params, _snapshot(model))
    finally:
        engine.close()


def max_gap(a: Run, b: Run) -> float:
    """Largest absolute difference over losses, parameters and floating buffers."""
    import torch

    if len(a.losses) != len(b.losses) or a.params.keys() != b.params.keys():
        raise ValueError("runs differ in length or parameter names")
    gap = max((abs(x - y) for x, y in zip(a.losses, b.losses, strict=True)), default=0.0)
    for name, value in a.params.items():
        gap = max(gap, float((value - b.params[name]).abs().max()))
    for name, value in a.buffers.items():
        if torch.is_floating_point(value):
            gap = max(gap, float((value - b.buffers[name]).abs().max()))
        elif not torch.equal(value, b.buffers[name]):
            gap = max(gap, float("inf"))
    return gap
