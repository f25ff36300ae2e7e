"""A stream-level model of one :func:`~schedlab.synergyscale.engine.initialize` step, and the
planner that picks the prefetch window from it (issue 46, item 3).

The engine's step is four resources working at once, as on a GPU server:

* the **compute stream**: each unit's forward, then its backward in reverse order;
* the **h2d link** (one copy engine): parameter fetches, in the order they are issued. A unit
  fetches at its forward pre-hook if it was not prefetched, then the pre-hook of the unit at
  forward position ``i`` issues the fetches of positions ``i+1 .. i+depth``. The last
  ``depth + 1`` units stay fetched across the forward -> backward turn; in backward a unit
  whose weights backward reads (``bwd_bytes``) is fetched again, ``depth`` units ahead in
  reverse order;
* the **d2h link** (the other copy engine): each unit's gradients, once its backward is done;
* the **CPU optimizer worker**: a unit's step once its gradients are on the host. The overlap
  schedule steps units during backward (and the next forward's unit ``i`` waits only for unit
  ``i``'s step); offload-only steps every unit after backward, the main thread waiting for it.

A transfer of ``b`` bytes takes ``latency + b / bandwidth`` on its link (PCIe 4.0 x16: ~25 GB/s
effective per direction of its 31.5 GB/s raw; see ``PCIE4_X16``). The model is deterministic and
pure Python: the engine feeds it measured per-unit compute and optimizer seconds, and the
planner takes the depth with the shortest modelled period that fits the device budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PCIE4_X16", "Link", "UnitCost", "choose_depth", "gpt_units", "simulate"]


@dataclass(frozen=True)
class Link:
    """One copy engine per direction: bytes/s and a fixed cost per copy (seconds)."""

    h2d: float
    d2h: float
    latency: float = 0.0

    def h2d_time(self, nbytes: int, copies: int = 1) -> float:
        return 0.0 if nbytes <= 0 else copies * self.latency + nbytes / self.h2d

    def d2h_time(self, nbytes: int, copies: int = 1) -> float:
        return 0.0 if nbytes <= 0 else copies * self.latency + nbytes / self.d2h


# PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b -> 31.5 GB/s raw per direction; pinned-memory
# cudaMemcpy reaches ~25 GB/s (NVIDIA's bandwidthTest on A100/H100 hosts reports 24-26 GB/s).
PCIE4_X16 = Link(h2d=25e9, d2h=25e9, latency=10e-6)


@dataclass(frozen=True)
class UnitCost:
    """One unit in forward order. Seconds of compute and optimizer, bytes on each link."""

    fwd: float
    bwd: float
    fetch_bytes: int = 0  # forward fetch (0: resident)
    bwd_bytes: int = 0  # refetched for backward (its weights are saved tensors)
    grad_bytes: int = 0  # gradients offloaded after its backward (0: resident)
    opt: float = 0.0  # its optimizer step
    copies: int = 1  # tensors per transfer (each pays the link's latency)


def _period(units: Sequence[UnitCost], link: Link, depth: int, overlap: bool, steps: int):
    n = len(units)
    turn = n - (depth + 1)
    opt_done = [0.0] * n  # completion of each unit's last step
    t = 0.0  # main thread / compute stream
    starts, busy = [], {"compute": 0.0, "h2d": 0.0, "d2h": 0.0, "optimizer": 0.0}
    for _ in range(steps):
        starts.append(t)
        h2d = t  # the h2d link is idle when a step starts (everything fetched was used)
        fetched: dict[int, float] = {}
        back: dict[int, float] = {}

        def issue(j: int, now: float, done: dict[int, float], _fetched=fetched) -> None:
            """Queue unit j's fetch (forward, or backward's refetch) on the FIFO h2d link."""
            nonlocal h2d
            if j in done or not 0 <= j < n:
                return
            if done is _fetched:
                nbytes = units[j].fetch_bytes
            else:  # kept across the turn, or nothing saved: no refetch
                nbytes = 0 if j >= turn else units[j].bwd_bytes
            if nbytes <= 0:
                done[j] = now
                return
            cost = link.h2d_time(nbytes, units[j].copies)
            h2d = max(h2d, now) + cost
            busy["h2d"] += cost
            done[j] = h2d

        for i, u in enumerate(units):  # forward
            issue(i, t, fetched)  # its own fetch first, then the window ahead
            for j in range(i + 1, min(n, i + 1 + depth)):
                issue(j, t, fetched)
            t = max(t, fetched[i], opt_done[i] if overlap else 0.0) + u.fwd
            busy["compute"] += u.fwd
        h2d = max(h2d, t)
        for j in range(n - 1, n - 2 - depth, -1):
            issue(j, t, back)
        d2h = t
        worker = max([t] + opt_done) if overlap else t
        grads_in = [0.0] * n
        for i in range(n - 1, -1, -1):  # backward
            issue(i, t, back)
            t = max(t, back[i]) + units[i].bwd
            busy["compute"] += units[i].bwd
            d2h = max(d2h, t) + link.d2h_time(units[i].grad_bytes, units[i].copies)
            busy["d2h"] += link.d2h_time(units[i].grad_bytes, units[i].copies)
            grads_in[i] = d2h if units[i].grad_bytes else t
            for j in range(i - 1, i - 1 - depth, -1):
                issue(j, t, back)
            if overlap:
                worker = max(worker, grads_in[i]) + units[i].opt
                opt_done[i] = worker
        t = max(t, d2h)  # backward() returns with every gradient on the host
        if not overlap:  # step(): every optimizer step, synchronously
            for i in range(n):
                t += units[i].opt
                opt_done[i] = t
        busy["optimizer"] += sum(u.opt for u in units)
    starts.append(t)
    return starts[-1] - starts[-2], {k: v / steps for k, v in busy.items()}


def simulate(
    units: Sequence[UnitCost], link: Link, depth: int, schedule: str = "overlap", steps: int = 3
) -> dict:
    """Steady-state seconds per step (the last of ``steps`` consecutive steps) and each
    resource's busy seconds per step."""
    if not units:
        raise ValueError("no units")
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    period, busy = _period(units, link, depth, schedule == "overlap", steps)
    return {"step": period, "busy": busy, "depth": depth, "schedule": schedule}


