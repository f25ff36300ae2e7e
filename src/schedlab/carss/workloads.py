"""Seeded arrival generators with regime changes, a timestamp-CSV reader, and task generators.

CARSS (paper 07) argues that co-simulators which replay a *static* arrival series miss the
regime changes of real traffic. The generators here produce exactly such traffic: piecewise
rate shifts, short bursts and a diurnal cycle (Poisson counts per scheduling interval), and
return the true change points so detectors can be scored. Real traces come from any CSV with a
timestamp column (e.g. Alibaba's GenAI request trace), binned into counts per interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import polars as pl

from schedlab.carss.simulator import Tasks, new_tasks
from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.core.io import read_frame

ARRIVAL_KINDS = ("regime", "bursty", "diurnal", "mixed")


@dataclass(frozen=True)
class ArrivalSeries:
    """Arrivals per interval, the rate they were drawn from, and the true change points."""

    counts: np.ndarray
    rate: np.ndarray
    change_points: tuple[int, ...] = ()


def _regimes(n: int, rng: np.random.Generator, min_len: int, max_len: int) -> tuple:
    levels = np.array([0.45, 0.7, 1.0, 1.35, 1.7])
    mult, cps, t, level = np.ones(n), [], 0, 2
    while t < n:
        length = int(rng.integers(min_len, max_len + 1))
        mult[t : t + length] = levels[level]
        t += length
        if t < n:
            cps.append(t)
            level = int(rng.choice([i for i in range(len(levels)) if abs(i - level) >= 1]))
    return mult, cps


def arrival_series(
    kind: str,
    n: int,
    base: float,
    seed: int,
    season: int = 48,
    min_regime: int = 30,
    max_regime: int = 80,
) -> ArrivalSeries:
    """``n`` intervals of Poisson arrivals with mean ``base`` per interval shaped by ``kind``.

    regime: piecewise-constant rate shifts; bursty: short x2.5 bursts; diurnal: a sinusoidal
    day of ``season`` intervals; mixed: all three (the default for experiments).
    """
    if kind not in ARRIVAL_KINDS:
        raise UnknownNameError("arrival kind", kind, ARRIVAL_KINDS)
    if n < 1 or base <= 0:
        raise BadInputError("need n >= 1 and base > 0", field="arrivals")
    rng = np.random.default_rng(seed)
    rate, cps = np.full(n, float(base)), []
    if kind in ("regime", "mixed"):
        mult, cps = _regimes(n, rng, min_regime, max_regime)
        rate *= mult
    if kind in ("diurnal", "mixed"):
        rate *= 1.0 + 0.4 * np.sin(2 * np.pi * np.arange(n) / season)
    if kind in ("bursty", "mixed"):
        for start in rng.choice(n, size=max(1, n // 60), replace=False):
            rate[start : start + int(rng.integers(2, 5))] *= 2.5
    return ArrivalSeries(rng.poisson(rate).astype(np.int64), rate, tuple(int(c) for c in cps))


@dataclass(frozen=True)
class ArrivalTrace:
    """Counts per interval read from a real trace, and where interval 0 starts."""

    counts: np.ndarray
    start: float
    interval_s: float
    path: str


def _parse_times(frame: pl.DataFrame, column: str, path: Path) -> np.ndarray:
    raw = frame[column]
    missing = raw.is_null() | (raw.str.strip_chars() == "")
    if missing.any():
        line = int(missing.arg_max()) + 2
        raise BadInputError("missing timestamp", path=path, line=line, field=column)
    numeric = raw.cast(pl.Float64, strict=False)
    if numeric.is_null().any():
        if numeric.is_not_null().any():  # mostly numbers: name the first that is not one
            index = int(numeric.is_null().arg_max())
            raise BadInputError(
                f"{raw[index]!r} is not a number (other rows are)",
                path=path,
                line=index + 2,
                field=column,
            )
        return _parse_datetimes(raw, column, path)
    times = numeric.to_numpy()
    if not np.isfinite(times).all():
        line = int(np.argmax(~np.isfinite(times))) + 2
        raise BadInputError("timestamp is not finite", path=path, line=line, field=column)
    return times


def _parse_datetimes(raw: pl.Series, column: str, path: Path) -> np.ndarray:
    """Date-times to epoch seconds (naive ones read as UTC); polars first, Python's ISO parser
    when polars cannot infer one format, so the first bad value is reported by line."""
    try:
        parsed = raw.str.strip_chars().str.to_datetime(strict=False, time_unit="us")
        if parsed.null_count() == 0:
            return (parsed.dt.epoch("us").cast(pl.Float64) / 1e6).to_numpy()
    except pl.exceptions.PolarsError:
        pass
    out = np.empty(raw.len())
    for i, value in enumerate(raw.to_list()):
        try:
            stamp = datetime.fromisoformat(value.strip())
        except ValueError:
            raise BadInputError(
                f"{value!r} is neither a number nor a date-time",
                path=path,
                line=i + 2,
                field=column,
            ) from None
        out[i] = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    return out


#: bounds that keep a mistyped option from allocating the machine away
MAX_INTERVALS = 1_000_000
MAX_TASKS = 5_000_000


def scale_counts(counts: np.ndarray, scale: float) -> np.ndarray:
    """Arrivals per interval multiplied by ``scale`` (finite, >= 0, at most MAX_TASKS tasks)."""
    if not (np.isfinite(scale) and scale >= 0):
        raise BadInputError(f"must be a finite number >= 0, got {scale}", field="scale")
    total = float(np.sum(counts)) * scale
    if total > MAX_TASKS:
        raise BadInputError(
            f"x{scale:g} makes {total:,.0f} tasks (at most {MAX_TASKS:,}); "
            "use a smaller --scale or fewer intervals",
            field="scale",
        )
    return np.rint(np.asarray(counts) * scale).astype(np.int64)


def read_arrivals(path: str | Path, column: str, interval_s: float = 3600.0) -> ArrivalTrace:
    """Bin the timestamps in ``column`` of a CSV/Parquet file into arrivals per interval.

    Timestamps are seconds (numbers) or date-times; they must be present and sorted, because
    an unsorted trace usually means a wrong column or a merged file the user should fix.
    """
    path = Path(path)
    if not (np.isfinite(interval_s) and interval_s > 0):
        raise BadInputError(
            f"must be a positive number of seconds, got {interval_s}", field="interval"
        )
    frame = read_frame(path, required={column: str})
    if frame.height == 0:
        raise BadInputError("has no rows", path=path, field=column)
    if frame[column].dtype != pl.String:
        frame = frame.with_columns(pl.col(column).cast(pl.String))
    times = _parse_times(frame, column, path)
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        line = int(back[0]) + 3  # header is line 1, so row i+1 sits on line i+3
        raise BadInputError(
            "timestamps are not sorted (earlier than the previous row)",
            path=path,
            line=line,
            field=column,
        )
    count = int((times[-1] - times[0]) // interval_s) + 1
    if count > MAX_INTERVALS:
        raise BadInputError(
            f"{interval_s:g} s intervals would cut the trace's "
            f"{times[-1] - times[0]:.0f} s into {count:,} bins (at most "
            f"{MAX_INTERVALS:,}); use a longer --interval",
            path=path,
            field="interval",
        )
    bins = ((times - times[0]) // interval_s).astype(np.int64)
    return ArrivalTrace(np.bincount(bins), float(times[0]), float(interval_s), str(path))


@dataclass(frozen=True)
class TaskModel:
    """Distributions of a task's size (medians and log-normal spreads), documented defaults."""

    cpu_median: float = 1500.0  # MIPS
    duration_median: float = 450.0  # seconds at full speed
    ram_median: float = 1024.0  # MB
    spread: float = 0.5
    slack: tuple[float, float] = (1.3, 3.0)  # SLA = slack x ideal duration


