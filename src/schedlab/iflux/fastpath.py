"""The per-job decision without NumPy, Pydantic or Numba: a precompiled rule table read in
milliseconds, so a scheduler hook that is a fresh process decides in well under 50 ms.

Paper: IFlux (../shared/papers/10-iflux.md) reports a 0.02% scheduler overhead. A Slurm hook
(Prolog, or the ``burst_buffer.lua`` functions) is a new process per call, so what counts is the
wall time *including* interpreter start and imports. This module is standard library only:

* :func:`rules.write_table` (run once, at install time, with the full package) evaluates the
  rules on every point of the intent space (:func:`rules.compile_rules`) and stores the table
  as JSON;
* :func:`load_table` reads it back; :func:`parse_script` reads ``#IFLUX`` and ``#BB_LUA``
  intent lines, :func:`validate` applies the same checks as :class:`intents.Intent` (field
  names, enum values, sizes, absolute paths, contradictions, duplicate or nested paths) and
  :func:`allocate` maps and fits them (first-fit decreasing, as :func:`policies.allocate`).

Agreement with the full path (same accept/reject, same tiers and software) is tested in
``tests/iflux/test_iflux_burst_buffer.py``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import PurePosixPath

from schedlab.core.errors import BadInputError

#: feature columns and their values, in code order (must equal intents.FEATURES)
FEATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("level", ("job", "workflow", "application", "phase", "operation")),
    ("data", ("dataset", "file", "sample")),
    ("usage", ("input", "output", "temporary")),
    ("sharing", ("shared", "independent")),
    ("mode", ("read-only", "write-only", "read-write")),
    ("consistency", ("eventual", "strong")),
    ("pattern", ("small-random", "large-sequential", "metadata-heavy", "checkpoint")),
    ("size_class", ("tiny", "small", "medium", "large")),
)
DEFAULTS = {"level": "job", "data": "dataset", "sharing": "independent", "mode": "read-write",
            "consistency": "eventual", "pattern": "large-sequential"}
FIELDS = ("path", "name", "level", "data", "usage", "sharing", "mode", "consistency",
          "pattern", "size", "files", "source")
SIZE_BOUNDS = (64 << 20, 4 << 30, 256 << 30)
STAGE_IN, STAGE_OUT, WRITE_BACK, PREFETCH, COMPRESS, AGGREGATE = 1, 2, 4, 8, 16, 32
SOFT_NAMES = ((1, "stage-in"), (2, "stage-out"), (4, "write-back"), (8, "prefetch"),
              (16, "compress"), (32, "aggregate"))
_VALUES = {name: {v: i for i, v in enumerate(values)} for name, values in FEATURES}
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12,
          "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_INT_RE = re.compile(r"^\s*[+]?\d+\s*$")
#: ``#BB_LUA`` words that are Slurm's own (pool request), not intent fields
SLURM_WORDS = ("capacity", "pool")


def parse_size(value: str) -> int:
    match = _SIZE_RE.match(value)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a size (e.g. 4096, '64MiB', '2GB')")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def size_class(size: int) -> int:
    return sum(size >= b for b in SIZE_BOUNDS)


def _contradiction(it: dict) -> tuple[str, str] | None:
    if it["usage"] == "input" and it["mode"] == "write-only":
        return "mode", "an input cannot be write-only"
    if it["usage"] == "output" and it["mode"] == "read-only":
        return "mode", "an output cannot be read-only"
    if it["pattern"] == "checkpoint" and it["mode"] == "read-only":
        return "pattern", "a checkpoint is written, so it cannot be read-only"
    if it["usage"] == "temporary" and it["sharing"] == "shared" and it["level"] == "workflow":
        return "usage", "workflow-shared data outlives a job, so it cannot be temporary"
    return None


def validate(raw: dict[str, str], where: dict) -> dict:
    """One intent (string values, as read from a directive) -> a normalised dict; errors say
    which field, as :func:`intents.intent_from_dict` does."""
    for key in raw:
        if key not in FIELDS:
            raise BadInputError(f"unknown intent field; valid: {', '.join(FIELDS)}", field=key,
                                **where)
    if "path" not in raw:
        raise BadInputError("Field required", field="path", **where)
    if "usage" not in raw:
        raise BadInputError("Field required", field="usage", **where)
    it: dict = {}
    for name, values in FEATURES[:-1]:
        value = raw.get(name, DEFAULTS.get(name))
        if value not in _VALUES[name]:
            allowed = " or ".join(f"'{v}'" for v in values)
            raise BadInputError(f"Input should be {allowed} (got {value!r})", field=name,
                                **where)
        it[name] = value
    for name in ("path", "source"):
        value = raw.get(name, "")
        if value and not value.startswith("/"):
            raise BadInputError(f"Value error, must be an absolute path, got {value!r}",
                                field=name, **where)
        it[name] = str(PurePosixPath(value)) if value else value
    try:
        it["size"] = parse_size(raw.get("size", "0"))
    except ValueError as exc:
        raise BadInputError(f"Value error, {exc}", field="size", **where) from None
    files = raw.get("files", "1")
    if not _INT_RE.match(files) or int(files) < 1:
        raise BadInputError(f"files must be an integer >= 1, got {files!r}", field="files",
                            **where)
    it["files"] = int(files)
    it["name"] = raw.get("name", "")
    bad = _contradiction(it)
    if bad is not None:
        raise BadInputError(f"contradicting intent: {bad[1]}", field=bad[0], **where)
    return it


def check_job(intents: list[dict], where: dict) -> None:
    """Duplicate paths declared differently, or nested paths (as intents.check_job)."""
    seen: dict[str, dict] = {}
    for it in intents:
        if it["path"] in seen and seen[it["path"]] != it:
            raise BadInputError(f"contradicting intents for {it['path']}: declared twice "
                                "with different usage/mode/pattern", field="path", **where)
        seen[it["path"]] = it
    check_nested(seen, where)


def check_nested(paths, where: dict) -> None:
    """Refuse two intent paths where one lies inside the other (shared with intents.py)."""
    seen = dict.fromkeys(paths)
    for path in seen:
        parent = path
        while "/" in parent.rstrip("/"):
            parent = parent.rstrip("/").rsplit("/", 1)[0] or "/"
            if parent in seen:
                raise BadInputError(f"intent paths {parent} and {path} are nested; declare "
                                    "disjoint directories", field="path", **where)
            if parent == "/":
                break


def parse_directive(text: str, where: dict, skip: tuple[str, ...] = ()) -> dict | None:
    """``key=value ...`` -> a validated intent (None when only ``skip`` keys are present)."""
    raw = directive_fields(text, where, skip)
    if not raw and skip:
        return None
    return validate(raw, where)


def directive_fields(text: str, where: dict, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """``key=value ...`` (shell quoting allowed) -> the raw fields, ``skip`` keys left out
    (shared with jobspec.parse_directive)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise BadInputError(f"cannot split directive: {exc}", **where) from None
    raw: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if key in skip:
            continue
        if not sep or not key:
            raise BadInputError(f"expected key=value, got {word!r}", **where)
        if key in raw:
            raise BadInputError("given twice in one directive", field=key, **where)
        raw[key] = value
    return raw


