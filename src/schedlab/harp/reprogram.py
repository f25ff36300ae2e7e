"""Chips smaller than the model: weights streamed into the crossbars one layer group at a time.

HARP (../shared/papers/16-harp.md) keeps weights resident; a PUMA-sized chip (17,664
crossbars of 128x128) cannot hold BERT-base at 8-bit weights (20,736), and GPT-2 medium needs
6x that. Here the model is cut, in topological order and at layer boundaries where possible,
into groups that fit; every inference (or batch of ``inferences_per_load``) writes each
group's weights and runs it with the chosen mapping and schedule (pipelined within the
group, a barrier between groups: the next group's first op needs crossbars that are only
written once the previous group is done with them).

* ``sequential``: each group may use the whole chip; per batch
  ``sum_g (write_g + B * compute_g)``.
* ``double-buffered``: each group uses half the chip; while group g computes, the other half
  is written with group g+1, so per batch ``sum_g max(B * compute_g, write_{g+1 mod G})``.

A write of X crossbars takes ``ceil(X / tiles) * write_ns`` (the tiles of the part of the chip
written -- all of it for ``sequential``, half for ``double-buffered`` -- in parallel, a tile's
crossbars one after another; PUMA ``xbar_wr_lat`` = 10.97 us per 128x128 crossbar) or the time
to fetch the weights over ``offchip_gbps``, whichever is longer, and ``X * write_ns *
write_power_mw`` pJ (PUMA ``xbar_wr_pow`` = 2.06 mW, 22.6 nJ per crossbar). Endurance: a
cell is rewritten once per batch for every group placed on it, so the chip survives
``endurance_writes / writes_per_cell`` batches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from schedlab.core.errors import ConfigError
from schedlab.harp.arch import ArchConfig
from schedlab.harp.costs import tiling
from schedlab.harp.workloads import Op, Workload

MODES = ("sequential", "double-buffered")


def one_copy_crossbars(work: Workload, arch: ArchConfig) -> int:
    """Crossbars needed to hold one copy of every static weight."""
    return sum(tiling(op, arch).crossbars for op in work.static_ops)


def fits(work: Workload, arch: ArchConfig) -> bool:
    return one_copy_crossbars(work, arch) <= arch.max_crossbars


def partition(work: Workload, arch: ArchConfig, capacity: int) -> list[tuple[int, int]]:
    """Op index ranges [lo, hi) whose static weights fit ``capacity`` crossbars each.

    Consecutive ops of the same layer are kept together while a whole layer fits; a layer too
    large for one group is split between ops; an op too large for a group is an error.
    """
    need = [tiling(op, arch).crossbars if op.kind == "static" else 0 for op in work.ops]
    for op, n in zip(work.ops, need, strict=True):
        if n > capacity:
            raise ConfigError(
                f"op {op.name} needs {n} crossbars for one copy, more than the {capacity} a "
                f"layer group can use, so even reprogramming cannot run {work.name}",
                field="max_crossbars", hint="use larger crossbars or more of them")
    units: list[tuple[int, int]] = []  # runs of one layer
    start = 0
    for i in range(1, len(work.ops) + 1):
        if i == len(work.ops) or work.ops[i].layer != work.ops[start].layer:
            units.append((start, i))
            start = i
    groups: list[tuple[int, int]] = []
    lo, used = 0, 0
    for u_lo, u_hi in units:
        size = sum(need[u_lo:u_hi])
        if used + size <= capacity:
            used += size
            continue
        if used and size <= capacity:  # close the group at the layer boundary
            groups.append((lo, u_lo))
            lo, used = u_lo, size
            continue
        for i in range(u_lo, u_hi):  # the layer alone is too large: split between its ops
            if used + need[i] > capacity:
                groups.append((lo, i))
                lo, used = i, 0
            used += need[i]
    groups.append((lo, len(work.ops)))
    return [g for g in groups if g[1] > g[0]]


def group_workload(work: Workload, lo: int, hi: int, index: int) -> Workload:
    """Ops [lo, hi) as a workload; inputs from earlier groups are complete and buffered."""
    names = {op.name for op in work.ops[lo:hi]}
    ops: list[Op] = [replace(op, inputs=tuple(i for i in op.inputs if i[0] in names))
                     for op in work.ops[lo:hi]]
    return Workload(f"{work.name}[g{index}]", work.tokens, tuple(ops), work.causal,
                    meta={**work.meta, "group": index})


def write_cost(crossbars: int, weights: int, arch: ArchConfig) -> tuple[float, float]:
    """(ns, pJ) to write ``crossbars`` holding ``weights`` weights into ``arch.max_crossbars``
    (whose tiles write in parallel)."""
    xbar, mem = arch.crossbar, arch.memory
    tiles = max(1, math.ceil(arch.max_crossbars / mem.crossbars_per_tile))
    cells = math.ceil(crossbars / tiles) * xbar.write_ns
    fetch = weights * xbar.weight_bits / mem.offchip_gbps  # Gbps = bits per ns
    return max(cells, fetch), crossbars * xbar.write_ns * xbar.write_power_mw


@dataclass(frozen=True)
class GroupResult:
    """One layer group as run: its time, busy time per pool kind, writes and energy."""

    ops: int
    crossbars: int
    compute_ns: float
    write_ns: float
    write_pj: float
    analog_busy: float
    digital_busy: float
    energy_pj: dict[str, float]
    max_replicas: int


@dataclass(frozen=True)
class Streamed:
    """A streamed inference: per-inference latency and what the writes cost."""

    mode: str
    capacity: int
    groups: list[GroupResult]
    latency_ns: float
    write_ns: float  # write time per inference (not all of it on the critical path)
    write_pj: float  # per inference
    writes_per_cell: float  # per inference, on the most-written cell
    lifetime_inferences: float


def run_groups(work: Workload, arch: ArchConfig, capacity: int, strategy: str,
               scheduler: str, method: str, solver: str) -> list[GroupResult]:
    """Map, schedule and time every group on a chip of ``capacity`` crossbars."""
    from schedlab.harp.costs import dynamic_energy_pj
    from schedlab.harp.mapping import make_mapper
    from schedlab.harp.planrun import run_plan
    from schedlab.harp.policies import make_scheduler

    sub_arch = arch.model_copy(update={"max_crossbars": capacity})
    results = []
    for index, (lo, hi) in enumerate(partition(work, arch, capacity)):
        part = group_workload(work, lo, hi, index)
        if part.static_ops:
            mapping = make_mapper(strategy, solver).map(part, sub_arch)
        else:  # a tail of digital ops (rare): nothing to write
            from schedlab.harp.mapping import Mapping

            mapping = Mapping(strategy, "none", {}, 0, 0.0)
        plan = make_scheduler(scheduler).plan(part, mapping, sub_arch)
        latency, busy = run_plan(plan, method)
        weights = sum(op.k * op.n * mapping.replicas_of(op.name) for op in part.static_ops)
        # written into the group's own share of the chip: in double-buffered mode only the
        # half not computing, so half the tiles write in parallel
        w_ns, w_pj = write_cost(mapping.crossbars, weights, sub_arch)
        results.append(GroupResult(
            len(part.ops), mapping.crossbars, latency, w_ns, w_pj,
            sum(b for p, b in busy.items() if p.startswith("xbar:")),
            sum(b for p, b in busy.items() if not p.startswith("xbar:")),
            dynamic_energy_pj(part, arch), max(mapping.replicas.values(), default=1)))
    return results


def stream(work: Workload, arch: ArchConfig, strategy: str, scheduler: str, method: str,
           solver: str = "auto") -> Streamed:
    """The best streamed execution allowed by ``arch.reprogram.overlap``."""
    cfg = arch.reprogram
    modes = MODES if cfg.overlap == "auto" else (cfg.overlap,)
    best: Streamed | None = None
    failure: ConfigError | None = None
    batch = cfg.inferences_per_load
    for mode in modes:
        capacity = arch.max_crossbars if mode == "sequential" else arch.max_crossbars // 2
        try:
            groups = run_groups(work, arch, max(capacity, 1), strategy, scheduler, method,
                                solver)
        except ConfigError as exc:  # report the whole-chip (sequential) failure, the larger
            failure = failure or exc  # capacity: "even reprogramming cannot run" holds for it
            continue
        writes = [g.write_ns for g in groups]
        if mode == "sequential":
            per_batch = sum(w + batch * g.compute_ns for w, g in zip(writes, groups,
                                                                      strict=True))
            per_cell = len(groups)  # every group may occupy every cell
        else:
            per_batch = sum(max(batch * g.compute_ns, writes[(i + 1) % len(groups)])
                            for i, g in enumerate(groups))
            per_cell = math.ceil(len(groups) / 2)  # the halves alternate
        result = Streamed(mode, capacity, groups, per_batch / batch, sum(writes) / batch,
                          sum(g.write_pj for g in groups) / batch, per_cell / batch,
                          cfg.endurance_writes * batch / per_cell)
        if best is None or result.latency_ns < best.latency_ns:
            best = result
    if best is None:
        assert failure is not None
        raise failure
    return best