def make_tasks(
    count: int,
    arrival: float,
    first_tid: int,
    rng: np.random.Generator,
    model: TaskModel = TaskModel(),
) -> Tasks:
    """``count`` fresh tasks arriving at ``arrival`` with sizes drawn from ``model``."""
    n = int(count)
    cpu = np.clip(model.cpu_median * rng.lognormal(0, model.spread, n), 200, 6000)
    dur = np.clip(model.duration_median * rng.lognormal(0, model.spread, n), 60, 3000)
    return new_tasks(
        tid=np.arange(first_tid, first_tid + n),
        arrival=np.full(n, float(arrival)),
        work=cpu * dur,
        cpu=cpu,
        amp=rng.uniform(0, 0.4, n),
        period=rng.uniform(600, 3600, n),
        phase=rng.uniform(0, 2 * np.pi, n),
        ram=np.clip(model.ram_median * rng.lognormal(0, model.spread, n), 128, 6144),
        disk=rng.uniform(200, 2000, n),
        deadline=dur * rng.uniform(*model.slack, n),
    )


@dataclass(frozen=True)
class Workload:
    """Ground-truth arrivals and the tasks of each interval, fixed by a seed."""

    counts: np.ndarray
    batches: tuple[Tasks, ...]
    interval_s: float
    change_points: tuple[int, ...] = ()
    #: demand-trace table the tasks' ``trace`` rows point into (Bitbrains), or None
    traces: tuple[np.ndarray, np.ndarray] | None = None


def make_workload(
    counts: np.ndarray,
    interval_s: float,
    seed: int,
    model: TaskModel = TaskModel(),
    change_points: tuple[int, ...] = (),
) -> Workload:
    """Draw the tasks for an arrival series; the same seed gives the same tasks."""
    rng = np.random.default_rng(seed)
    batches, tid = [], 0
    for t, c in enumerate(np.asarray(counts, dtype=np.int64)):
        batches.append(make_tasks(int(c), t * interval_s, tid, rng, model))
        tid += int(c)
    return Workload(
        np.asarray(counts, dtype=np.int64), tuple(batches), float(interval_s), change_points
    )
