"""Scaling models: the right form is chosen and extrapolates; predictions from runs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.dataflowdrs import (
    WorkflowConfig,
    analyse,
    build,
    fit,
    fit_all,
    make_layout,
    predict_frame,
)
from schedlab.dataflowdrs.synthetic import simulate_trace

SCALES = [2.0, 3.0, 4.0, 6.0, 8.0]
coef = st.floats(0.5, 50.0)


@given(coef, coef)
def test_linear_data_gets_an_exact_linear_model(a, b):
    model = fit(SCALES, [a + b * n for n in SCALES])
    assert model.name in ("linear", "quadratic")  # quadratic only if it is no worse
    assert model.predict(32) == pytest.approx(a + b * 32, rel=1e-6)


@given(coef, st.floats(1.3, 2.5))
def test_power_law_data_extrapolates(a, k):
    model = fit(SCALES, [a * n ** k for n in SCALES])
    assert model.predict(20) == pytest.approx(a * 20 ** k, rel=0.02)


@given(coef)
def test_constant_data_stays_constant(a):
    model = fit(SCALES, [a] * len(SCALES))
    assert model.name == "constant"
    assert model.predict(1000) == pytest.approx(a)


def test_log_growth_is_recognised():
    model = fit(SCALES, [3 + 5 * math.log(n) for n in SCALES])
    assert model.name == "log"
    assert "log(n)" in model.formula()


def test_too_few_runs_is_a_clear_error():
    with pytest.raises(BadInputError, match="two runs"):
        fit([4.0], [1.0])
    with pytest.raises(BadInputError):
        fit([0.0, 2.0], [1.0, 2.0])


def test_predictions_from_modelled_runs_match_a_larger_run(tmp_path):
    layout = make_layout(tmp_path, create=False)

    def run(n):
        cfg = WorkflowConfig(workflow="mapreduce", scale=n, size_kb=256)
        return analyse(simulate_trace(build(cfg, layout), layout, 2))

    frame = predict_frame(fit_all([(n, run(n)) for n in (2, 3, 4)]), 10, run(10))
    volume = frame.filter(frame["quantity"] == "edge_bytes")
    assert volume.height > 5
    assert volume["rel_error"].max() < 0.01
    counts = frame.filter(frame["quantity"] == "instances")
    assert counts.filter(counts["name"] == "map")["predicted"].item() == pytest.approx(10)
