"""Design-space exploration: crossbar size x ADCs per crossbar x digital units, with a Pareto front.

HARP (../shared/papers/16-harp.md) is meant for "rapid design-space exploration": each design
point is one architecture, mapped and estimated analytically. Points are independent, so a sweep
fans out over ``core.executors`` (``--executor local|ray``) like every schedlab sweep.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import polars as pl

from schedlab.core.errors import SchedlabError
from schedlab.core.executors import make_executor
from schedlab.harp.arch import ArchConfig, arch_from_dict
from schedlab.harp.engine import evaluate
from schedlab.harp.workloads import load_model


@dataclass(frozen=True)
class Point:
    """One design to evaluate; plain data so it pickles to any executor."""

    model: str
    tokens: int | None
    crossbar: int
    adcs: int
    digital_units: int
    strategy: str
    scheduler: str
    base: dict


def design_points(model: str, crossbar_sizes: list[int], adcs: list[int], units: list[int],
                  strategy: str = "latency", scheduler: str = "harp",
                  tokens: int | None = None, base: ArchConfig | None = None) -> list[Point]:
    """The full grid of designs around ``base`` (defaults when None)."""
    data = (base or ArchConfig()).model_dump()
    return [Point(model, tokens, size, adc, unit, strategy, scheduler, data)
            for size, adc, unit in itertools.product(crossbar_sizes, adcs, units)]


def evaluate_point(point: Point) -> dict:
    """Evaluate one design; an infeasible one (model does not fit) is a row, not a crash."""
    data = {**point.base, "crossbar": {**point.base["crossbar"], "rows": point.crossbar,
                                       "cols": point.crossbar, "adcs": point.adcs},
            "digital": {**point.base["digital"], "count": point.digital_units}}
    row = dict(model=point.model, crossbar=point.crossbar, adcs=point.adcs,
               digital_units=point.digital_units, strategy=point.strategy,
               scheduler=point.scheduler)
    try:
        arch = arch_from_dict(data)
        report = evaluate(load_model(point.model, point.tokens), arch, point.strategy,
                          point.scheduler)
    except SchedlabError as exc:
        return {**row, "feasible": False, "error": str(exc), "latency_us": float("nan"),
                "area_mm2": float("nan"), "energy_uj": float("nan"), "seconds": 0.0}
    return {**row, "feasible": True, "error": "", "latency_us": report.latency_us,
            "area_mm2": report.area_mm2, "energy_uj": report.energy_uj,
            "seconds": report.seconds}


def run_sweep(points: list[Point], executor: str = "local", jobs: int | None = 1,
              address: str | None = None) -> pl.DataFrame:
    """Evaluate every design point and mark the latency/area Pareto front."""
    pool = make_executor(executor, jobs, address)
    rows: list[dict] = [{} for _ in points]
    try:
        for index, row in pool.map_unordered(evaluate_point, points):
            rows[index] = row
    finally:
        pool.close()
    frame = pl.DataFrame(rows)
    return frame.with_columns(pl.Series("pareto", pareto_mask(
        frame["latency_us"].to_numpy(), frame["area_mm2"].to_numpy())))


def pareto_mask(latency: np.ndarray, area: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both latency and area (NaN = infeasible)."""
    ok = ~(np.isnan(latency) | np.isnan(area))
    mask = np.zeros(len(latency), dtype=bool)
    for i in np.flatnonzero(ok):
        others = ok & (latency <= latency[i]) & (area <= area[i]) & (
            (latency < latency[i]) | (area < area[i]))
        mask[i] = not others.any()
    return mask


def plot_pareto(frame: pl.DataFrame, title: str):
    """Latency vs area of every feasible design, the Pareto front joined up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ok = frame.filter(pl.col("feasible"))
    scatter = ax.scatter(ok["area_mm2"], ok["latency_us"], c=np.log2(ok["adcs"].to_numpy()),
                         s=12 + 3 * ok["digital_units"].to_numpy() ** 0.5, cmap="viridis",
                         alpha=0.7)
    front = ok.filter(pl.col("pareto")).sort("area_mm2")
    ax.plot(front["area_mm2"], front["latency_us"], "r-o", ms=4, label="Pareto front")
    ax.set(xscale="log", yscale="log", xlabel="area (mm²)", ylabel="latency (µs)", title=title)
    fig.colorbar(scatter, ax=ax, label="log2 ADCs per crossbar")
    ax.legend()
    return fig
