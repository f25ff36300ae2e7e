"""Calibration files: provenance on every value, clear errors, and the validation arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.harp.archfile import load_arch
from schedlab.harp.calibration import (
    CALIBRATIONS,
    load_calibration,
    peak_figures,
    validation_rows,
)
from schedlab.harp.costs import analog_row_ns
from schedlab.harp.workloads import Op

HEADER = '[source]\nkey = "mine"\npaper = "p"\n[chip]\ncrossbars = 64\ntiles = 1\n'


@pytest.mark.parametrize("name", CALIBRATIONS)
def test_every_value_is_cited(name: str) -> None:
    cal = load_calibration(name)
    assert cal.params and all(len(p.cite) > 10 for p in cal.params)
    arch = cal.arch()
    for p in cal.params:  # each value really lands in the architecture
        node = arch
        for part in p.field.split("."):
            node = getattr(node, part)
        assert node == pytest.approx(p.value)


def test_peak_figures_by_hand() -> None:
    cal = load_calibration("puma")
    arch = cal.arch()
    ns = analog_row_ns(Op("x", 0, "static", k=128, n=16), arch)
    assert ns == pytest.approx((16 + 1) * 100.0, rel=0.01)  # 16 input bits + drain, 100 ns each
    got = peak_figures(arch, cal.crossbars)
    assert got["peak_tops"] == pytest.approx(17664 * 2 * 128 * 16 / ns / 1e3)
    assert got["adc_pj_per_conversion"] == pytest.approx(1.8 * 100 / 128)
    assert got["tiles"] == 138


def test_validation_rows_compare_other_sources() -> None:
    rows = validation_rows()
    assert {r["source"] for r in rows} == {"isaac", "puma"}
    for r in rows:
        assert r["error"] == pytest.approx((r["ours"] - r["reported"]) / r["reported"])
        if r["source"] == "isaac":  # component figures are checked against PUMA's constants
            assert r["calibration_used"] == "puma"


def test_arch_file_overrides_calibration(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"crossbar": {"adcs": 4}}))
    arch = load_arch(path, "puma")
    assert arch.crossbar.adcs == 4 and arch.crossbar.weight_bits == 16
    assert load_arch(None, "isaac").memory.crossbars_per_tile == 96


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('[[param]]\nfield = "crossbar.nope"\nvalue = 1\ncite = "c"\n', "crossbar.nope"),
        ('[[param]]\nfield = "crossbar.rows"\nvalue = 1\n', "cite"),
        ('[[param]]\nfield = "crossbar.rows"\nvalue = "x"\ncite = "c"\n', "value"),
        ('[[param]]\nfield = "crossbar.adcs"\nvalue = 0\ncite = "c"\n', "adcs"),
        ('[[reported]]\nmetric = "speed"\nvalue = 1\nunit = "u"\ncite = "c"\n', "speed"),
    ],
)
def test_bad_files_name_the_field(tmp_path: Path, body: str, needle: str) -> None:
    path = tmp_path / "cal.toml"
    path.write_text(HEADER + body)
    with pytest.raises(BadInputError) as err:
        load_calibration(path)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_missing_and_unknown() -> None:
    with pytest.raises(BadInputError, match="not found"):
        load_calibration("/nonexistent/x.toml")
    with pytest.raises(BadInputError, match="valid: isaac"):
        load_calibration("neurosim")


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(["crossbar.rows", "crossbar.adcs", "digital.count", "x.y", "name"]),
    value=st.one_of(st.integers(-5, 5000), st.floats(allow_nan=True), st.text(max_size=3)),
    text=st.text(max_size=40),
)
def test_parser_never_crashes(tmp_path_factory, field: str, value, text: str) -> None:
    path = tmp_path_factory.mktemp("cal") / "c.toml"
    path.write_text(
        HEADER + f"[[param]]\nfield = {json.dumps(field)}\nvalue = {json.dumps(value)}"
        f"\ncite = {json.dumps(text)}\n"
    )
    try:
        load_calibration(path)
    except BadInputError as exc:
        assert "\n" not in str(exc)
