"""Workloads for HIP-DFPT (../shared/papers/13-hip_dfpt.md): molecules and synthetic systems.

Two sources of irregular integration tasks:

* real molecules (an XYZ file or a built-in geometry), integrated with PySCF grids and basis
  sets by :mod:`schedlab.hip_dfpt.dft`;
* synthetic all-electron systems of up to hundreds of thousands of atoms, whose batch features
  (grid points, significant basis functions, atoms) are drawn from documented distributions so
  the load balancers can be simulated at the paper's scale (8,192 devices, 200,006 atoms).

The XYZ reader is strict on purpose: a geometry that PySCF would silently misread (two atoms on
top of each other, an odd electron count) becomes a BadInputError naming the file, line and field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, ConfigError, UnknownNameError

#: element symbols H..Xe with their atomic numbers (all-electron, light and medium elements)
ELEMENTS: tuple[str, ...] = (
    "H",
    "He",
    "Li",
    "Be",
    "B",
    "C",
    "N",
    "O",
    "F",
    "Ne",
    "Na",
    "Mg",
    "Al",
    "Si",
    "P",
    "S",
    "Cl",
    "Ar",
    "K",
    "Ca",
    "Sc",
    "Ti",
    "V",
    "Cr",
    "Mn",
    "Fe",
    "Co",
    "Ni",
    "Cu",
    "Zn",
    "Ga",
    "Ge",
    "As",
    "Se",
    "Br",
    "Kr",
    "Rb",
    "Sr",
    "Y",
    "Zr",
    "Nb",
    "Mo",
    "Tc",
    "Ru",
    "Rh",
    "Pd",
    "Ag",
    "Cd",
    "In",
    "Sn",
    "Sb",
    "Te",
    "I",
    "Xe",
)
_Z = {symbol.lower(): z for z, symbol in enumerate(ELEMENTS, start=1)}
#: closer than this (Angstrom) two nuclei are a typo, not chemistry
MIN_DISTANCE = 0.3


@dataclass(frozen=True)
class Molecule:
    """A closed-shell molecule: element symbols, Cartesian coordinates in Angstrom, charge."""

    name: str
    symbols: tuple[str, ...]
    coords: np.ndarray  # (n_atoms, 3), Angstrom
    charge: int = 0

    @property
    def n_electrons(self) -> int:
        return sum(_Z[s.lower()] for s in self.symbols) - self.charge

    def pyscf_atom(self) -> list[tuple[str, tuple[float, float, float]]]:
        """The geometry in PySCF's ``atom=`` list form."""
        return [
            (s, tuple(float(v) for v in xyz))
            for s, xyz in zip(self.symbols, self.coords, strict=True)
        ]


def _check_geometry(
    symbols: list[str], coords: np.ndarray, charge: int, path: Path | None, first_line: int
) -> None:
    """Reject geometries that are not a closed-shell molecule PySCF can integrate."""
    if len(symbols) > 1:
        diff = coords[:, None, :] - coords[None, :, :]
        dist = np.sqrt((diff**2).sum(-1)) + np.eye(len(symbols)) * 1e9
        i, j = np.unravel_index(int(np.argmin(dist)), dist.shape)
        if dist[i, j] < MIN_DISTANCE:
            raise BadInputError(
                f"atoms {i + 1} and {j + 1} are {dist[i, j]:.3f} A apart (< {MIN_DISTANCE} A)",
                path=path,
                line=first_line + max(i, j),
                field="coordinates",
            )
    electrons = sum(_Z[s.lower()] for s in symbols) - charge
    if electrons <= 0 or electrons % 2:
        raise BadInputError(
            f"{electrons} electrons: the DFPT runtime needs a closed shell "
            "(even, positive electron count)",
            path=path,
            field="charge",
        )