def choose_depth(
    units: Sequence[UnitCost],
    link: Link,
    max_depth: int,
    schedule: str = "overlap",
    tolerance: float = 0.01,
) -> tuple[int, float]:
    """The smallest depth in ``0..max_depth`` whose modelled step is within ``tolerance`` of the
    best (a deeper window holds more device memory for nothing). Returns (depth, seconds)."""
    results = [simulate(units, link, d, schedule)["step"] for d in range(max(0, max_depth) + 1)]
    best = min(results)
    for d, s in enumerate(results):
        if s <= best * (1 + tolerance):
            return d, s
    return 0, results[0]  # pragma: no cover - min is always within tolerance


def gpt_units(
    n_layer: int,
    d_model: int,
    vocab: int,
    tokens: int,
    hw,
    budget_fraction: float,
    schedule: str,
    depth_for_window: int = 2,
) -> tuple[list[UnitCost], int]:
    """A GPT step on a modelled GPU server (``hardware.Hardware``) as units in forward order:
    embeddings, per layer 2 LayerNorms and 4 Linears (qkv 3d^2, proj d^2, fc 4d^2, out 4d^2),
    final LayerNorm, head. Mixed precision as ZeRO-Offload/Infinity: 2-byte working weights
    and gradients cross the link, fp32 masters and Adam moments stay on the host (CPU Adam at
    ``hw.cpu_adam_rate``). Compute: 2 FLOPs per parameter per token forward, 4 backward, at
    ``hw.device_flops`` (attention's own FLOPs left out). The overlap schedule keeps the units
    used last in forward resident (16 B/param on the device, Adam there) while they fit the
    budget next to the fetch window, as the engine's residency does; offload-only keeps none.
    Returns (units, largest unit's parameters)."""
    shapes: list[tuple[int, bool, bool]] = [(vocab * d_model, False, True)]  # (params, saved,
    for _ in range(n_layer):  # embedding-like: gather, no matmul)
        shapes += [(2 * d_model, True, False), (3 * d_model * d_model + 3 * d_model, True, False),
                   (d_model * d_model + d_model, True, False), (2 * d_model, True, False),
                   (4 * d_model * d_model + 4 * d_model, True, False),
                   (4 * d_model * d_model + d_model, True, False)]
    shapes += [(2 * d_model, True, False), (vocab * d_model, True, False)]
    total = sum(p for p, _, _ in shapes)
    largest = max(p for p, _, _ in shapes)
    budget = budget_fraction * 16 * total
    room = budget - ((depth_for_window + 2) * largest * 2 + largest * 2)
    resident = [False] * len(shapes)
    if schedule == "overlap":
        for i in range(len(shapes) - 1, -1, -1):
            need = 16 * shapes[i][0]
            if need > room:
                break
            resident[i] = True
            room -= need
    units = []
    for (params, saved, gather), res in zip(shapes, resident, strict=True):
        flops = 0.0 if gather else 2.0 * params * tokens
        units.append(
            UnitCost(
                fwd=flops / hw.device_flops + hw.task_overhead,
                bwd=2 * flops / hw.device_flops + hw.task_overhead,
                fetch_bytes=0 if res else 2 * params,
                bwd_bytes=0 if res or not saved else 2 * params,
                grad_bytes=0 if res else 2 * params,
                opt=params / (hw.device_adam_rate if res else hw.cpu_adam_rate),
            )
        )
    return units, largest
