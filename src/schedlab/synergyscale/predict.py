"""Step-time prediction for the :func:`~schedlab.synergyscale.engine.initialize` engine, checked
on models it was not fitted on (issue 46).

The planner's model of one training step on this CPU, where the "device", the host and the
worker threads share the same cores (so costs add up; overlap hides nothing of CPU work):

    step = compute(model) + optimizer(model)          profiled in plain torch: one fwd+bwd,
                                                      one torch.optim.Adam step (the planner's
                                                      warm-up profile; the engine never runs)
         + per_unit x units                           hooks, hand-offs, optimizer batches
         + per_slot[tier] x offloaded parameters      per-tensor costs (fetch, release, files)
         + per_byte[tier] x offloaded parameter bytes copies (host) or reads/writes (NVMe)

``per_unit``, ``per_slot`` and ``per_byte`` are engine coefficients fitted on two sizes of one
model family (the nanoGPT-style GPT of ``nanogpt.py``: a wide one, bytes-heavy, and a narrow
one, tensor-count-heavy, so that the two per-tier coefficients separate) and then applied
unchanged to other models (GPT-2 from transformers configs). Times are CPU seconds per step
(``time.process_time``, all threads): on a machine
shared by many jobs wall time swings 2-10x within minutes, CPU time much less. For the NVMe
tier that counts the CPU work of the I/O (aligned copies, syscalls), not time waiting on the disk.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Workload:
    name: str
    make_model: Callable[[], Any]
    batch: Callable[[], tuple]  # () -> args of forward
    loss: Callable[[Any, tuple], Any]  # (model or engine, batch) -> loss tensor


def _cpu_per_step(step: Callable[[], None], steps: int, sync=None) -> float:
    step()  # warm-up (and, for an engine, its first step, which never overlaps)
    if sync:
        sync()
    out = []
    for _ in range(steps):
        began = time.process_time()
        step()
        if sync:
            sync()
        out.append(time.process_time() - began)
    return statistics.median(out)


def profile(work: Workload, steps: int) -> dict[str, float]:
    """Plain torch: CPU seconds of one fwd+bwd and of one Adam step."""
    import torch

    model = work.make_model()
    batch = work.batch()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def fwd_bwd():
        opt.zero_grad()
        work.loss(model, batch).backward()

    compute = _cpu_per_step(fwd_bwd, steps)
    fwd_bwd()
    optimizer = _cpu_per_step(opt.step, steps)
    return dict(compute_s=compute, optimizer_s=optimizer)


def engine_run(work: Workload, config: dict, steps: int) -> dict[str, float]:
    """The engine's CPU seconds per step, its plan (units, offloaded bytes) and device peak."""
    import torch

    from schedlab.synergyscale.engine import initialize

    model = work.make_model()
    engine = initialize(model, torch.optim.Adam(model.parameters(), lr=1e-3), config)
    batch = work.batch()

    def step():
        engine.backward(work.loss(engine, batch))
        engine.step()

    try:
        measured = _cpu_per_step(step, steps, engine.synchronize)
        stats = engine.stats()
        return dict(
            measured_s=measured,
            units=float(len(engine.units)),
            offloaded_bytes=float(sum(4 * s.numel for s in engine.slots if not s.resident)),
            offloaded_slots=float(sum(1 for s in engine.slots if not s.resident)),
            device_peak=float(stats["device_peak"]),
            device_budget=float(stats["device_budget"]),
        )
    finally:
        engine.close()


@dataclass
class Coefficients:
    per_unit_s: float
    per_slot_s: dict[str, float]  # tier -> CPU seconds per offloaded parameter tensor
    per_byte_s: dict[str, float]  # tier -> CPU seconds per offloaded parameter byte


