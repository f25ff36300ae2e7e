"""Readers fail with file/line/field on malformed input; generators are seeded and shaped."""

import numpy as np
import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.xbucket import WORKFLOWS, compare, read_reports, synthetic

HEADER = "task_id -- core -- memory -- virtual_memory -- disk -- time -- average_cores -- tag\n"


def _line(i, core=1, memory=100, disk=10, time=1.5, tag="1"):
    return f"{i} -- {core} -- {memory} -- 0 -- {disk} -- {time} -- 0 -- {tag}\n"


record = st.tuples(st.integers(0, 64), st.integers(0, 10**6), st.integers(0, 10**6),
                   st.floats(0, 1e5, allow_nan=False), st.sampled_from(["1", "2", "x"]))


@given(st.lists(record, min_size=1, max_size=30))
def test_text_reports_round_trip(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("r") / "t.txt"
    path.write_text(HEADER + "".join(_line(i, *r) for i, r in enumerate(records)))
    tasks = read_reports(path)
    assert [t.peak.memory for t in tasks] == [float(r[1]) for r in records]
    assert [t.category for t in tasks] == [r[4] for r in records]


@pytest.mark.parametrize("bad,field", [
    ("7 -- 1 -- lots -- 0 -- 10 -- 1 -- 0 -- 1", "memory"),
    ("7 -- 1 -- 100 -- 0 -- -5 -- 1 -- 0 -- 1", "disk"),
    ("7 -- 1 -- 100 -- 0 -- 10 -- nan -- 0 -- 1", "time"),
    ("7 -- 1 -- 100 -- 0 -- 10", "line"),
    ("7 -- 1 -- 100 -- 0 -- 10 -- 1 -- 0 -- 1 -- extra", "line"),
])
def test_malformed_lines_name_file_line_and_field(tmp_path, bad, field):
    path = tmp_path / "t.txt"
    path.write_text(HEADER + _line(1) + bad + "\n")
    with pytest.raises(BadInputError) as caught:
        read_reports(path)
    assert caught.value.line == 3 and caught.value.field == field
    assert str(path) in str(caught.value)


@given(st.text(max_size=200))
def test_fuzzed_text_raises_only_bad_input(tmp_path_factory, junk):
    path = tmp_path_factory.mktemp("f") / "t.txt"
    path.write_text(HEADER + _line(1) + junk, encoding="utf-8")
    try:
        read_reports(path)
    except BadInputError as exc:
        assert exc.path is not None


@given(st.binary(max_size=200))
def test_fuzzed_bytes_raise_only_bad_input(tmp_path_factory, junk):
    path = tmp_path_factory.mktemp("b") / "t.txt"
    path.write_bytes(HEADER.encode() + junk)
    try:
        read_reports(path)
    except BadInputError as exc:
        assert exc.path is not None


def test_csv_and_parquet_tables_with_declared_allocations(tmp_path):
    frame = pl.DataFrame(dict(task_id=["a", "b"], core=[1.0, 2.0], memory=[100.0, 200.0],
                              disk=[5.0, 6.0], time=[1.0, 2.0], tag=["x", "y"],
                              declared_cores=[2.0, 2.0], declared_memory=[500.0, 500.0],
                              declared_disk=[50.0, 50.0]))
    for suffix in (".csv", ".parquet"):
        path = tmp_path / f"t{suffix}"
        frame.write_csv(path) if suffix == ".csv" else frame.write_parquet(path)
        tasks = read_reports(path)
        assert tasks[1].declared.memory == 500.0 and tasks[1].category == "y"
        assert "declared" in compare(tasks, ["declared"])["algorithm"].to_list()


@pytest.mark.parametrize("change,field,line", [
    (dict(memory=["100", "oops"]), "memory", 3),
    (dict(disk=["5", "-1"]), "disk", 3),
])
def test_bad_csv_values_name_line_and_field(tmp_path, change, field, line):
    base = dict(task_id=["a", "b"], core=["1", "1"], memory=["100", "200"], disk=["5", "6"],
                time=["1", "2"], tag=["x", "y"])
    path = tmp_path / "t.csv"
    pl.DataFrame({**base, **change}).write_csv(path)
    with pytest.raises(BadInputError) as caught:
        read_reports(path)
    assert caught.value.field == field and caught.value.line == line


def test_missing_column_and_missing_file(tmp_path):
    path = tmp_path / "t.csv"
    pl.DataFrame(dict(task_id=["a"], core=[1])).write_csv(path)
    with pytest.raises(BadInputError, match="missing column"):
        read_reports(path)
    with pytest.raises(BadInputError, match="no such file"):
        read_reports(tmp_path / "absent.txt")


@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_synthetic_workflows_are_seeded_and_shaped(workflow):
    a, b = synthetic(workflow, 400, 1), synthetic(workflow, 400, 1)
    assert a == b and len(a) == 400
    memory = np.array([t.peak.memory for t in a])
    assert (memory > 0).all()
    if workflow.endswith("-phase"):
        assert memory[200:].mean() > 1.5 * memory[:200].mean()


def test_unknown_workflow():
    with pytest.raises(UnknownNameError):
        synthetic("zipf", 10, 0)


def test_the_shared_real_traces_parse(shared_data):
    for name in ("bioblast", "coffea", "lobsterCMSanalysis", "lobsterCMSsimulation"):
        tasks = read_reports(shared_data / "xbucket" / f"{name}.txt")
        assert len(tasks) > 1800
        assert len({t.category for t in tasks}) >= 3
