"""Performance models: exact recovery on noiseless data, branch awareness, sampling, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.hip_dfpt.perfmodel import MODELS, design, make_model, mape, sample_tasks
from schedlab.hip_dfpt.tasks import TaskFeatures


def _features(n: int, seed: int, dense_share: float = 0.5) -> TaskFeatures:
    rng = np.random.default_rng(seed)
    return TaskFeatures(rng.integers(1, 129, n), rng.integers(1, 80, n), rng.integers(1, 8, n),
                        (rng.random(n) < dense_share).astype(np.int64), np.arange(n))


def _branchy_truth(f: TaskFeatures) -> np.ndarray:
    """Dense tasks cost by points only (they use every basis function), sparse by points x b^2."""
    g, b = f.n_points.astype(float), f.n_basis.astype(float)
    return np.where(f.branch == 1, 2e-6 * g + 5e-6, 1e-8 * g * b * b + 3e-6)


def test_hybrid_recovers_per_branch_laws_from_five_percent() -> None:
    f = _features(4000, 0)
    truth = _branchy_truth(f)
    sample = sample_tasks(f, 0.05, 0)
    model = make_model("branch-hybrid").fit(f.take(sample), truth[sample])
    assert mape(model.predict(f), truth) < 1e-3
    blind = make_model("global-linear").fit(f.take(sample), truth[sample])
    assert mape(blind.predict(f), truth) > 10 * mape(model.predict(f), truth)


@pytest.mark.parametrize("name", list(MODELS))
def test_every_model_predicts_positive_finite_costs(name: str) -> None:
    f = _features(300, 1)
    truth = _branchy_truth(f)
    model = make_model(name).fit(f, truth)
    predicted = model.predict(_features(50, 2))
    assert predicted.shape == (50,) and np.isfinite(predicted).all() and (predicted > 0).all()


@pytest.mark.parametrize("name", list(MODELS))
def test_bad_timings_are_rejected(name: str) -> None:
    f = _features(20, 3)
    with pytest.raises(ConfigError):
        make_model(name).fit(f, np.full(19, 1e-5))
    with pytest.raises(ConfigError):
        make_model(name).fit(f, np.full(20, np.nan))


def test_global_model_needs_fit_and_unknown_names() -> None:
    with pytest.raises(ConfigError):
        make_model("global-linear").predict(_features(3, 0))
    with pytest.raises(UnknownNameError):
        make_model("neural")


@given(n=st.integers(1, 400), fraction=st.floats(0.01, 1.0), share=st.floats(0, 1),
       seed=st.integers(0, 1000))
def test_sample_is_stratified_and_unique(n: int, fraction: float, share: float,
                                         seed: int) -> None:
    f = _features(n, seed, share)
    sample = sample_tasks(f, fraction, seed)
    assert len(np.unique(sample)) == len(sample) and sample.max() < n
    for branch in np.unique(f.branch):
        have = int((f.branch[sample] == branch).sum())
        assert have >= min(8, int((f.branch == branch).sum()))


def test_sample_fraction_out_of_range() -> None:
    with pytest.raises(ConfigError):
        sample_tasks(_features(10, 0), 0.0, 0)


def test_design_columns_and_mape() -> None:
    f = _features(5, 0)
    x = design(f)
    assert x.shape == (5, 5) and np.allclose(x[:, 4], 1)
    assert mape(np.array([1.1, 0.9]), np.array([1.0, 1.0])) == pytest.approx(0.1)