def _parse_atom(text: str, path: Path, lineno: int) -> tuple[str, np.ndarray]:
    fields = text.split()
    if len(fields) < 4:
        raise BadInputError(
            f"expected 'Element x y z', got {text.strip()!r}", path=path, line=lineno, field="atom"
        )
    symbol = fields[0]
    if symbol.lower() not in _Z:
        raise BadInputError(f"unknown element {symbol!r}", path=path, line=lineno, field="element")
    values = []
    for axis, raw in zip("xyz", fields[1:4], strict=True):
        try:
            value = float(raw)
        except ValueError:
            raise BadInputError(
                f"{raw!r} is not a number", path=path, line=lineno, field=axis
            ) from None
        if not math.isfinite(value) or abs(value) > 1e4:
            raise BadInputError(
                f"{raw!r} is not a finite coordinate within 10^4 A",
                path=path,
                line=lineno,
                field=axis,
            )
        values.append(value)
    return ELEMENTS[_Z[symbol.lower()] - 1], np.array(values)


def read_xyz(path: str | Path, charge: int = 0) -> Molecule:
    """Read a standard XYZ file: atom count, a comment line, then ``Element x y z`` (Angstrom)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise BadInputError("is not valid UTF-8 text", path=path) from exc
    if not lines or not lines[0].strip():
        raise BadInputError(
            "empty file; line 1 must be the atom count", path=path, line=1, field="count"
        )
    try:
        count = int(lines[0].split()[0])
    except ValueError:
        raise BadInputError(
            f"atom count {lines[0].strip()!r} is not an integer", path=path, line=1, field="count"
        ) from None
    if count < 1 or count > 5000:
        raise BadInputError(
            f"atom count {count} is outside 1..5000", path=path, line=1, field="count"
        )
    body = lines[2 : 2 + count]
    if len(body) < count or any(not line.strip() for line in body):
        found = sum(1 for line in body if line.strip())
        raise BadInputError(
            f"header says {count} atoms but {found} atom lines follow",
            path=path,
            line=min(len(lines), 2 + found) + 1,
            field="count",
        )
    extra = [i for i, line in enumerate(lines[2 + count :], start=3 + count) if line.strip()]
    if extra:
        raise BadInputError(
            f"header says {count} atoms but more lines follow",
            path=path,
            line=extra[0],
            field="count",
        )
    atoms = [_parse_atom(text, path, lineno) for lineno, text in enumerate(body, start=3)]
    symbols = [a[0] for a in atoms]
    coords = np.array([a[1] for a in atoms])
    _check_geometry(symbols, coords, charge, path, first_line=3)
    return Molecule(path.stem, tuple(symbols), coords, charge)


def write_xyz(molecule: Molecule, path: str | Path) -> Path:
    """Write a molecule as XYZ (atomically), e.g. to start from a built-in geometry."""
    from schedlab.core.io import write_text

    rows = [
        f"{s:<2} {x:14.8f} {y:14.8f} {z:14.8f}"
        for s, (x, y, z) in zip(molecule.symbols, molecule.coords, strict=True)
    ]
    return write_text(path, f"{len(rows)}\n{molecule.name}\n" + "\n".join(rows) + "\n")


_BUILTIN: dict[str, str] = {
    "h2": "H 0 0 0; H 0 0 0.74",
    "water": "O 0 0 0.1173; H 0 0.7572 -0.4692; H 0 -0.7572 -0.4692",
    "ammonia": "N 0 0 0.1162; H 0 0.9397 -0.2711; H 0.8138 -0.4699 -0.2711; "
    "H -0.8138 -0.4699 -0.2711",
    "methane": "C 0 0 0; H 0.629 0.629 0.629; H -0.629 -0.629 0.629; H -0.629 0.629 -0.629; "
    "H 0.629 -0.629 -0.629",
    "ethane": "C 0 0 0.765; C 0 0 -0.765; H 1.018 0 1.16; H -0.509 0.882 1.16; "
    "H -0.509 -0.882 1.16; H -1.018 0 -1.16; H 0.509 -0.882 -1.16; H 0.509 0.882 -1.16",
    "butane": "C 0 0 0; C 1.54 0 0; C 2.05 1.45 0; C 3.59 1.45 0; H -0.36 -1.03 0; "
    "H -0.36 0.51 0.89; H -0.36 0.51 -0.89; H 1.90 -0.51 0.89; H 1.90 -0.51 -0.89; "
    "H 1.69 1.96 0.89; H 1.69 1.96 -0.89; H 3.95 0.42 0; H 3.95 1.96 0.89; "
    "H 3.95 1.96 -0.89",
}


def _benzene() -> str:
    angles = np.arange(6) * np.pi / 3
    carbons = [f"C {1.39 * np.cos(a):.5f} {1.39 * np.sin(a):.5f} 0" for a in angles]
    hydrogens = [f"H {2.47 * np.cos(a):.5f} {2.47 * np.sin(a):.5f} 0" for a in angles]
    return "; ".join(carbons + hydrogens)


_BUILTIN["benzene"] = _benzene()


def alkane(carbons: int) -> Molecule:
    """A straight-chain alkane C_nH_(2n+2), all-trans zig-zag (C-C 1.54 A, C-H 1.09 A,
    tetrahedral angles): a scalable test molecule (``alkane-40`` is 122 atoms)."""
    if not 1 <= carbons <= 2000:
        raise ConfigError(f"an alkane needs 1..2000 carbons, got {carbons}", field="molecule")
    if carbons == 1:
        methane = builtin_molecule("methane")
        return Molecule("alkane-1", methane.symbols, methane.coords, 0)
    half = np.deg2rad(109.47 / 2)
    step, rise = 1.54 * np.sin(half), 1.54 * np.cos(half)
    symbols, coords = [], []
    for i in range(carbons):
        up = i % 2 == 1
        c = np.array([i * step, rise if up else 0.0, 0.0])
        symbols.append("C")
        coords.append(c)
        away = 1.0 if up else -1.0
        for side in (1.0, -1.0):
            symbols.append("H")
            coords.append(c + 1.09 * np.array([0.0, away * np.cos(half), side * np.sin(half)]))
        for end, direction in ((0, -1.0), (carbons - 1, 1.0)):
            if i == end:  # the missing chain neighbour's direction carries one more H
                neighbour = np.array([direction * step, (-rise if up else rise), 0.0])
                symbols.append("H")
                coords.append(c + 1.09 * neighbour / np.linalg.norm(neighbour))
    return Molecule(f"alkane-{carbons}", tuple(symbols), np.array(coords), 0)


def builtin_molecules() -> list[str]:
    return sorted(_BUILTIN)


def builtin_molecule(name: str, charge: int = 0) -> Molecule:
    """A small closed-shell molecule shipped with schedlab (geometries in Angstrom); a
    ``charge`` that leaves an open shell is refused like one in an XYZ file."""
    if name.startswith("alkane-") and name[7:].isdigit():
        return _charged(alkane(int(name[7:])), charge)
    if name not in _BUILTIN:
        raise UnknownNameError("molecule", name, builtin_molecules())
    symbols, coords = [], []
    for item in _BUILTIN[name].split(";"):
        fields = item.split()
        symbols.append(fields[0])
        coords.append([float(v) for v in fields[1:4]])
    if charge:
        _check_geometry(symbols, np.array(coords), charge, None, first_line=1)
    return Molecule(name, tuple(symbols), np.array(coords), charge)


def _charged(mol: Molecule, charge: int) -> Molecule:
    """``mol`` with ``charge`` (refused, like an XYZ file's, when it leaves an open shell)."""
    if not charge:
        return mol
    _check_geometry(list(mol.symbols), mol.coords, charge, None, first_line=1)
    return Molecule(mol.name, mol.symbols, mol.coords, charge)


def load_molecule(spec: str | Path, charge: int = 0) -> Molecule:
    """A built-in molecule by name, or an XYZ file by path."""
    text = str(spec)
    if text in _BUILTIN:
        return builtin_molecule(text, charge)
    if text.startswith("alkane-") and text[7:].isdigit():
        return builtin_molecule(text, charge)
    if text.endswith(".xyz") or Path(text).exists():
        return read_xyz(text, charge)
    raise UnknownNameError("molecule (or .xyz file)", text, builtin_molecules())
