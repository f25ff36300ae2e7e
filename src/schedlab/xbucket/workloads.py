"""Workflows to replay: seeded synthetic shapes and readers for real resource reports.

X-Bucket (../shared/papers/15-xbucket.md) is evaluated on synthetic workflows whose task peaks
follow Normal, Uniform, Bimodal, Trimodal and Exponential shapes, on phase-changing variants
(the distribution shifts halfway through, which is what the significance weighting is for), and
on real resource reports. The real reports use the ``task_id -- core -- memory --
virtual_memory -- disk -- time -- average_cores -- tag`` line format (memory and disk in MB, time
in seconds, tag = category); a CSV or Parquet table with the same columns works too, optionally
with ``declared_cores/declared_memory/declared_disk`` for the user-declared baseline.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.core.io import parse_lines, read_frame
from schedlab.xbucket.types import Resources, Task

SHAPES: tuple[str, ...] = ("normal", "uniform", "bimodal", "trimodal", "exponential")
#: every synthetic workflow: the five shapes and their phase-changing variants
WORKFLOWS: tuple[str, ...] = (*SHAPES, *(f"{s}-phase" for s in SHAPES))

FIELDS: tuple[str, ...] = ("task_id", "core", "memory", "virtual_memory", "disk", "time",
                           "average_cores", "tag")
_NUMERIC = ("core", "memory", "virtual_memory", "disk", "time", "average_cores")


def _shape(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws in MB-like units, mean around 8000, from the named shape."""
    if shape == "normal":
        return rng.normal(8000, 1000, n)
    if shape == "uniform":
        return rng.uniform(1000, 16000, n)
    if shape == "bimodal":
        pick = rng.random(n) < 0.5
        return np.where(pick, rng.normal(4000, 500, n), rng.normal(12000, 800, n))
    if shape == "trimodal":
        pick = rng.integers(0, 3, n)
        means = np.array([2000.0, 8000.0, 16000.0])[pick]
        sds = np.array([300.0, 600.0, 1000.0])[pick]
        return rng.normal(means, sds)
    if shape == "exponential":
        return 500 + rng.exponential(4000, n)
    raise UnknownNameError("workflow shape", shape, list(SHAPES))


def synthetic(workflow: str, tasks: int, seed: int, shift: float = 2.0) -> list[Task]:
    """A seeded synthetic workflow (``normal`` ... or ``normal-phase`` ...), one category.

    Memory (MB) is drawn from the shape; disk (MB) is half of it +-10% and cores are
    ceil(memory / 4000) capped at 16, so a big task is big in every type, as in real tasks; wall
    time grows with memory (30-300 s x size). A ``-phase`` workflow multiplies every value of its
    second half by ``shift``.
    """
    if workflow not in WORKFLOWS:
        raise UnknownNameError("workflow", workflow, list(WORKFLOWS))
    if tasks < 1:
        raise BadInputError("must be at least 1", field="tasks")
    shape, phase = workflow.removesuffix("-phase"), workflow.endswith("-phase")
    rng = np.random.default_rng(seed)
    memory = np.maximum(_shape(shape, tasks, rng), 50.0)
    disk = np.maximum(memory * 0.5 * rng.uniform(0.9, 1.1, tasks), 10.0)
    if phase:
        scale = np.where(np.arange(tasks) >= tasks // 2, shift, 1.0)
        memory, disk = memory * scale, disk * scale
    cores = np.minimum(np.ceil(memory / 4000.0), 16.0)
    time = rng.uniform(30, 300, tasks) * (0.5 + memory / 16000.0)
    memory, disk = np.round(memory), np.round(disk)
    return [
        Task(str(i), "default", Resources(float(cores[i]), float(memory[i]), float(disk[i])),
             float(time[i]))
        for i in range(tasks)
    ]


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"{text.strip()!r} is not a number", field=name) from None
    if not math.isfinite(value) or value < 0:
        raise BadInputError(f"{text.strip()!r} must be a finite number >= 0", field=name)
    return value


def _parse_report_line(line: str, lineno: int) -> Task | None:
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    parts = [p.strip() for p in text.split(" -- ")]
    if lineno == 1 and not _is_number(parts[0]):
        return None  # the header (its spelling differs between traces)
    if len(parts) != len(FIELDS):
        raise BadInputError(f"expected {len(FIELDS)} fields separated by ' -- ' "
                            f"({', '.join(FIELDS)}), found {len(parts)}", field="line")
    values = {name: _number(parts[i], name) for i, name in enumerate(FIELDS) if name in _NUMERIC}
    if not parts[0]:
        raise BadInputError("is empty", field="task_id")
    peak = Resources(values["core"], values["memory"], values["disk"])
    return Task(parts[0], parts[7] or "default", peak, values["time"])


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_reports(path: str | Path) -> list[Task]:
    """Read a workflow's resource reports: `` -- `` text, ``.csv`` or ``.parquet`` (by suffix)."""
    path = Path(path)
    if path.suffix.lower() in (".csv", ".parquet"):
        tasks = _read_table(path)
    else:
        tasks = list(parse_lines(path, _parse_report_line))
    if not tasks:
        raise BadInputError("holds no task records", path=path)
    return tasks


def _read_table(path: Path) -> list[Task]:
    required: dict[str, type] = {"task_id": str, "core": float, "memory": float, "disk": float,
                                 "time": float, "tag": str}
    frame = read_frame(path, required=required)
    declared_cols = ("declared_cores", "declared_memory", "declared_disk")
    has_declared = all(c in frame.columns for c in declared_cols)
    if has_declared:
        frame = read_frame(path, required={**required, **{c: float for c in declared_cols}})
    offset = 2 if path.suffix.lower() == ".csv" else 1
    tasks = []
    for i, row in enumerate(frame.iter_rows(named=True)):
        for column in ("core", "memory", "disk", "time", *(declared_cols if has_declared else ())):
            value = row[column]
            if value is None or not math.isfinite(value) or value < 0:
                raise BadInputError(f"value {value!r} must be a finite number >= 0",
                                    path=path, line=i + offset, field=column)
        if row["task_id"] is None or str(row["task_id"]).strip() == "":
            raise BadInputError("is empty", path=path, line=i + offset, field="task_id")
        declared = (Resources(row["declared_cores"], row["declared_memory"],
                              row["declared_disk"]) if has_declared else None)
        tasks.append(Task(str(row["task_id"]), str(row["tag"] or "default"),
                          Resources(row["core"], row["memory"], row["disk"]), row["time"],
                          declared))
    return tasks


def staggered(categories: int = 12, per_category: int = 15, seed: int = 0) -> list[Task]:
    """Categories that arrive one after another (each new one while the others still run), a
    live workflow's shape: category k's peaks are lognormal around 48 MB x 2^(k mod 7) (memory
    and disk alike, cores 1-4), so a pooled bucket of small categories is wrong for a big one."""
    rng = np.random.default_rng(seed)
    tasks: list[Task] = []
    for k in range(categories):
        scale = 48.0 * 2 ** (k % 7)
        for i in range(per_category):
            memory = float(scale * rng.lognormal(0.0, 0.25))
            cores = float(min(4, 1 + (k % 4)))
            disk = float(scale * rng.lognormal(0.0, 0.25))
            tasks.append(Task(f"{k}-{i}", f"c{k}", Resources(cores, memory, disk), 10.0))
    order = sorted(range(len(tasks)), key=lambda j: (j // per_category) * 5 + (j % per_category))
    return [tasks[j] for j in order]
