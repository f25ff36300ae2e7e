"""The full intent path for a columnar batch: parse + validate + map, vectorised (Polars/NumPy).

Paper: IFlux (../shared/papers/10-iflux.md) maps 3.5M intents/s. The per-intent path (Pydantic
model, then the table) runs at 10-40k intents/s; this module does the same work a column at a
time on a table of intents (a Polars DataFrame, a dict of columns, or a CSV/Parquet/Arrow file),
one row per intent, with the fields of :class:`intents.Intent` as columns:

* **parse**: each enum column is cast to a Polars ``Enum`` of its values (a dictionary lookup
  per row; an already categorical column costs one lookup per distinct value); ``size`` is an
  integer column or strings like ``"64MiB"`` (parsed once per distinct value);
* **validate**: unknown columns, missing required ones (``path``, ``usage``), nulls, unknown enum
  values, relative paths, negative sizes, ``files < 1`` and the four contradictions of
  :meth:`Intent.contradiction`, as boolean masks; the first bad row is reported as a one-line
  :class:`BadInputError` naming the file, the row (``line``: the CSV line) and the field;
* **map**: one mixed-radix index per row and two gathers in the compiled rule table.

Not per row: the cross-intent checks of :func:`intents.check_job` (one job's paths declared twice
differently, or nested) need a group-by over paths; :func:`check_paths` does the first when
asked (slower, reported separately in the benchmark); nested paths are left to ``check_job``.
Capacity fitting stays per job (:func:`policies.allocate`): a batch gets each intent's tier
chain, its first tier this node has (:meth:`BatchResult.tiers`) and software, not a packing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.core.io import write_frame
from schedlab.iflux.intents import FEATURES, SIZE_BOUNDS, parse_size
from schedlab.iflux.rules import CompiledRules, Tier

ENUMS = {name: [str(m) for m in enum] for name, enum in FEATURES[:-1]}
DEFAULTS = {"level": "job", "data": "dataset", "sharing": "independent", "mode": "read-write",
            "consistency": "eventual", "pattern": "large-sequential"}
COLUMNS = ("path", "name", *ENUMS, "size", "files", "source")
REQUIRED = ("path", "usage")


@dataclass
class BatchResult:
    """Per intent (row): its chain id (into ``chains``), first-choice tier and software mask."""

    chains: list[tuple[Tier, ...]]
    chain_id: np.ndarray
    soft: np.ndarray

    def tiers(self, available: set[str] | None = None) -> list[str]:
        """Each intent's first tier of its chain that this node has (``available``; default:
        the tiers with room in ``policies.DEFAULT_CAPACITY``, so no gpu-direct without a
        GPU). Capacity is not fitted: that stays per job."""
        if available is None:
            from schedlab.iflux.policies import DEFAULT_CAPACITY

            available = {str(t) for t, room in DEFAULT_CAPACITY.items() if room > 0}
        first = np.array([next((str(t) for t in c if str(t) in available), "pfs")
                          for c in self.chains])
        return first[self.chain_id].tolist()

    def __len__(self) -> int:
        return len(self.chain_id)


def _where(path: str | os.PathLike | None, row: int, csv: bool) -> dict[str, Any]:
    return dict(path=path, line=row + 2 if csv else None)


def _row_error(message: str, mask: pl.Series | np.ndarray, field: str,
               path: str | os.PathLike | None, csv: bool) -> BadInputError:
    row = int(np.argmax(np.asarray(mask)))
    where = _where(path, row, csv)
    prefix = "" if csv and path is not None else f"row {row}: "
    return BadInputError(prefix + message, field=field, **where)


def _frame(data: pl.DataFrame | dict[str, Any]) -> pl.DataFrame:
    if isinstance(data, pl.DataFrame):
        return data
    if isinstance(data, dict):
        try:
            return pl.DataFrame(data)
        except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
            raise BadInputError(f"not a table of intents: {exc}".splitlines()[0]) from None
    raise BadInputError(f"a batch is a Polars DataFrame or a dict of columns, got "
                        f"{type(data).__name__}")


def parse(data: pl.DataFrame | dict[str, Any], path: str | os.PathLike | None = None,
          csv: bool = False) -> np.ndarray:
    """Validate a batch and return its (n, 8) uint8 feature codes (the encode() layout)."""
    frame = _frame(data)
    n = frame.height
    unknown = [c for c in frame.columns if c not in COLUMNS]
    if unknown:
        raise BadInputError(f"unknown intent column; valid: {', '.join(COLUMNS)}",
                            field=unknown[0], path=path)
    for name in REQUIRED:
        if name not in frame.columns:
            raise BadInputError("required column is missing", field=name, path=path)
    codes = np.empty((n, len(FEATURES)), dtype=np.uint8)
    for j, name in enumerate(ENUMS):
        values = ENUMS[name]
        if name not in frame.columns:
            codes[:, j] = values.index(DEFAULTS[name])
            continue
        column = frame[name]
        if column.null_count():
            if name in REQUIRED:
                raise _row_error("missing value", column.is_null(), name, path, csv)
            column = column.fill_null(DEFAULTS[name])
        try:
            codes[:, j] = column.cast(pl.Enum(values)).to_physical().to_numpy()
        except (pl.exceptions.PolarsError, TypeError):
            bad = ~column.cast(pl.String).is_in(values)
            got = column.filter(bad)[0] if bad.any() else None
            allowed = " or ".join(f"'{v}'" for v in values)
            raise _row_error(f"Input should be {allowed} (got {got!r})", bad, name, path,
                             csv) from None
    paths = frame["path"]
    if paths.dtype != pl.String:
        raise BadInputError("must be a column of strings", field="path", path=path)
    if paths.null_count():
        raise _row_error("missing value", paths.is_null(), "path", path, csv)
    absolute = paths.str.starts_with("/")
    if not absolute.all():
        raise _row_error("must be an absolute path", ~absolute.fill_null(False), "path", path,
                         csv)
    if "source" in frame.columns:
        source = frame["source"].fill_null("")
        bad = (source != "") & ~source.str.starts_with("/")
        if bad.any():
            raise _row_error("must be an absolute path", bad, "source", path, csv)
    sizes = _sizes(frame, path, csv)
    codes[:, -1] = np.searchsorted(SIZE_BOUNDS, sizes, side="right")
    if "files" in frame.columns:
        files = frame["files"]
        if not files.dtype.is_integer():
            raise BadInputError("must be an integer column", field="files", path=path)
        bad = files.fill_null(1) < 1
        if bad.any():
            raise _row_error("files must be >= 1", bad, "files", path, csv)
    _contradictions(codes, path, csv)
    return codes


def _sizes(frame: pl.DataFrame, path, csv: bool) -> np.ndarray:
    if "size" not in frame.columns:
        return np.zeros(frame.height, dtype=np.int64)
    column = frame["size"].fill_null(0)
    if column.dtype.is_integer():
        sizes = column.to_numpy().astype(np.int64, copy=False)
    elif column.dtype in (pl.String, pl.Categorical) or isinstance(column.dtype, pl.Enum):
        column = column.cast(pl.String)
        distinct = column.unique()
        table = {}
        for value in distinct.to_list():  # sizes repeat: parse each distinct string once
            try:
                table[value] = parse_size(value)
            except ValueError as exc:
                raise _row_error(str(exc), (column == value).to_numpy(), "size", path,
                                 csv) from None
        sizes = column.replace_strict(table, return_dtype=pl.Int64).to_numpy()
    else:
        raise BadInputError("must be integers (bytes) or strings like '64MiB'", field="size",
                            path=path)
    bad = sizes < 0
    if bad.any():
        raise _row_error("size must be >= 0", bad, "size", path, csv)
    return sizes


_COL = {name: j for j, (name, _) in enumerate(FEATURES)}


def _code(name: str, value: str) -> int:
    return ENUMS[name].index(value)


def _contradictions(codes: np.ndarray, path, csv: bool) -> None:
    usage, mode = codes[:, _COL["usage"]], codes[:, _COL["mode"]]
    pattern, sharing = codes[:, _COL["pattern"]], codes[:, _COL["sharing"]]
    level = codes[:, _COL["level"]]
    checks = (
        ((usage == _code("usage", "input")) & (mode == _code("mode", "write-only")), "mode",
         "an input cannot be write-only"),
        ((usage == _code("usage", "output")) & (mode == _code("mode", "read-only")), "mode",
         "an output cannot be read-only"),
        ((pattern == _code("pattern", "checkpoint")) & (mode == _code("mode", "read-only")),
         "pattern", "a checkpoint is written, so it cannot be read-only"),
        ((usage == _code("usage", "temporary")) & (sharing == _code("sharing", "shared"))
         & (level == _code("level", "workflow")), "usage",
         "workflow-shared data outlives a job, so it cannot be temporary"),
    )
    for mask, field, why in checks:
        if mask.any():
            raise _row_error(f"contradicting intent: {why}", mask, field, path, csv)


def check_paths(data: pl.DataFrame | dict[str, Any], job: str | None = None,
                path: str | os.PathLike | None = None, csv: bool = False) -> None:
    """Cross-intent checks of :func:`intents.check_job`, per ``job`` column when given: a path
    declared twice with different fields, reported at the first row that clashes with an
    earlier one. (Nested paths are checked per job by check_job.)"""
    frame = _frame(data)
    keys = [job, "path"] if job else ["path"]
    for key in keys:
        if key not in frame.columns:
            raise BadInputError("no such column", field=key, path=path)
    others = [c for c in frame.columns if c not in keys]
    if not others:
        return
    clash = (frame.group_by(keys).agg(pl.struct(others).n_unique().alias("n"))
             .filter(pl.col("n") > 1))
    if clash.height:
        where = frame.select(keys).with_row_index("_row").join(clash.select(keys), on=keys)
        second = where.filter(pl.int_range(pl.len()).over(keys) == 1)["_row"].min()
        raise _row_error(f"contradicting intents for {frame['path'][second]}: declared twice "
                         "with different usage/mode/pattern",
                         np.arange(frame.height) == second, "path", path, csv)


def map_batch(data: pl.DataFrame | dict[str, Any], table: CompiledRules | None = None,
              path: str | os.PathLike | None = None, csv: bool = False) -> BatchResult:
    """Parse + validate + map a columnar batch: each intent's tier chain and software."""
    if table is None:
        from schedlab.iflux.policies import shared_mapper

        table = shared_mapper("iflux").table
    codes = parse(data, path, csv)
    idx = codes[:, 0].astype(np.int32) * table.strides[0]
    for j in range(1, codes.shape[1]):
        idx += codes[:, j] * table.strides[j]
    chain_id = table.chain_of[idx]
    soft = table.soft_of[idx]
    pfs_only = np.array([c == (Tier.PFS,) for c in table.chains])[chain_id]
    soft = np.where(pfs_only, 0, soft).astype(np.uint8)
    return BatchResult(table.chains, chain_id, soft)


