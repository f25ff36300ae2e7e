"""Kernel inputs from a file: NumPy ``.npz`` or JSON (``--inputs FILE``).

RedPanda (../shared/papers/08-redpanda.md) checks every compiled kernel against the xDSL
interpreter on some inputs. Seeded random inputs (``workloads.random_inputs``) only make sense
for the shipped kernels; for your own kernel (a CSR matrix, a sorted array, divisors that must
not be zero) you give the data:

- JSON: one object, ``{"A": [[1, 2], [3, 4]], "x": [5, 6], "n": 2}``: arrays as (nested)
  lists of integers, scalars as integers;
- ``.npz`` (``numpy.savez``): one integer array per memref, 0-d (or size-1) arrays for scalars.

``float`` (f32) arguments take numbers (integers or floats; JSON ``NaN``/``Infinity`` too),
rounded to IEEE binary32 and carried as their bit patterns (:mod:`.semantics`);
:func:`f32_values` turns the bit patterns of results and memories back into floats.

Every value is checked against the kernel's signature (name, element count, integer, fits the
element type); names the file does not give are filled from the seeded random inputs, and
:func:`load_inputs` says which.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.redpanda.frontend import Kernel, float_args


def _read(path: Path) -> dict[str, object]:
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as data:
                return {k: np.array(data[k]) for k in data.files}
        except (OSError, ValueError, EOFError) as exc:
            raise BadInputError(f"cannot read .npz inputs: {exc}", path=path) from None
    if suffix == ".json":
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise BadInputError(f"cannot read inputs: {exc}", path=path) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInputError(f"invalid JSON: {exc.msg}", path=path, line=exc.lineno) from None
        if not isinstance(data, dict):
            raise BadInputError(
                "inputs JSON must be one object mapping argument names to arrays/integers",
                path=path,
            )
        return data
    raise BadInputError(
        f"inputs must be a .npz or .json file, not '{suffix or path.name}'",
        path=path,
        field="inputs",
    )


def _bits(kernel: Kernel, name: str) -> int:
    from xdsl.dialects import builtin

    for arg_name, arg in zip(kernel.arg_names(), kernel.func.body.block.args, strict=True):
        if arg_name == name:
            t = arg.type.element_type if isinstance(arg.type, builtin.MemRefType) else arg.type
            return 64 if isinstance(t, builtin.IndexType) else t.width.data
    return 64


def _integers(value: object, name: str, path: Path | None) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise BadInputError(f"not an array of integers ({exc})", path=path, field=name) from None
    if array.dtype == bool:
        array = array.astype(np.int64)
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise BadInputError(
                "values must be integers (only float arguments take fractions)",
                path=path,
                field=name,
            )
        array = array.astype(np.int64)
    if array.dtype.kind not in "iu":
        raise BadInputError(
            f"values must be integers, got {array.dtype} data (ragged lists or strings?)",
            path=path,
            field=name,
        )
    return array.astype(np.int64)


def _floats(value: object, name: str, path: Path | None) -> np.ndarray:
    """f32 bit patterns (int64) of numbers given for an f32 argument."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise BadInputError(f"not an array of numbers ({exc})", path=path, field=name) from None
    if array.dtype == bool or array.dtype.kind not in "iuf":
        raise BadInputError(
            f"values must be numbers, got {array.dtype} data (ragged lists or strings?)",
            path=path,
            field=name,
        )
    wide = array.astype(np.float64)
    with np.errstate(over="ignore"):
        single = wide.astype(np.float32)
    overflow = np.isfinite(wide) & ~np.isfinite(single)
    if overflow.any():
        bad = float(wide[overflow].ravel()[0])
        raise BadInputError(
            f"value {bad!r} is outside the float (f32) range", path=path, field=name
        )
    return single.view(np.int32).astype(np.int64)


def f32_values(bits: object) -> np.ndarray | float:
    """Floats from f32 bit patterns (a result or a memory of an f32 argument)."""
    array = np.asarray(bits, dtype=np.int64)
    values = (array & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
    return float(values) if values.ndim == 0 else values


def validate_inputs(
    kernel: Kernel, given: Mapping[str, object], path: str | Path | None = None
) -> dict[str, object]:
    """Check ``given`` against ``kernel``'s arguments; returns only the names it holds."""
    path = Path(path) if path is not None else None
    shapes, scalars = kernel.memrefs(), kernel.scalars()
    valid = [*shapes, *scalars]
    out: dict[str, object] = {}
    floats = float_args(kernel)
    for name, value in given.items():
        if name not in valid:
            raise BadInputError(
                f"'{name}' is not an argument of {kernel.name} (arguments: {', '.join(valid)})",
                path=path,
                field=name,
            )
        if name in floats:
            array = _floats(value, name, path)
        else:
            array = _integers(value, name, path)
        bits = 32 if name in floats else _bits(kernel, name)
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        if (
            name not in floats
            and bits > 1
            and array.size
            and (array.min() < lo or array.max() > hi)
        ):
            raise BadInputError(
                f"values outside the i{bits} range [{lo}, {hi}]", path=path, field=name
            )
        if name in shapes:
            need = int(np.prod(shapes[name]))
            if array.size != need:
                shape = "x".join(map(str, shapes[name]))
                raise BadInputError(
                    f"memref {name} is {shape} ({need} values), the file gives "
                    f"{array.size} (shape {array.shape})",
                    path=path,
                    field=name,
                )
            out[name] = array.reshape(shapes[name])
        else:
            if array.size != 1:
                raise BadInputError(
                    f"scalar {name} needs one value, the file gives {array.size} values",
                    path=path,
                    field=name,
                )
            out[name] = int(array.ravel()[0])
    return out


def load_inputs(
    path: str | Path, kernel: Kernel, seed: int = 0
) -> tuple[dict[str, object], list[str]]:
    """Inputs for ``kernel`` from ``path``; missing names from the seeded random inputs.

    Returns (inputs, names that came from the seeded generator).
    """
    from schedlab.redpanda.workloads import random_inputs

    path = Path(path)
    given = validate_inputs(kernel, _read(path), path)
    inputs = random_inputs(kernel, seed)
    filled = [n for n in inputs if n not in given]
    inputs.update(given)
    return inputs, filled
