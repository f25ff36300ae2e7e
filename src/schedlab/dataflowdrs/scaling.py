"""Interpretable scaling models of data flow (paper 09, part (c)).

From a few runs at different scales, DataFlowDrs fits one small model per compressed DFL edge
(bytes moved between a task group and a file group) and per task group (instances, total time),
choosing among constant, linear, logarithmic, n log n, quadratic and power-law forms by
leave-one-out cross-validation, and predicts each quantity at a larger scale. The chosen form
is reported with its coefficients so a person can read *why* a flow grows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.dataflowdrs.diagnosis import Analysis

_FEATURES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "constant": lambda n: np.ones((len(n), 1)),
    "linear": lambda n: np.column_stack([np.ones_like(n), n]),
    "log": lambda n: np.column_stack([np.ones_like(n), np.log(n)]),
    "nlogn": lambda n: np.column_stack([np.ones_like(n), n * np.log(n)]),
    "quadratic": lambda n: np.column_stack([np.ones_like(n), n, n * n]),
}
MODEL_NAMES = (*_FEATURES, "power")


@dataclass(frozen=True)
class ScalingModel:
    """A fitted form: ``name``, its coefficients and its cross-validated relative error."""

    name: str
    coef: tuple[float, ...]
    cv_error: float

    def predict(self, n: float) -> float:
        x = np.asarray([float(n)])
        if self.name == "power":
            return float(math.exp(self.coef[0]) * n ** self.coef[1])
        return float(_FEATURES[self.name](x)[0] @ np.asarray(self.coef))

    def formula(self) -> str:
        c = [f"{v:.4g}" for v in self.coef]
        if self.name == "power":
            return f"{math.exp(self.coef[0]):.4g}*n^{self.coef[1]:.3g}"
        terms = {"constant": ["1"], "linear": ["1", "n"], "log": ["1", "log(n)"],
                 "nlogn": ["1", "n*log(n)"], "quadratic": ["1", "n", "n^2"]}[self.name]
        return " + ".join(v if t == "1" else f"{v}*{t}" for v, t in zip(c, terms, strict=True))


def _solve(name: str, n: np.ndarray, y: np.ndarray) -> tuple[float, ...] | None:
    if name == "power":
        if np.any(y <= 0):
            return None
        coef, *_ = np.linalg.lstsq(np.column_stack([np.ones_like(n), np.log(n)]), np.log(y),
                                   rcond=None)
        return tuple(float(c) for c in coef)
    design = _FEATURES[name](n)
    if design.shape[1] > len(n):
        return None
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    return tuple(float(c) for c in coef)


def fit(scales: Sequence[float], values: Sequence[float]) -> ScalingModel:
    """The form with the lowest leave-one-out relative error (ties go to fewer parameters)."""
    n = np.asarray(scales, dtype=float)
    y = np.asarray(values, dtype=float)
    if len(n) < 2 or np.any(n <= 0):
        raise BadInputError("need at least two runs at positive scales", field="scales")
    best: ScalingModel | None = None
    for name in ("constant", "linear", "log", "power", "nlogn", "quadratic"):
        errors = []
        for leave in range(len(n)):
            keep = np.arange(len(n)) != leave
            coef = _solve(name, n[keep], y[keep])
            if coef is None or (name != "constant" and keep.sum() < 2):
                errors = []
                break
            pred = ScalingModel(name, coef, 0.0).predict(n[leave])
            errors.append(abs(pred - y[leave]) / max(abs(y[leave]), 1e-12))
        coef = _solve(name, n, y)
        if not errors or coef is None:
            continue
        model = ScalingModel(name, coef, float(np.mean(errors)))
        if best is None or model.cv_error < best.cv_error * 0.9 - 1e-9:
            best = model
    assert best is not None  # "constant" always fits
    return best


def quantities(analysis: Analysis) -> dict[tuple[str, str], float]:
    """The data-flow quantities we model: edge bytes, group instances and time, makespan."""
    out: dict[tuple[str, str], float] = {("makespan", "workflow"): analysis.dfl.makespan}
    graph = analysis.compressed.graph
    for (u, v), data in zip(graph.edges, graph.edges.values(), strict=True):
        out[("edge_bytes", f"{u[1]}->{v[1]}")] = float(data["bytes"])
    for node, data in graph.nodes(data=True):
        if node[0] == "task":
            out[("instances", node[1])] = float(data["instances"])
            out[("task_time", node[1])] = float(data["time"])
    return out


def fit_all(runs: Sequence[tuple[float, Analysis]]) -> dict[tuple[str, str], ScalingModel]:
    """One model per quantity present in every run."""
    tables = [(scale, quantities(a)) for scale, a in runs]
    common = set.intersection(*(set(q) for _, q in tables)) if tables else set()
    return {key: fit([s for s, _ in tables], [q[key] for _, q in tables])
            for key in sorted(common)}


def predict_frame(models: dict[tuple[str, str], ScalingModel], scale: float,
                  actual: Analysis | None = None) -> pl.DataFrame:
    """Predictions at ``scale`` (with the measured value and error when ``actual`` is given)."""
    measured = quantities(actual) if actual is not None else {}
    rows = []
    for (kind, name), model in models.items():
        pred = model.predict(scale)
        real = measured.get((kind, name))
        error = abs(pred - real) / abs(real) if real not in (None, 0) else None
        rows.append(dict(quantity=kind, name=name, model=model.name, formula=model.formula(),
                         cv_error=model.cv_error, scale=float(scale), predicted=pred,
                         measured=real, rel_error=error))
    schema = {"quantity": pl.String, "name": pl.String, "model": pl.String,
              "formula": pl.String, "cv_error": pl.Float64, "scale": pl.Float64,
              "predicted": pl.Float64, "measured": pl.Float64, "rel_error": pl.Float64}
    return pl.DataFrame(rows, schema=schema)
