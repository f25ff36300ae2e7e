"""Arrival generators, the timestamp-trace reader (fuzzed) and change-point detectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.carss.changepoint import (
    BOCPD,
    PageHinkley,
    detection_scores,
    locate_change,
    make_detector,
    offline_changepoints,
)
from schedlab.carss.workloads import ARRIVAL_KINDS, arrival_series, read_arrivals
from schedlab.core.errors import BadInputError, UnknownNameError


@pytest.mark.parametrize("kind", ARRIVAL_KINDS)
def test_generators_are_seeded_and_non_negative(kind: str) -> None:
    a = arrival_series(kind, 200, 15.0, 4)
    b = arrival_series(kind, 200, 15.0, 4)
    assert np.array_equal(a.counts, b.counts) and a.counts.min() >= 0
    assert all(0 < c < 200 for c in a.change_points)
    with pytest.raises(UnknownNameError):
        arrival_series("weekly", 10, 1.0, 0)


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(body)
    return path


def test_reader_bins_numeric_and_datetime_timestamps(tmp_path: Path) -> None:
    numeric = _write(tmp_path, "ts,x\n0,a\n10,b\n3599,c\n3600,d\n7300,e\n")
    assert read_arrivals(numeric, "ts", 3600).counts.tolist() == [3, 1, 1]
    dates = _write(
        tmp_path, "when\n2024-11-15 16:00:00\n2024-11-15 16:30:00\n2024-11-15 18:10:00\n"
    )
    assert read_arrivals(dates, "when", 3600).counts.tolist() == [2, 0, 1]


def test_reader_takes_parquet_datetimes(tmp_path: Path) -> None:
    import datetime as dt

    import polars as pl

    path = tmp_path / "t.parquet"
    pl.DataFrame(
        {
            "t": [
                dt.datetime(2024, 1, 1, 0, 0),
                dt.datetime(2024, 1, 1, 0, 30),
                dt.datetime(2024, 1, 1, 2, 0),
            ]
        }
    ).write_parquet(path)
    assert read_arrivals(path, "t", 3600).counts.tolist() == [2, 0, 1]


def test_unsorted_timestamps_name_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "ts\n1\n5\n3\n9\n")
    with pytest.raises(BadInputError) as err:
        read_arrivals(path, "ts")
    assert err.value.line == 4 and err.value.field == "ts" and "sorted" in str(err.value)


def test_missing_timestamp_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "ts,y\n1,a\n,b\n3,c\n")
    with pytest.raises(BadInputError) as err:
        read_arrivals(path, "ts")
    assert err.value.line == 3 and "missing" in str(err.value)


def test_non_number_among_numbers_names_its_own_line(tmp_path: Path) -> None:
    # regression: the error used to point at line 2 ('1', a valid number), not the bad row
    path = tmp_path / "mixed.csv"
    path.write_text("timestamp\n1\n2\nabc\n5\n")
    with pytest.raises(BadInputError, match="'abc'") as info:
        read_arrivals(path, "timestamp", 1.0)
    assert info.value.line == 4 and info.value.field == "timestamp"


def test_missing_column_and_file(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="missing column"):
        read_arrivals(_write(tmp_path, "a\n1\n"), "ts")
    with pytest.raises(BadInputError, match="no such file"):
        read_arrivals(tmp_path / "absent.csv", "ts")


@given(
    st.lists(
        st.one_of(
            st.integers(-5, 10**6).map(str),
            st.text(max_size=8),
            st.sampled_from(["", "nan", "2024-13-45", "1e3", "  7 "]),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_reader_fuzz_never_leaks_raw_errors(values: list[str]) -> None:
    """Any column content: either counts or a BadInputError naming the file."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.csv"
        cells = ['"' + v.replace('"', '""') + '"' for v in values]
        path.write_text("ts\n" + "\n".join(cells) + "\n")
        try:
            trace = read_arrivals(path, "ts", 60)
        except BadInputError as exc:
            assert exc.path == path
        else:
            assert trace.counts.sum() == len(values) and trace.counts.min() >= 0


@given(st.binary(max_size=200))
def test_reader_fuzz_binary_garbage(blob: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.csv"
        path.write_bytes(blob)
        try:
            read_arrivals(path, "ts", 60)
        except BadInputError as exc:
            assert exc.path == path


def test_real_genai_trace(shared_data: Path) -> None:
    trace = read_arrivals(
        shared_data / "alibaba" / "genai_lora_request_trace.csv", "gmt_create", 3600
    )
    assert trace.counts.sum() == 26_823 and trace.counts.size > 500


def _step(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.log1p(np.concatenate([rng.poisson(10, 80), rng.poisson(40, 80)]))


@pytest.mark.parametrize("name", ["bocpd", "page-hinkley"])
def test_streaming_detectors_find_a_step_soon_after_it(name: str) -> None:
    detector = make_detector(name)
    found = [(t, c) for t, v in enumerate(_step()) if (c := detector.update(v)) is not None]
    assert any(80 <= t <= 92 and abs(c - 80) <= 12 for t, c in found), found


def test_bocpd_stays_quiet_on_a_stationary_series() -> None:
    rng = np.random.default_rng(1)
    detector = BOCPD()
    alarms = [c for v in np.log1p(rng.poisson(30, 300)) if (c := detector.update(v)) is not None]
    assert len(alarms) <= 1


def test_offline_segmentation_and_location() -> None:
    counts = np.expm1(_step()).round()
    assert any(abs(c - 80) <= 2 for c in offline_changepoints(counts))
    assert abs(locate_change(counts[60:100]) - 20) <= 2
    assert PageHinkley().update(1.0) is None


@given(st.lists(st.integers(0, 300), max_size=15), st.lists(st.integers(0, 300), max_size=15))
def test_detection_scores_are_bounded(found: list[int], truth: list[int]) -> None:
    scores = detection_scores(found, truth)
    assert 0 <= scores["precision"] <= 1 and 0 <= scores["recall"] <= 1
    assert 0 <= scores["f1"] <= 1
    distinct = len(set(found)) == len(found) and len(set(truth)) == len(truth)
    if found and distinct and sorted(found) == sorted(truth):
        assert scores["f1"] == 1.0
