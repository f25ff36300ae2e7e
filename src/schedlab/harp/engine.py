"""One call from (model, architecture, mapping strategy, scheduler) to latency/area/energy.

This is the library entry point the CLI, the experiments and a NAS loop use (HARP,
../shared/papers/16-harp.md): map the static weights, let the scheduler write a plan, then
either estimate it analytically (fast) or simulate it event by event (reference).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from schedlab.core.errors import UnknownNameError
from schedlab.harp.arch import ArchConfig
from schedlab.harp.costs import area_mm2, dynamic_energy_pj, leakage_mw, program_cost
from schedlab.harp.mapping import Mapping, make_mapper
from schedlab.harp.planrun import METHODS, run_plan
from schedlab.harp.policies import make_scheduler, plan_summary
from schedlab.harp.workloads import Workload


@dataclass
class Report:
    """Everything one evaluation measured; flat fields so it drops into a frame row."""

    model: str
    tokens: int
    strategy: str
    scheduler: str
    method: str
    latency_us: float
    tokens_per_s: float
    area_mm2: float
    energy_uj: float
    crossbars: int
    max_replicas: int
    analog_util: float
    digital_util: float
    program_us: float
    seconds: float
    area_breakdown: dict[str, float] = field(default_factory=dict)
    energy_breakdown: dict[str, float] = field(default_factory=dict)
    modes: dict[str, int] = field(default_factory=dict)
    groups: int = 1  # layer groups streamed per inference (1 = weights resident)
    streaming: str = ""  # "" (resident) | sequential | double-buffered
    write_us: float = 0.0  # crossbar writes per inference when streaming
    writes_per_cell: float = 0.0  # rewrites of the most-written cell per inference
    lifetime_inferences: float | None = None  # endurance / writes_per_cell; None = resident

    def row(self) -> dict[str, float | int | str]:
        """Scalar fields only (for Polars)."""
        return {k: v for k, v in asdict(self).items() if not isinstance(v, dict)}


def evaluate(work: Workload, arch: ArchConfig, strategy: str = "latency",
             scheduler: str = "harp", method: str = "estimate",
             mapping: Mapping | None = None, solver: str = "auto") -> Report:
    """Map, schedule and time one inference of ``work`` on ``arch``.

    A model whose weights do not fit ``arch.max_crossbars`` is streamed in layer groups
    (:mod:`schedlab.harp.reprogram`) unless ``arch.reprogram.enabled`` is false.
    """
    began = time.perf_counter()
    if mapping is None and arch.reprogram.enabled:
        from schedlab.harp.reprogram import fits

        if not fits(work, arch):
            return _streamed(work, arch, strategy, scheduler, method, solver, began)
    mapping = mapping or make_mapper(strategy, solver).map(work, arch)
    plan = make_scheduler(scheduler).plan(work, mapping, arch)
    latency, busy = run_plan(plan, method)
    seconds = time.perf_counter() - began
    areas = area_mm2(mapping.crossbars, arch)
    energy = dynamic_energy_pj(work, arch)
    energy["leakage"] = leakage_mw(mapping.crossbars, arch) * latency  # mW x ns = pJ
    analog_cap = sum(c for p, c in plan.pools.items() if p.startswith("xbar:"))
    analog_busy = sum(b for p, b in busy.items() if p.startswith("xbar:"))
    digital_cap = sum(c for p, c in plan.pools.items() if not p.startswith("xbar:"))
    digital_busy = sum(b for p, b in busy.items() if not p.startswith("xbar:"))
    return Report(
        model=work.name, tokens=work.tokens, strategy=mapping.strategy, scheduler=scheduler,
        method=method, latency_us=latency / 1e3,
        tokens_per_s=work.tokens / latency * 1e9 if latency else 0.0,
        area_mm2=sum(areas.values()), energy_uj=sum(energy.values()) / 1e6,
        crossbars=mapping.crossbars, max_replicas=max(mapping.replicas.values(), default=1),
        analog_util=analog_busy / (analog_cap * latency) if latency and analog_cap else 0.0,
        digital_util=digital_busy / (digital_cap * latency) if latency and digital_cap else 0.0,
        program_us=program_cost(mapping.crossbars, arch)[0] / 1e3, seconds=seconds,
        area_breakdown=areas, energy_breakdown={k: v / 1e6 for k, v in energy.items()},
        modes=plan_summary(plan),
    )


def _streamed(work: Workload, arch: ArchConfig, strategy: str, scheduler: str, method: str,
              solver: str, began: float) -> Report:
    """Report of a streamed inference: groups written and run one after another."""
    from schedlab.harp.reprogram import stream

    if method not in METHODS:
        raise UnknownNameError("method", method, list(METHODS))
    run = stream(work, arch, strategy, scheduler, method, solver)
    latency = run.latency_ns
    crossbars = max(g.crossbars for g in run.groups)
    held = arch.max_crossbars if run.mode == "sequential" else 2 * crossbars
    areas = area_mm2(min(held, arch.max_crossbars), arch)
    energy: dict[str, float] = {}
    for group in run.groups:
        for key, value in group.energy_pj.items():
            energy[key] = energy.get(key, 0.0) + value
    energy["write"] = run.write_pj
    energy["leakage"] = leakage_mw(min(held, arch.max_crossbars), arch) * latency
    analog_busy = sum(g.analog_busy for g in run.groups)
    digital_busy = sum(g.digital_busy for g in run.groups)
    digital_cap = arch.digital.count
    return Report(
        model=work.name, tokens=work.tokens, strategy=strategy, scheduler=scheduler,
        method=method, latency_us=latency / 1e3,
        tokens_per_s=work.tokens / latency * 1e9 if latency else 0.0,
        area_mm2=sum(areas.values()), energy_uj=sum(energy.values()) / 1e6,
        crossbars=crossbars, max_replicas=max(g.max_replicas for g in run.groups),
        analog_util=analog_busy / (sum(g.crossbars for g in run.groups) / len(run.groups)
                                   * latency) if latency else 0.0,
        digital_util=digital_busy / (digital_cap * latency) if latency else 0.0,
        program_us=run.write_ns / 1e3, seconds=time.perf_counter() - began,
        area_breakdown=areas, energy_breakdown={k: v / 1e6 for k, v in energy.items()},
        modes={}, groups=len(run.groups), streaming=run.mode, write_us=run.write_ns / 1e3,
        writes_per_cell=run.writes_per_cell, lifetime_inferences=run.lifetime_inferences,
    )
