"""Branch-dominant hybrid performance model, fitted online from a 5% task sample (HIP-DFPT §4).

A batch's run time is dominated by which branch of the kernel it takes (dense vs sparse on CPU,
GEMM vs direct loop on a GPU): the branches have different cost *laws*, not just different
constants. The hybrid model therefore first classifies a task by its branch, then applies an
analytic cost law per branch (points x basis^2, points x basis, points, atoms, a constant) whose
non-negative coefficients are fitted to the sampled timings by relative-error least squares.
A branch with too few samples falls back to the all-branch fit, so the model is always usable.

Baselines behind the same interface: one global fit that ignores the branch, and a
points-only model (the cost proxy a balancer without a model uses).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.core.registry import lookup
from schedlab.hip_dfpt.tasks import TaskFeatures

#: fewest samples a branch needs for its own fit (5 coefficients, plus slack)
MIN_BRANCH_SAMPLES = 8


class CostModel(Protocol):
    """Predicts a task's run time from its features after seeing a few measured tasks."""

    name: str

    def fit(self, features: TaskFeatures, seconds: np.ndarray) -> CostModel: ...

    def predict(self, features: TaskFeatures) -> np.ndarray: ...


def design(features: TaskFeatures) -> np.ndarray:
    """The analytic cost terms of the integration kernel, one row per task."""
    g = features.n_points.astype(float)
    b = features.n_basis.astype(float)
    return np.column_stack([g * b * b, g * b, g, features.n_atoms.astype(float),
                            np.ones_like(g)])


def _fit_relative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative coefficients minimising the sum of squared *relative* errors."""
    from scipy.optimize import nnls  # SciPy loads on first fit, keeping `schedlab --help` fast

    y = np.maximum(y, 1e-12)
    scale = np.maximum(np.abs(x).max(axis=0), 1e-300)  # column scaling keeps NNLS well posed
    coef, _ = nnls(x / scale / y[:, None], np.ones_like(y), maxiter=50 * x.shape[1])
    return coef / scale


class GlobalLinearModel:
    """One cost law for every task: the baseline that ignores the screening branch."""

    name = "global-linear"

    def __init__(self) -> None:
        self.coef: np.ndarray | None = None

    def fit(self, features: TaskFeatures, seconds: np.ndarray) -> GlobalLinearModel:
        _check_sample(features, seconds)
        self.coef = _fit_relative(design(features), np.asarray(seconds, float))
        return self

    def predict(self, features: TaskFeatures) -> np.ndarray:
        if self.coef is None:
            raise ConfigError("predict called before fit", field="model")
        return np.maximum(design(features) @ self.coef, 1e-12)


class BranchHybridModel:
    """HIP-DFPT's model: classify by branch, then one analytic cost law per branch."""

    name = "branch-hybrid"

    def __init__(self) -> None:
        self.fallback = GlobalLinearModel()
        self.coef: dict[int, np.ndarray] = {}

    def fit(self, features: TaskFeatures, seconds: np.ndarray) -> BranchHybridModel:
        seconds = np.asarray(seconds, float)
        self.fallback.fit(features, seconds)
        self.coef = {}
        x = design(features)
        for branch in np.unique(features.branch):
            rows = features.branch == branch
            if rows.sum() >= MIN_BRANCH_SAMPLES:
                self.coef[int(branch)] = _fit_relative(x[rows], seconds[rows])
        return self

    def predict(self, features: TaskFeatures) -> np.ndarray:
        out = self.fallback.predict(features)
        x = design(features)
        for branch, coef in self.coef.items():
            rows = features.branch == branch
            out[rows] = np.maximum(x[rows] @ coef, 1e-12)
        return out


class PointsModel:
    """Cost proportional to grid points (plus a constant): a balancer's model-free proxy."""

    name = "points"

    def __init__(self) -> None:
        self.coef: np.ndarray | None = None

    def fit(self, features: TaskFeatures, seconds: np.ndarray) -> PointsModel:
        _check_sample(features, seconds)
        g = features.n_points.astype(float)
        self.coef = _fit_relative(np.column_stack([g, np.ones_like(g)]),
                                  np.asarray(seconds, float))
        return self

    def predict(self, features: TaskFeatures) -> np.ndarray:
        if self.coef is None:
            raise ConfigError("predict called before fit", field="model")
        g = features.n_points.astype(float)
        return np.maximum(np.column_stack([g, np.ones_like(g)]) @ self.coef, 1e-12)


def _check_sample(features: TaskFeatures, seconds: np.ndarray) -> None:
    seconds = np.asarray(seconds, float)
    if len(seconds) != len(features) or len(seconds) == 0:
        raise ConfigError(f"{len(seconds)} timings for {len(features)} tasks", field="seconds")
    if not np.isfinite(seconds).all() or (seconds < 0).any():
        raise ConfigError("timings must be finite and non-negative", field="seconds")


MODELS: dict[str, Callable[[], CostModel]] = {
    "branch-hybrid": BranchHybridModel,
    "global-linear": GlobalLinearModel,
    "points": PointsModel,
}


def make_model(name: str) -> CostModel:
    return lookup(MODELS, "performance model", name)()


def sample_tasks(features: TaskFeatures, fraction: float, seed: int,
                 minimum: int = MIN_BRANCH_SAMPLES) -> np.ndarray:
    """Indices of a ``fraction`` sample, stratified by branch so every branch is represented
    (at least ``minimum`` tasks of each branch, or all of a smaller branch)."""
    if not 0 < fraction <= 1:
        raise ConfigError("must be in (0, 1]", field="sample_fraction")
    rng = np.random.default_rng(seed)
    picked = []
    for branch in np.unique(features.branch):
        rows = np.flatnonzero(features.branch == branch)
        count = min(len(rows), max(minimum, int(round(fraction * len(rows)))))
        picked.append(rng.choice(rows, size=count, replace=False))
    return np.sort(np.concatenate(picked))


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error, |p - m| / m averaged over tasks."""
    measured = np.maximum(np.asarray(measured, float), 1e-12)
    return float(np.mean(np.abs(np.asarray(predicted, float) - measured) / measured))
