"""Readers and writers for public LLM request traces; every bad field names its file and line.

* Mooncake (Qin et al., FAST'25) JSONL: ``{"timestamp": ms, "input_length", "output_length",
  "hash_ids": [...]}`` with 512-token blocks; an optional ``"tenant"`` key is honoured, and a
  session/user id (``session_id``, ``user_id``, ``conversation_id``, ``chat_id``) is kept for
  ``assign_tenants(how="session")``.
* Azure LLM inference trace (Patel et al., Splitwise, ISCA'24) CSV: ``TIMESTAMP,ContextTokens,
  GeneratedTokens`` (timestamps as ``2023-11-16 18:15:46.6805900`` or seconds).
* BurstGPT (Wang et al., 2024) CSV: ``Timestamp,Model,Request tokens,Response tokens,...``;
  rows with 0 response tokens are failed requests and are skipped; the model is the tenant.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from schedlab.core.errors import BadInputError
from schedlab.core.io import atomic_write, json_record, parse_lines
from schedlab.llm.requests import BlockIds, Request, Trace

MOONCAKE_BLOCK_TOKENS = 512
#: keys a Mooncake-style record may carry a session / user id under (first one present wins)
SESSION_KEYS = ("session_id", "user_id", "conversation_id", "chat_id", "session", "user")


def _int_field(record: dict, key: str, minimum: int) -> int:
    if key not in record:
        raise BadInputError("missing", field=key)
    value = record[key]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadInputError(f"{value!r} is not an integer", field=key)
    try:
        number = float(value)
    except ValueError:
        raise BadInputError(f"{value!r} is not a number", field=key) from None
    if not math.isfinite(number) or number != int(number) or number < minimum:
        raise BadInputError(f"{value!r} is not an integer >= {minimum}", field=key)
    return int(number)


def _tenant_id(value: object, names: dict[str, int]) -> int:
    key = str(value).strip()
    if not key:
        raise BadInputError("is empty", field="tenant")
    return names.setdefault(key, len(names))


def read_mooncake(path: str | Path, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> Trace:
    """Read a Mooncake JSONL trace; timestamps become seconds from the first request."""
    names: dict[str, int] = {}
    sessions: dict[str, int] = {}
    ids = BlockIds()

    def parse(line: str, lineno: int) -> Request | None:
        if not line.strip():
            return None
        record = json_record(line, lineno)
        stamp = _int_field(record, "timestamp", 0)
        inp = _int_field(record, "input_length", 1)
        out = _int_field(record, "output_length", 1)
        hashes = record.get("hash_ids")
        if hashes is None:
            hashes = ids.fresh(math.ceil(inp / block_tokens))
        if not isinstance(hashes, list | tuple) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hashes
        ):
            raise BadInputError("must be a list of integers", line=lineno, field="hash_ids")
        need = math.ceil(inp / block_tokens)
        if len(hashes) != need:
            raise BadInputError(
                f"has {len(hashes)} ids; input_length {inp} with "
                f"{block_tokens}-token blocks needs {need}",
                line=lineno,
                field="hash_ids",
            )
        tenant = _tenant_id(record["tenant"], names) if "tenant" in record else 0
        session = -1
        for key in SESSION_KEYS:
            if record.get(key) is not None:
                value = str(record[key]).strip()
                if not value:
                    raise BadInputError("is empty", line=lineno, field=key)
                session = sessions.setdefault(value, len(sessions))
                break
        return Request(lineno, tenant, stamp / 1000.0, inp, out, tuple(hashes), session)

    requests = list(parse_lines(path, parse))
    return _finish(requests, block_tokens, Path(path), names)


def _finish(requests: list[Request], block_tokens: int, path: Path, names: dict[str, int]) -> Trace:
    if not requests:
        raise BadInputError("has no requests", path=path)
    start = min(r.arrival for r in requests)
    for r in requests:
        r.arrival -= start
    tenant_names = sorted(names, key=names.__getitem__) if names else ["t0"]
    return Trace(
        requests,
        block_tokens=block_tokens,
        name=path.stem,
        tenant_names=tenant_names,
        source=str(path),
    )


def _parse_time(text: str) -> float:
    """Seconds since the epoch from a number or an ISO date with up to 9 fraction digits."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    head, dot, frac = text.partition(".")
    stamp = datetime.fromisoformat(head)
    fraction = float("0." + frac) if dot and frac.isdigit() else 0.0
    if dot and not frac.isdigit():
        raise ValueError(f"bad fractional seconds in {text!r}")
    return stamp.timestamp() + fraction


