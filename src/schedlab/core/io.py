"""Atomic writes and table/trace readers that fail with the file, line and field named.

Why atomic: a report or a result file that a crash (or Ctrl-C) cut in half is worse than none,
because the next reader trusts it. Everything schedlab writes goes to a temporary file in the
same directory, is flushed to disk, and is renamed over the target in one step.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from schedlab.core.errors import BadInputError, ConfigError, SchedlabError
from schedlab.core.jsonable import jsonable  # noqa: F401  (re-exported: core.io.jsonable)

if TYPE_CHECKING:  # polars loads on first use: the CLI's help must not pay for it
    import polars as pl

T = TypeVar("T")
M = TypeVar("M")


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing; rename it over ``path`` on success.

    On any exception (including KeyboardInterrupt) the temporary file is removed and ``path`` is
    left exactly as it was.
    """
    path = Path(path)
    ensure_directory(path.parent)
    binary = "b" in mode
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise BadInputError(f"cannot write here: {exc.strerror}", path=path) from exc
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, 0o666 & ~_umask())  # mkstemp's 0600 would surprise other readers
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_text(path: str | Path, text: str) -> Path:
    with atomic_write(path, "w") as handle:
        handle.write(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    with atomic_write(path, "wb") as handle:
        handle.write(data)
    return Path(path)


def ensure_directory(path: str | Path) -> Path:
    """Create ``path`` as a directory, or explain clearly why it cannot be one."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BadInputError("exists and is not a directory", path=path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        raise BadInputError("a parent of this path is a file, not a directory", path=path) from exc
    except PermissionError as exc:
        raise BadInputError("permission denied creating directory", path=path) from exc
    except OSError as exc:  # read-only file system, /proc, ...
        raise BadInputError(f"cannot create directory: {exc.strerror}", path=path) from exc
    return path


def write_frame(frame: pl.DataFrame, path: str | Path) -> Path:
    """Write a Polars frame as Parquet or CSV (by suffix), atomically."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise BadInputError("tables are written as .parquet or .csv", path=path)
    with atomic_write(path, "wb") as handle:
        if suffix == ".parquet":
            frame.write_parquet(handle)
        else:
            frame.write_csv(handle)
    return path


def read_frame(path: str | Path, required: dict[str, type] | None = None) -> pl.DataFrame:
    """Read a CSV or Parquet table and check that ``required`` columns exist and are numeric.

    ``required`` maps a column name to ``float``/``int``/``str``; numeric columns are cast and a
    value that does not parse is reported with its 1-based data line (header is line 1 in CSV).
    """
    import polars as pl

    path = Path(path)
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    try:
        if path.suffix.lower() == ".parquet":
            frame = pl.read_parquet(path)
        else:
            frame = pl.read_csv(path, infer_schema_length=0)  # all strings: we cast and report
    except Exception as exc:  # polars/pyarrow raise many types; the user needs the file name
        raise BadInputError(f"cannot be read as a table: {_first_line(exc)}", path=path) from exc
    for column, kind in (required or {}).items():
        if column not in frame.columns:
            raise BadInputError(
                f"missing column; the table has {', '.join(frame.columns) or 'no columns'}",
                path=path,
                field=column,
            )
        if kind in (int, float):
            frame = frame.with_columns(_cast_checked(frame, column, kind, path))
    return frame


def _cast_checked(frame: pl.DataFrame, column: str, kind: type, path: Path) -> pl.Series:
    import polars as pl

    dtype = pl.Int64 if kind is int else pl.Float64
    series = frame[column]
    cast = series.cast(dtype, strict=False)
    bad = cast.is_null() & series.is_not_null()
    if bad.any():
        index = int(bad.arg_max())
        line = index + 2 if path.suffix.lower() == ".csv" else index + 1
        raise BadInputError(
            f"value {series[index]!r} is not a number", path=path, line=line, field=column
        )
    return cast


def parse_lines(
    path: str | Path,
    parse: Callable[[str, int], T | None],
    *,
    encoding: str = "utf-8",
) -> Iterator[T]:
    """Yield ``parse(line, lineno)`` for each line, wrapping any parse failure with file:line.

    ``parse`` returns None for lines to skip (comments, headers) and raises ValueError/KeyError/
    IndexError (or a BadInputError) for malformed ones.
    """
    path = Path(path)
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    with open(path, encoding=encoding, errors="strict") as handle:
        lineno = 0
        try:
            for lineno, line in enumerate(handle, start=1):
                item = parse(line.rstrip("\n"), lineno)
                if item is not None:
                    yield item
        except UnicodeDecodeError as exc:
            raise BadInputError("is not valid UTF-8 text", path=path, line=lineno + 1) from exc
        except SchedlabError as exc:
            if exc.path is None:
                exc.path, exc.line = path, exc.line or lineno
            raise
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            message = f"malformed record: {_first_line(exc)}"
            raise BadInputError(message, path=path, line=lineno) from exc


def csv_rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row dict) for every data row of a CSV file, values stripped; the header,
    the required columns and each row's field count are checked (errors name file/line/field).

    Why not :func:`read_frame`: streaming row by row keeps the exact line of a bad row, and
    readers that build dataclasses per row need no frame."""
    if path.is_dir():
        raise BadInputError("is a directory, not a CSV file", path=path)
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror}", path=path) from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise BadInputError("empty file (no header)", path=path, line=1) from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise BadInputError(f"not CSV: {exc}", path=path, line=1) from None
        missing = [c for c in required if c not in header]
        if missing:
            raise BadInputError(f"missing column(s) {', '.join(missing)}", path=path, line=1,
                                field=missing[0])
        line = 1
        try:
            for values in reader:
                line = reader.line_num
                if not values or all(not v.strip() for v in values):
                    continue
                if len(values) != len(header):
                    raise BadInputError(f"{len(values)} fields, header has {len(header)}",
                                        path=path, line=line)
                yield line, dict(zip(header, (v.strip() for v in values), strict=True))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise BadInputError(f"not CSV: {exc}", path=path, line=line + 1) from None


def read_json(path: str | Path, what: str = "file", expect: type = dict) -> Any:
    """Parse a JSON file whose top level must be ``expect``; every failure names the file.

    Missing file, bad UTF-8, invalid JSON (with its line) and a wrong top-level type all become
    a BadInputError, so config and trace readers need no error handling of their own.
    """
    path = Path(path)
    if not path.is_file():
        raise BadInputError(f"no such {what}", path=path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{what} is not UTF-8 text", path=path) from exc
    except json.JSONDecodeError as exc:
        raise BadInputError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from exc
    if not isinstance(data, expect):
        kind = "a JSON object" if expect is dict else f"JSON {expect.__name__}"
        raise BadInputError(f"{what} must be {kind}, got {type(data).__name__}", path=path)
    return data


def json_record(line: str, lineno: int) -> dict[str, Any]:
    """One JSON-lines record, which must be an object; errors carry the line number."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"not JSON: {exc.msg}", line=lineno) from None
    if not isinstance(record, dict):
        raise BadInputError("each line must be a JSON object", line=lineno)
    return record


def validate_model(model: type[M], data: Any, path: str | Path | None = None) -> M:
    """``model.model_validate(data)`` with the first Pydantic error as a ConfigError naming
    its field (a cross-field check may name it as ``"field: message"``)."""
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        if where is None and ": " in message:
            where, message = message.split(": ", 1)
        raise ConfigError(message, path=path, field=where) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


