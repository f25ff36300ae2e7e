"""The I/O intent taxonomy: *why*, *what* and *how* a job does I/O, as typed, validated data.

Paper: "IFlux: intent-driven allocation of I/O accelerators in HPC schedulers" (abstract in
../shared/papers/10-iflux.md). An intent is a declaration, not a command: the user says the data
at ``path`` is, e.g., a read-only shared input read in small random pieces, and IFlux decides the
accelerator. Intents are Pydantic models with ``extra="forbid"`` so a misspelt field is an error
before anything is allocated, and every intent is also encoded as a row of small integers so the
mapping engine can map millions of them per second with one table lookup.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schedlab.core.errors import BadInputError
from schedlab.iflux.fastpath import check_nested


class Level(StrEnum):
    """Where the intent applies (the paper's intent levels)."""

    JOB = "job"
    WORKFLOW = "workflow"
    APPLICATION = "application"
    PHASE = "phase"
    OPERATION = "operation"


class DataKind(StrEnum):
    DATASET = "dataset"
    FILE = "file"
    SAMPLE = "sample"


class Usage(StrEnum):
    """Why the data is touched: consumed, produced, or scratch that never outlives the job."""

    INPUT = "input"
    OUTPUT = "output"
    TEMPORARY = "temporary"


class Sharing(StrEnum):
    SHARED = "shared"
    INDEPENDENT = "independent"


class Mode(StrEnum):
    READ_ONLY = "read-only"
    WRITE_ONLY = "write-only"
    READ_WRITE = "read-write"


class Consistency(StrEnum):
    EVENTUAL = "eventual"
    STRONG = "strong"


class Pattern(StrEnum):
    SMALL_RANDOM = "small-random"
    LARGE_SEQUENTIAL = "large-sequential"
    METADATA_HEAVY = "metadata-heavy"
    CHECKPOINT = "checkpoint"


class SizeClass(StrEnum):
    """Size buckets used by rules; the bounds are in :data:`SIZE_BOUNDS`."""

    TINY = "tiny"      # < 64 MiB: fits any RAM disk
    SMALL = "small"    # < 4 GiB
    MEDIUM = "medium"  # < 256 GiB: a node-local NVMe
    LARGE = "large"    # beyond: only shared burst buffers or the PFS


SIZE_BOUNDS = np.array([64 << 20, 4 << 30, 256 << 30], dtype=np.int64)

#: the encoded features, in column order; each is an enum whose member index is its code
FEATURES: tuple[tuple[str, type[StrEnum]], ...] = (
    ("level", Level), ("data", DataKind), ("usage", Usage), ("sharing", Sharing),
    ("mode", Mode), ("consistency", Consistency), ("pattern", Pattern), ("size_class", SizeClass),
)
CARDINALITY = tuple(len(enum) for _, enum in FEATURES)
_CODE = {name: {member: i for i, member in enumerate(enum)} for name, enum in FEATURES}

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10**9, "gib": 1 << 30, "t": 1 << 40, "tb": 10**12,
          "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any) -> int:
    """Bytes from ``4096``, ``"64MiB"``, ``"1.5GB"``; ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes or a string like '64MiB'")
    if isinstance(value, int | float):
        if value < 0 or value != value:
            raise ValueError("size must be >= 0")
        return int(value)
    match = _SIZE_RE.match(str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a size (e.g. 4096, '64MiB', '2GB')")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def size_class(size: int | np.ndarray) -> Any:
    """The SizeClass code(s) of a byte count (vectorised)."""
    return np.searchsorted(SIZE_BOUNDS, size, side="right")


class Intent(BaseModel):
    """One I/O intent. ``path`` is the directory the job reads or writes, as the job sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    path: str
    name: str = ""
    level: Level = Level.JOB
    data: DataKind = DataKind.DATASET
    usage: Usage
    sharing: Sharing = Sharing.INDEPENDENT
    mode: Mode = Mode.READ_WRITE
    consistency: Consistency = Consistency.EVENTUAL
    pattern: Pattern = Pattern.LARGE_SEQUENTIAL
    size: int = Field(default=0, ge=0, description="bytes the data will occupy")
    files: int = Field(default=1, ge=1, description="how many files the data has")
    source: str = Field(default="", description="where input data lives; default: path")

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> int:
        return parse_size(value)

    @field_validator("path", "source")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if value and not PurePosixPath(value).is_absolute():
            raise ValueError(f"must be an absolute path, got {value!r}")
        return str(PurePosixPath(value)) if value else value

    def contradiction(self) -> tuple[str, str] | None:
        """(field, why) when this intent contradicts itself; None when it is consistent."""
        if self.usage is Usage.INPUT and self.mode is Mode.WRITE_ONLY:
            return "mode", "an input cannot be write-only"
        if self.usage is Usage.OUTPUT and self.mode is Mode.READ_ONLY:
            return "mode", "an output cannot be read-only"
        if self.pattern is Pattern.CHECKPOINT and self.mode is Mode.READ_ONLY:
            return "pattern", "a checkpoint is written, so it cannot be read-only"
        if self.usage is Usage.TEMPORARY and self.sharing is Sharing.SHARED \
                and self.level in (Level.WORKFLOW,):
            return "usage", "workflow-shared data outlives a job, so it cannot be temporary"
        return None

    def code(self) -> tuple[int, ...]:
        """The feature codes in :data:`FEATURES` order."""
        codes = [_CODE[name][getattr(self, name)] for name, _ in FEATURES[:-1]]
        return (*codes, int(np.searchsorted(SIZE_BOUNDS, self.size, side="right")))


def intent_from_dict(raw: Any, where: dict[str, Any]) -> Intent:
    """Validate one intent; errors name the field and ``where`` (path/line) it came from."""
    if not isinstance(raw, dict):
        raise BadInputError(f"an intent is a mapping, got {type(raw).__name__}", **where)
    try:
        intent = Intent.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = f"unknown intent field; valid: {', '.join(Intent.model_fields)}"
        elif first["type"] == "enum":
            message = f"{first['msg']} (got {first.get('input')!r})"
        raise BadInputError(message, field=field, **where) from None
    bad = intent.contradiction()
    if bad is not None:
        raise BadInputError(f"contradicting intent: {bad[1]}", field=bad[0], **where)
    return intent


def check_job(intents: list[Intent], where: dict[str, Any] | None = None) -> None:
    """Reject contradictions *between* intents: the same path declared twice differently, or
    one declared path nested in another (bind mounts would shadow each other).

    O(n * depth) with a dict of paths, so a workflow with 100k intents is checked instantly.
    """
    where = where or {}
    seen: dict[str, Intent] = {}
    for intent in intents:  # paths are already normalised by the model's validator
        if intent.path in seen and seen[intent.path] != intent:
            raise BadInputError(f"contradicting intents for {intent.path}: declared twice "
                                "with different usage/mode/pattern", field="path", **where)
        seen[intent.path] = intent
    check_nested(seen, where)


def encode(intents: list[Intent]) -> np.ndarray:
    """An (n, len(FEATURES)) uint8 matrix of feature codes."""
    if not intents:
        return np.zeros((0, len(FEATURES)), dtype=np.uint8)
    return np.array([i.code() for i in intents], dtype=np.uint8)


def random_codes(n: int, seed: int) -> np.ndarray:
    """``n`` random encoded intents, uniform over every feature (for throughput benchmarks)."""
    if seed < 0:
        raise BadInputError(f"seed must be >= 0, got {seed}", field="seed")
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, card, n, dtype=np.uint8) for card in CARDINALITY]
    return np.stack(cols, axis=1)
