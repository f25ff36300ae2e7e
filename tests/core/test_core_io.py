"""Atomic writes lose nothing on a crash; readers name file, line and field."""

import os
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core import io
from schedlab.core.errors import BadInputError


def test_crash_mid_write_keeps_previous_content(tmp_path: Path):
    target = tmp_path / "report.md"
    io.write_text(target, "old report\n")
    with pytest.raises(RuntimeError), io.atomic_write(target) as handle:
        handle.write("half of a new rep")
        raise RuntimeError("crash")
    assert target.read_text() == "old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # no temp file left


def test_interrupt_mid_write_leaves_no_file(tmp_path: Path):
    target = tmp_path / "claims.csv"
    with pytest.raises(KeyboardInterrupt), io.atomic_write(target) as handle:
        handle.write("system,claim")
        raise KeyboardInterrupt
    assert not any(tmp_path.iterdir())


def test_written_files_follow_the_umask(tmp_path: Path):
    previous = os.umask(0o022)
    try:
        path = io.write_bytes(tmp_path / "a.bin", b"x")
    finally:
        os.umask(previous)
    assert path.stat().st_mode & 0o777 == 0o644


def test_ensure_directory_rejects_a_file(tmp_path: Path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(BadInputError, match="not a directory"):
        io.ensure_directory(f)
    with pytest.raises(BadInputError):
        io.ensure_directory(f / "sub")


def test_frame_roundtrip_and_suffix_check(tmp_path: Path):
    frame = pl.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    for name in ("t.parquet", "t.csv"):
        io.write_frame(frame, tmp_path / name)
        back = io.read_frame(tmp_path / name, required={"a": int, "b": str})
        assert back["a"].to_list() == [1, 2]
    with pytest.raises(BadInputError, match="parquet or .csv"):
        io.write_frame(frame, tmp_path / "t.json")


def test_read_frame_names_missing_column_and_bad_value(tmp_path: Path):
    path = tmp_path / "trace.csv"
    path.write_text("task,memory\nt1,100\nt2,lots\n")
    with pytest.raises(BadInputError) as info:
        io.read_frame(path, required={"cores": float})
    assert "cores" in str(info.value) and "trace.csv" in str(info.value)
    with pytest.raises(BadInputError) as info:
        io.read_frame(path, required={"memory": float})
    assert info.value.line == 3 and info.value.field == "memory"
    assert "trace.csv:3" in str(info.value)


def test_read_frame_missing_and_garbage_files(tmp_path: Path):
    with pytest.raises(BadInputError, match="no such file"):
        io.read_frame(tmp_path / "nope.csv")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"\x00not parquet")
    with pytest.raises(BadInputError, match="bad.parquet"):
        io.read_frame(bad)


def _parse_pair(line: str, lineno: int):
    if not line or line.startswith("#"):
        return None
    name, value = line.split(",")
    return name, float(value)


def test_parse_lines_reports_line_number(tmp_path: Path):
    path = tmp_path / "pairs.txt"
    path.write_text("# header\na,1\nb,2\nc\n")
    with pytest.raises(BadInputError) as info:
        list(io.parse_lines(path, _parse_pair))
    assert info.value.line == 4 and "pairs.txt:4" in str(info.value)


@given(st.binary(max_size=300))
def test_parse_lines_fuzz_never_leaks_raw_errors(data: bytes):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.txt"
        path.write_bytes(data)
        try:
            rows = list(io.parse_lines(path, _parse_pair))
        except BadInputError as exc:
            assert exc.path == path and exc.line is not None
        else:
            assert all(isinstance(v, float) for _, v in rows)


def test_read_json_names_file_line_and_shape(tmp_path: Path):
    path = tmp_path / "cfg.json"
    with pytest.raises(BadInputError, match="no such config"):
        io.read_json(path, "config")
    path.write_text('{\n  "a": 1,\n  oops\n}')
    with pytest.raises(BadInputError) as info:
        io.read_json(path)
    assert info.value.line == 3 and "cfg.json:3" in str(info.value)
    path.write_text("[1, 2]")
    with pytest.raises(BadInputError, match="JSON object, got list"):
        io.read_json(path)
    assert io.read_json(path, expect=list) == [1, 2]
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(BadInputError, match="UTF-8"):
        io.read_json(path)


def test_json_record_and_validate_model():
    from pydantic import BaseModel, model_validator

    from schedlab.core.errors import ConfigError

    assert io.json_record('{"fn": "f"}', 4) == {"fn": "f"}
    with pytest.raises(BadInputError) as info:
        io.json_record("[1]", 7)
    assert info.value.line == 7

    class Box(BaseModel):
        width: int
        height: int = 1

        @model_validator(mode="after")
        def _square_enough(self):
            if self.height > 10 * self.width:
                raise ValueError("height: more than ten times the width")
            return self

    assert io.validate_model(Box, {"width": 2}).width == 2
    with pytest.raises(ConfigError) as info:
        io.validate_model(Box, {"width": "wide"}, path="box.json")
    assert info.value.field == "width" and "box.json" in str(info.value)
    with pytest.raises(ConfigError) as info:
        io.validate_model(Box, {"width": 1, "height": 50})
    assert info.value.field == "height" and "ten times" in info.value.message


def test_unwritable_destination_is_a_clear_error():
    with pytest.raises(BadInputError, match="/proc/"):
        io.write_text("/proc/schedlab-test/report.md", "x")
    with pytest.raises(BadInputError, match="cannot write here"):
        io.write_text("/proc/schedlab-test.md", "x")
