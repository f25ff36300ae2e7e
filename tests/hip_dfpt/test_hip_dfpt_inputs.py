"""Geometry files and CLI input: malformed input fails with the file, line and field named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.hip_dfpt.cli import app
from schedlab.hip_dfpt.workloads import (
    builtin_molecule,
    builtin_molecules,
    load_molecule,
    read_xyz,
    write_xyz,
)

runner = CliRunner()
WATER = "3\nwater\nO 0 0 0.1173\nH 0 0.7572 -0.4692\nH 0 -0.7572 -0.4692\n"


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "mol.xyz"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_reads_a_valid_file(tmp_path: Path) -> None:
    mol = read_xyz(_write(tmp_path, WATER))
    assert mol.symbols == ("O", "H", "H") and mol.n_electrons == 10
    assert mol.coords.shape == (3, 3)


@pytest.mark.parametrize(("text", "line", "field"), [
    ("", 1, "count"),
    ("three\nc\nH 0 0 0\n", 1, "count"),
    ("0\nc\n", 1, "count"),
    ("3\nc\nO 0 0 0\nH 0 0.76 0.5\n", 5, "count"),  # one atom line missing
    ("2\nc\nH 0 0 0\nH 0 0 0.74\nH 0 0 2\n", 5, "count"),  # an extra atom line
    ("2\nc\nH 0 0 0\nH 0 0\n", 4, "atom"),
    ("2\nc\nH 0 0 0\nXx 0 0 0.74\n", 4, "element"),
    ("2\nc\nH 0 0 0\nH 0 zero 0.74\n", 4, "y"),
    ("2\nc\nH 0 0 0\nH 0 0 nan\n", 4, "z"),
    ("2\nc\nH 0 0 0\nH 0 0 1e9\n", 4, "z"),
    ("2\nc\nH 0 0 0\nH 0 0 0.1\n", 4, "coordinates"),  # atoms on top of each other
])
def test_malformed_files_name_line_and_field(tmp_path: Path, text: str, line: int,
                                             field: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(BadInputError) as info:
        read_xyz(path)
    assert info.value.path == path and info.value.line == line and info.value.field == field


def test_open_shell_is_rejected_with_the_charge_field(tmp_path: Path) -> None:
    with pytest.raises(BadInputError) as info:
        read_xyz(_write(tmp_path, "1\nc\nH 0 0 0\n"))
    assert info.value.field == "charge"
    assert read_xyz(_write(tmp_path, "1\nc\nH 0 0 0\n"), charge=-1).n_electrons == 2


def test_binary_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="UTF-8"):
        read_xyz(_write(tmp_path, b"\xff\xfe\x00garbage"))
    with pytest.raises(BadInputError, match="no such file"):
        read_xyz(tmp_path / "absent.xyz")


@given(st.text(alphabet="HCNO0123456789 .-e\nx\t", max_size=120))
def test_fuzzed_text_parses_or_fails_cleanly(tmp_path_factory, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "f.xyz"
    path.write_text(text)
    try:
        mol = read_xyz(path)
    except BadInputError as exc:
        assert exc.path == path
    else:
        assert len(mol.symbols) == len(mol.coords) and np.isfinite(mol.coords).all()


@settings(max_examples=50)  # a temporary directory per example: half the default keeps it ~1 s
@given(st.lists(st.tuples(st.sampled_from(["H", "He", "Li", "C", "N", "O"]),
                          st.floats(-20, 20), st.floats(-20, 20), st.floats(-20, 20)),
                min_size=1, max_size=6))
def test_write_read_round_trip(tmp_path_factory, atoms: list) -> None:
    from schedlab.hip_dfpt.workloads import Molecule

    mol = Molecule("m", tuple(a[0] for a in atoms), np.array([a[1:] for a in atoms]))
    path = write_xyz(mol, tmp_path_factory.mktemp("rt") / "m.xyz")
    try:
        back = read_xyz(path, charge=-(mol.n_electrons % 2))
    except BadInputError as exc:  # random atoms may coincide: then the clash is named
        assert exc.field == "coordinates"
    else:
        assert back.symbols == mol.symbols
        assert np.allclose(back.coords, mol.coords, atol=1e-7)


def test_builtins_and_unknown_names() -> None:
    for name in builtin_molecules():
        assert builtin_molecule(name).n_electrons % 2 == 0
    with pytest.raises(UnknownNameError):
        load_molecule("unobtainium")


def test_cli_bad_geometry_exits_2_with_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "2\nc\nH 0 0 0\nH 0 zero 0.74\n")
    result = runner.invoke(app, ["run", "--molecule", str(path)])
    assert result.exit_code == 2
    assert f"{path}:4" in result.output and "'y'" in result.output


def test_cli_unknown_balancer_and_executor(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--balancer", "magic"])
    assert result.exit_code == 2 and "hip-dfpt" in result.output
    result = runner.invoke(app, ["run", "--executor", "mpi"])
    assert result.exit_code == 2 and "executor" in result.output


def test_cli_molecules_json() -> None:
    import json

    result = runner.invoke(app, ["molecules", "--json"])
    assert result.exit_code == 0
    assert {row["name"] for row in json.loads(result.stdout)} == set(builtin_molecules())


def test_charge_applies_to_builtin_molecules() -> None:
    assert load_molecule("water", 2).charge == 2
    assert load_molecule("water", 2).n_electrons == 8
    with pytest.raises(BadInputError, match="closed shell") as info:
        load_molecule("water", 1)
    assert info.value.field == "charge"


def test_cli_open_shell_charge_on_builtin_exits_2() -> None:
    result = runner.invoke(app, ["run", "-m", "water", "--charge", "1"])
    assert result.exit_code == 2
    assert "field 'charge'" in result.output and "9 electrons" in result.output
