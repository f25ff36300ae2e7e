"""Alibaba ``cluster-trace-v2026-GenAI``: the request log of a production text-to-image service
(``genai_lora_request_trace.csv``; not redistributable, read by path, never vendored).

Why here: CaRSS (hourly arrival counts), Edge-LLM (the arrival process) and the MEC coalition
market (who asks for which checkpoint, and service-time variability) all read it; each keeps its
own use of the rows, and this module keeps the one way of reading and checking them.
Columns used: ``gmt_create`` (``YYYY-mm-dd HH:MM:SS``, one-second resolution), ``groupId``,
``checkpoint_model_version_id``, ``num_lora``, ``exec_time_seconds``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from schedlab.core.errors import BadInputError
from schedlab.core.io import read_frame

if TYPE_CHECKING:
    import polars as pl

#: the trace's file name under the data directory's ``alibaba/`` folder
GENAI_FILE = "genai_lora_request_trace.csv"
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


def read_requests(path: str | Path, columns: Iterable[str] = ("gmt_create",), *,
                  numeric: Iterable[str] = ()) -> pl.DataFrame:
    """The trace's rows, with ``columns`` checked present, ``numeric`` ones cast to numbers and
    ``gmt_create`` parsed into a ``time`` column (Datetime); a bad value names file, line and
    field."""
    import polars as pl

    path = Path(path)
    frame = read_frame(path, {c: float for c in numeric})
    for column in ("gmt_create", *columns):
        if column not in frame.columns:
            raise BadInputError(f"missing column; the table has {', '.join(frame.columns)}",
                                path=path, field=column)
    raw = frame["gmt_create"].cast(pl.Utf8)
    stamps = raw.str.to_datetime(TIME_FORMAT, strict=False)
    bad = stamps.is_null()
    if bad.any():
        row = int(bad.arg_max())
        raise BadInputError(f"{raw[row]!r} is not a date-time YYYY-mm-dd HH:MM:SS", path=path,
                            line=row + 2, field="gmt_create")
    return frame.with_columns(time=stamps)