def read_script(path: str) -> tuple[list[dict], dict[str, str]]:
    """Intents from a batch script's header (``#IFLUX k=v ...`` and ``#BB_LUA k=v ...``), and
    the Slurm pool request (``pool``/``capacity`` of ``#BB_LUA`` lines)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        raise BadInputError("no such file", path=path) from None
    except UnicodeDecodeError:
        raise BadInputError("is not valid UTF-8 text", path=path) from None
    except OSError as exc:  # a directory, no permission
        raise BadInputError(f"cannot read: {exc.strerror}", path=path) from None
    intents: list[dict] = []
    request: dict[str, str] = {}
    for lineno, line in enumerate(lines, start=1):
        stripped = line.strip()
        where = dict(path=path, line=lineno)
        if stripped.startswith("#IFLUX"):
            it = parse_directive(stripped[len("#IFLUX"):], where)
        elif stripped.startswith("#BB_LUA"):
            body = stripped[len("#BB_LUA"):]
            for word in body.split():
                key, _, value = word.partition("=")
                if key in SLURM_WORDS:
                    request[key] = value
            it = parse_directive(body, where, SLURM_WORDS) if body.strip() else None
        elif stripped.startswith("#SBATCH") and "--comment" in stripped:
            for part in _comment_intents(stripped, where):
                it = parse_directive(part, where)
                it["line"] = lineno
                intents.append(it)
            continue
        elif stripped and not stripped.startswith("#"):
            break  # directives end at the first command, like #SBATCH
        else:
            continue
        if it is not None:
            it["line"] = lineno
            intents.append(it)
    check_job([{k: v for k, v in it.items() if k != "line"} for it in intents],
              dict(path=path))
    return intents, request


def _comment_intents(line: str, where: dict) -> list[str]:
    """``#SBATCH --comment="iflux: k=v ...; k=v ..."`` -> the directive texts (as jobspec.py)."""
    try:
        words = shlex.split(line[len("#SBATCH"):])
    except ValueError as exc:
        raise BadInputError(f"cannot split #SBATCH line: {exc}", **where) from None
    comment = ""
    for i, word in enumerate(words):
        if word.startswith("--comment="):
            comment = word.split("=", 1)[1]
        elif word == "--comment" and i + 1 < len(words):
            comment = words[i + 1]
    comment = comment.strip()
    if not comment.lower().startswith("iflux:"):
        return []
    return [p for p in comment.split(":", 1)[1].split(";") if p.strip()]