def read_batch(path: str | os.PathLike) -> tuple[pl.DataFrame, bool]:
    """A batch file: ``.csv``, ``.parquet`` or ``.arrow``/``.ipc``; (frame, is_csv)."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError("is a directory, not a file" if path.is_dir() else "no such file",
                            path=path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pl.read_csv(path, infer_schema_length=10_000), True
        if suffix == ".parquet":
            return pl.read_parquet(path), False
        if suffix in (".arrow", ".ipc", ".feather"):
            return pl.read_ipc(path), False
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise BadInputError(f"cannot read: {str(exc).splitlines()[0]}", path=path) from None
    raise BadInputError("a batch file is .csv, .parquet or .arrow", path=path)


def map_file(path: str | os.PathLike, out: str | os.PathLike, paths: bool = False) -> int:
    """Map a batch file and write its rows with ``tier``, ``chain`` and ``software`` columns
    to ``out`` (.parquet or .csv by suffix; written to a temporary sibling and renamed).
    Returns the row count.
    ``paths``: the batch is one job's intents, so a path declared twice differently is an
    error (:func:`check_paths`)."""
    from schedlab.iflux.rules import soft_list

    out = Path(out)
    if out.is_dir():
        raise BadInputError("is a directory (give the .parquet or .csv file to write)", path=out)
    if not out.parent.is_dir():
        raise BadInputError(f"no such directory: {out.parent}", path=out)
    frame, csv = read_batch(path)
    result = map_batch(frame, path=path, csv=csv)
    if paths:
        check_paths(frame, path=path, csv=csv)
    chains = [",".join(str(t) for t in c) for c in result.chains]
    tiers = np.array(result.tiers(), dtype=object)
    soft = np.where(tiers == "pfs", 0, result.soft).astype(np.uint8)  # no software on the PFS
    softs = {int(m): ",".join(soft_list(int(m))) for m in np.unique(soft)}
    mapped = frame.with_columns(
        tier=pl.Series(tiers.tolist(), dtype=pl.String),
        chain=pl.Series(np.array(chains)[result.chain_id]),
        software=pl.Series(soft).replace_strict(softs, return_dtype=pl.String))
    try:  # .parquet or .csv by suffix, through a temporary sibling renamed into place
        write_frame(mapped, out)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise BadInputError(f"cannot write: {str(exc).splitlines()[0]}", path=out) from None
    return frame.height


__all__ = ["BatchResult", "check_paths", "map_batch", "map_file", "parse", "read_batch"]