def fit(
    works: list[Workload], tiers: dict[str, Callable[[str], dict]], steps: int
) -> tuple[Coefficients, list[dict]]:
    """Fit ``per_unit`` on the everything-fits runs and, per tier, ``per_slot`` and
    ``per_byte`` by non-negative least squares over the offloading runs of ``works``
    (``tiers``: name -> engine config for a workload name)."""
    import numpy as np

    rows, unit_rates = [], []
    extras: dict[str, list[tuple[float, float, float]]] = {t: [] for t in tiers}
    for work in works:
        base = profile(work, steps)
        fits = engine_run(work, dict(device_budget=None), steps)
        extra = fits["measured_s"] - base["compute_s"] - base["optimizer_s"]
        unit_rates.append(max(extra, 0.0) / fits["units"])
        rows.append(dict(model=work.name, tier="fits", **base, **fits))
        for tier, config in tiers.items():
            got = engine_run(work, config(work.name), steps)
            extras[tier].append(
                (
                    got["measured_s"] - base["compute_s"] - base["optimizer_s"],
                    got["offloaded_slots"],
                    got["offloaded_bytes"],
                    got["units"],
                )
            )
            rows.append(dict(model=work.name, tier=tier, **base, **got))
    per_unit = statistics.mean(unit_rates)
    per_slot, per_byte = {}, {}
    for tier, points in extras.items():
        a = np.array([[p[1], p[2]] for p in points])
        y = np.array([p[0] - per_unit * p[3] for p in points])
        coef = np.linalg.lstsq(a, y, rcond=None)[0]
        if (coef < 0).any():  # a negative rate is noise: keep the better single term
            one = max(
                (
                    (float(np.dot(y, a[:, i]) / np.dot(a[:, i], a[:, i])), i)
                    for i in range(2)
                ),
                key=lambda c: -float(np.sum((y - c[0] * a[:, c[1]]) ** 2)),
            )
            coef = np.zeros(2)
            coef[one[1]] = max(one[0], 0.0)
        per_slot[tier], per_byte[tier] = float(coef[0]), float(coef[1])
    return Coefficients(per_unit, per_slot, per_byte), rows


def predict(base: dict, plan: dict, coef: Coefficients, tier: str) -> float:
    return (
        base["compute_s"]
        + base["optimizer_s"]
        + coef.per_unit_s * plan["units"]
        + coef.per_slot_s.get(tier, 0.0) * plan["offloaded_slots"]
        + coef.per_byte_s.get(tier, 0.0) * plan["offloaded_bytes"]
    )


def check(
    fit_on: list[Workload],
    targets: list[Workload],
    budget: float,
    nvme_dir: Path,
    steps: int,
) -> list[dict]:
    """Fit on ``fit_on``, predict and measure every target on host and NVMe tiers (and with
    everything resident). Rows: model, tier, predicted_ms, measured_ms, error, fitted."""
    tiers = {
        "host": lambda name: dict(device_budget=budget),
        "nvme": lambda name: dict(
            device_budget=budget, tier="nvme", nvme_dir=str(nvme_dir / f"fit-{name}")
        ),
    }
    coef, fitted = fit(fit_on, tiers, steps)
    rows = []
    for r in fitted:
        rows.append(
            dict(
                model=r["model"],
                tier=r["tier"],
                fitted=True,
                predicted_ms=float("nan"),
                measured_ms=1e3 * r["measured_s"],
                error=float("nan"),
                units=r["units"],
                offloaded_mb=r["offloaded_bytes"] / 1e6,
                device_peak=r["device_peak"],
                device_budget=r["device_budget"],
            )
        )
    for work in targets:
        base = profile(work, steps)
        configs = {
            "fits": dict(device_budget=None),
            "host": dict(device_budget=budget),
            "nvme": dict(
                device_budget=budget, tier="nvme", nvme_dir=str(nvme_dir / work.name)
            ),
        }
        for tier, config in configs.items():
            got = engine_run(work, config, steps)
            predicted = predict(base, got, coef, tier)
            rows.append(
                dict(
                    model=work.name,
                    tier=tier,
                    fitted=False,
                    predicted_ms=1e3 * predicted,
                    measured_ms=1e3 * got["measured_s"],
                    error=predicted / got["measured_s"] - 1,
                    units=got["units"],
                    offloaded_mb=got["offloaded_bytes"] / 1e6,
                    device_peak=got["device_peak"],
                    device_budget=got["device_budget"],
                )
            )
    return rows


def nanogpt_workload(config: dict, batch: int = 4) -> Workload:
    import torch

    from schedlab.synergyscale.nanogpt import NanoGPT

    def make():
        return NanoGPT(dict(config), seed=0)

    def data():
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, config["vocab"], (batch, config["seq"]), generator=g)
        return (x,)

    def loss(model, b):
        return model(b[0], b[0])[1]

    return Workload(f"nanogpt-d{config['d_model']}-l{config['n_layer']}", make, data, loss)


def gpt2_workload(name: str, config: dict, batch: int = 4, seq: int = 64) -> Workload:
    import torch

    def make():
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        return GPT2LMHeadModel(
            GPT2Config(**config, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        )

    def data():
        g = torch.Generator().manual_seed(0)
        return (torch.randint(0, config["vocab_size"], (batch, seq), generator=g),)

    def loss(model, b):
        return model(b[0], labels=b[0]).loss

    return Workload(name, make, data, loss)