def _read_csv(
    path: str | Path,
    columns: dict[str, str],
    build: Callable[[dict[str, str], int], Request | None],
) -> list[Request]:
    """Check the header has ``columns`` and turn each row into a Request, naming line and field."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    out: list[Request] = []
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in (reader.fieldnames or [])]
            for column in columns.values():
                if column not in header:
                    raise BadInputError(
                        f"missing column; header is {', '.join(header)}",
                        path=path,
                        line=1,
                        field=column,
                    )
            reader.fieldnames = header
            for row in reader:
                lineno = reader.line_num
                try:
                    req = build(row, lineno)
                except BadInputError as exc:
                    exc.path, exc.line = path, lineno
                    raise
                if req is not None:
                    out.append(req)
    except UnicodeDecodeError as exc:
        raise BadInputError("is not valid UTF-8 text", path=path) from exc
    except csv.Error as exc:
        raise BadInputError(f"malformed CSV: {exc}", path=path) from exc
    return out


def _cell(row: dict[str, str], column: str) -> str:
    value = row.get(column)
    if value is None:
        raise BadInputError("missing value (short row)", field=column)
    return value


def _cell_int(row: dict[str, str], column: str, minimum: int) -> int:
    return _int_field({column: _cell(row, column).strip()}, column, minimum)


def read_azure(path: str | Path, block_tokens: int = 16) -> Trace:
    """Read the Azure LLM inference CSV; every request gets fresh (unshared) block ids."""
    ids = BlockIds()
    names: dict[str, int] = {}
    cols = dict(time="TIMESTAMP", inp="ContextTokens", out="GeneratedTokens")

    def build(row: dict[str, str], lineno: int) -> Request:
        try:
            stamp = _parse_time(_cell(row, cols["time"]))
        except ValueError as exc:
            raise BadInputError(f"not a timestamp: {exc}", field=cols["time"]) from None
        inp = _cell_int(row, cols["inp"], 1)
        out = _cell_int(row, cols["out"], 1)
        tenant = _tenant_id(row["tenant"], names) if row.get("tenant") else 0
        return Request(lineno, tenant, stamp, inp, out, ids.fresh(math.ceil(inp / block_tokens)))

    path = Path(path)
    return _finish(_read_csv(path, cols, build), block_tokens, path, names)


def read_burstgpt(path: str | Path, block_tokens: int = 16) -> Trace:
    """Read a BurstGPT CSV; the ``Model`` column (ChatGPT, GPT-4) becomes the tenant."""
    ids = BlockIds()
    names: dict[str, int] = {}
    cols = dict(time="Timestamp", model="Model", inp="Request tokens", out="Response tokens")

    def build(row: dict[str, str], lineno: int) -> Request | None:
        try:
            stamp = float(_cell(row, cols["time"]))
        except ValueError:
            raise BadInputError("not a number", field=cols["time"]) from None
        if not math.isfinite(stamp) or stamp < 0:
            raise BadInputError("must be a finite time >= 0", field=cols["time"])
        inp = _cell_int(row, cols["inp"], 0)
        out = _cell_int(row, cols["out"], 0)
        if out == 0 or inp == 0:
            return None  # a failed request in BurstGPT: nothing was served
        tenant = _tenant_id(_cell(row, cols["model"]), names)
        return Request(lineno, tenant, stamp, inp, out, ids.fresh(math.ceil(inp / block_tokens)))

    path = Path(path)
    return _finish(_read_csv(path, cols, build), block_tokens, path, names)


def write_mooncake(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as Mooncake JSONL (with a ``tenant`` key), atomically."""
    with atomic_write(path) as handle:
        for r in trace.requests:
            handle.write(
                json.dumps(
                    dict(
                        timestamp=int(round(r.arrival * 1000)),
                        input_length=r.input_len,
                        output_length=r.output_len,
                        hash_ids=list(r.blocks),
                        tenant=trace.tenant_names[r.tenant],
                    )
                )
                + "\n"
            )
    return Path(path)


def write_azure(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` in the Azure CSV format (plus a ``tenant`` column), atomically."""
    with atomic_write(path) as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens", "tenant"])
        for r in trace.requests:
            writer.writerow(
                [f"{r.arrival:.6f}", r.input_len, r.output_len, trace.tenant_names[r.tenant]]
            )
    return Path(path)


READERS: dict[str, Callable[..., Trace]] = {
    "mooncake": read_mooncake,
    "azure": read_azure,
    "burstgpt": read_burstgpt,
}


def read_trace(path: str | Path, fmt: str | None = None, block_tokens: int | None = None) -> Trace:
    """Read a trace, guessing the format from the suffix/header when ``fmt`` is None."""
    path = Path(path)
    if fmt is None:
        fmt = _guess_format(path)
    if fmt not in READERS:
        raise BadInputError(f"unknown trace format '{fmt}' ({', '.join(READERS)})", field="format")
    kwargs = {} if block_tokens is None else dict(block_tokens=block_tokens)
    return READERS[fmt](path, **kwargs)


def _guess_format(path: Path) -> str:
    if path.suffix.lower() in (".jsonl", ".json"):
        return "mooncake"
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    with open(path, encoding="utf-8", errors="replace") as handle:
        header = handle.readline()
    if "ContextTokens" in header:
        return "azure"
    if "Request tokens" in header:
        return "burstgpt"
    raise BadInputError(
        "cannot tell the trace format; pass --format mooncake|azure|burstgpt", path=path, line=1
    )