def code(it: dict) -> int:
    """Mixed-radix index of an intent in the table (the order of rules.all_points)."""
    idx = 0
    for name, values in FEATURES:
        value = size_class(it["size"]) if name == "size_class" else _VALUES[name][it[name]]
        idx = idx * len(values) + value
    return idx


class Table:
    """The compiled rule table: point -> tier chain and software mask."""

    def __init__(self, chains: list[list[str]], chain_of: bytes, soft_of: bytes) -> None:
        self.chains, self.chain_of, self.soft_of = chains, chain_of, soft_of

    def lookup(self, it: dict) -> tuple[list[str], int]:
        i = code(it)
        chain = self.chains[self.chain_of[i]]
        return chain, (self.soft_of[i] if chain != ["pfs"] else 0)


def load_table(path: str | os.PathLike) -> Table:
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
        return Table(raw["chains"], bytes.fromhex(raw["chain_of"]), bytes.fromhex(raw["soft_of"]))
    except FileNotFoundError:
        raise BadInputError("no compiled rule table (run the installer)", path=path) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInputError(f"corrupt rule table: {exc}", path=path) from None


def allocate(intents: list[dict], table: Table, capacity: dict[str, int],
             fallback_pfs: bool = False) -> list[dict]:
    """Each intent -> {tier, soft, chain}: first tier of its chain with room, largest first.

    ``capacity`` maps tier -> free bytes; a tier absent from it has none (the PFS is
    unlimited). Raises BadInputError naming the intent when nothing in its chain can hold it,
    unless ``fallback_pfs``: then such an intent stays on the PFS, as it would without IFlux
    (the burst-buffer plugin, where the job was granted one pool only).
    """
    free = dict(capacity)
    free.setdefault("pfs", 1 << 62)
    placed: list[dict | None] = [None] * len(intents)
    for i in sorted(range(len(intents)), key=lambda k: -intents[k]["size"]):
        it = intents[i]
        chain, soft = table.lookup(it)
        tier = next((t for t in chain if free.get(t, 0) >= it["size"]), None)
        if tier is None and fallback_pfs:
            tier = "pfs"
        if tier is None:
            room = ", ".join(f"{t}: {free.get(t, 0) / 2**30:.2f} GiB" for t in chain)
            raise BadInputError(f"capacity cannot be met: {it['path']} needs "
                                f"{it['size'] / 2**30:.2f} GiB on one of ({room}) free",
                                field=f"intents[{i}].size", line=it.get("line"))
        free[tier] -= it["size"]
        placed[i] = dict(tier=tier, soft=soft if tier != "pfs" else 0, chain=chain)
    return placed  # type: ignore[return-value]


def soft_list(mask: int) -> list[str]:
    return [name for flag, name in SOFT_NAMES if mask & flag]


__all__ = ["Table", "allocate", "check_job", "check_nested", "directive_fields", "load_table",
           "parse_directive", "read_script", "validate"]
