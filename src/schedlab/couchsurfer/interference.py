"""Co-location interference fitted to *measured* GPU job pairs (Lucid's profiles).

Source of the measurements: the artifact of Lucid (Hu et al., "Lucid: A Non-Intrusive,
Scalable and Interpretable Scheduler for Deep Learning Training Jobs", ASPLOS'23,
https://github.com/S-Lab-System-Group/Lucid, commit 63685a3): ``colocate_info.csv`` holds
1,388 pairs of training jobs measured sharing one GPU (each job's speed normalised to its solo
speed) and ``single_data.csv`` the solo profiles (GPU utilisation, memory-bandwidth
utilisation, memory) of the same workloads. Its licence (S-Lab 1.0) is non-commercial, so the
files are read by path (``../shared/data/colocation`` or ``--colocation DIR``), never copied.

The model predicts a job's plain co-location speed (no priorities, as Lucid measured) from the
two jobs' *solo* GPU utilisations ``u_self`` and ``u_other``::

    slowdown = c0 + c1 u_other + c2 u_self u_other + c3 max(0, u_self + u_other - 1)
    speed    = clip(1 - slowdown, 0.05, 1)

linear in ``c`` (least squares). :func:`validate` fits on a seeded 80 % of the pairs and
reports the error on the held-out 20 % (and against a constant-median predictor).
:data:`DEFAULT_COEF` is that fit's result (four numbers, not the data) so the simulator has
the measured model even where the folder is absent.

:class:`PairTruth` is what the simulator *accounts* with: the measured speeds of a pair when
both jobs carry a Lucid profile and that pair was measured; otherwise the prediction plus a
deterministic per-pair residual drawn with the held-out RMSE. The JFM guard
(:mod:`.fusion`) only ever sees the prediction, so a host can be slowed past the guard when
the truth is worse than predicted: the "<= 5 %" claim can fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.data import data_path
from schedlab.core.errors import BadInputError, ConfigError
from schedlab.core.io import csv_rows

PAIRS_FILE, SOLO_FILE = "colocate_info.csv", "single_data.csv"

#: fit on 80 % of Lucid's pairs (seed 0); see docs/systems/couchsurfer.md for the error
DEFAULT_COEF = (-0.025, 0.042, 0.247, 0.128)
#: held-out RMSE of that fit (speed units), the residual scale of unmeasured pairs
DEFAULT_RMSE = 0.099
MIN_SPEED = 0.05


def _features(u_self: np.ndarray, u_other: np.ndarray) -> np.ndarray:
    u_self, u_other = np.broadcast_arrays(np.asarray(u_self, float), np.asarray(u_other, float))
    return np.stack([np.ones_like(u_self), u_other, u_self * u_other,
                     np.maximum(0.0, u_self + u_other - 1.0)], axis=-1)


def predict_speed(u_self, u_other, coef=DEFAULT_COEF):
    """Predicted plain co-location speed of a job (utilisation ``u_self``) beside another."""
    slow = _features(u_self, u_other) @ np.asarray(coef, float)
    out = np.clip(1.0 - slow, MIN_SPEED, 1.0)
    return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class Profile:
    """One measured workload: (model, batch size, AMP) and its solo utilisations."""

    model: str
    batchsize: int
    amp: int
    gpu_util: float  # 0..1
    gmem_util: float  # 0..1
    gmem_gib: float
    label: int


@dataclass
class Measurements:
    """Lucid's solo profiles and measured pairs (speeds normalised to solo)."""

    profiles: list[Profile]
    #: (profile i, profile j, speed of i, speed of j) per measured pair
    pairs: list[tuple[int, int, float, float]]

    def table(self) -> dict[tuple[int, int], tuple[float, float]]:
        """Both orders of every pair -> (speed of the first, speed of the second)."""
        out: dict[tuple[int, int], tuple[float, float]] = {}
        for i, j, si, sj in self.pairs:
            out[(i, j)] = (si, sj)
            out[(j, i)] = (sj, si)
        return out

    def paired_profiles(self) -> list[int]:
        """Profiles that appear in at least one measured pair (what jobs may be assigned)."""
        return sorted({i for i, *_ in self.pairs} | {j for _, j, *_ in self.pairs})


def _num(row: dict, name: str, path: Path, line: int, low: float = 0.0,
         high: float = math.inf) -> float:
    text = row[name]
    try:
        value = float(text)
    except ValueError:
        raise BadInputError(f"{text!r} is not a number", path=path, line=line,
                            field=name) from None
    if not (math.isfinite(value) and low <= value <= high):
        raise BadInputError(f"must be in [{low}, {high}], got {text}", path=path, line=line,
                            field=name)
    return value


def load_measurements(folder: str | Path | None = None) -> Measurements:
    """Read ``single_data.csv`` and ``colocate_info.csv`` from ``folder`` (default: shared)."""
    folder = Path(folder) if folder is not None else data_path("colocation")
    if not folder.is_dir():
        raise BadInputError("no such folder (expected Lucid's colocate_info.csv and "
                            "single_data.csv)", path=folder)
    solo_path, pair_path = folder / SOLO_FILE, folder / PAIRS_FILE
    profiles: list[Profile] = []
    index: dict[tuple[str, int, int], int] = {}
    lines: list[int] = []
    for line, row in csv_rows(solo_path, ("model", "batchsize", "amp", "gpu_util", "gmem_util",
                                       "gmem", "label")):
        key = (row["model"], int(_num(row, "batchsize", solo_path, line, 1)),
               int(_num(row, "amp", solo_path, line, 0, 1)))
        if not key[0]:
            raise BadInputError("missing model name", path=solo_path, line=line, field="model")
        if key in index:  # pairs are matched on (model, batchsize, amp): one profile each
            raise BadInputError(f"second solo profile of {key} (line "
                                f"{lines[index[key]]} has it)", path=solo_path, line=line,
                                field="model")
        index[key] = len(profiles)
        lines.append(line)
        profiles.append(Profile(*key, _num(row, "gpu_util", solo_path, line, 0, 100) / 100,
                                _num(row, "gmem_util", solo_path, line, 0, 100) / 100,
                                _num(row, "gmem", solo_path, line) / 1024,
                                int(_num(row, "label", solo_path, line, 0, 9))))
    pairs = []
    cols = tuple(f"{c}{k}" for k in (1, 2) for c in ("model", "batchsize", "amp", "speed"))
    for line, row in csv_rows(pair_path, cols):
        ids = []
        for k in (1, 2):
            key = (row[f"model{k}"], int(_num(row, f"batchsize{k}", pair_path, line, 1)),
                   int(_num(row, f"amp{k}", pair_path, line, 0, 1)))
            if key not in index:
                raise BadInputError(f"workload {key} has no solo profile in {SOLO_FILE}",
                                    path=pair_path, line=line, field=f"model{k}")
            ids.append(index[key])
        pairs.append((ids[0], ids[1], _num(row, "speed1", pair_path, line, 0.01, 5),
                      _num(row, "speed2", pair_path, line, 0.01, 5)))
    if not pairs:
        raise BadInputError("no measured pairs", path=pair_path)
    return Measurements(profiles, pairs)


def shared_measurements() -> Measurements | None:
    """Lucid's measurements from ``<data dir>/colocation`` (schedlab.core.data), or None."""
    folder = data_path("colocation")
    if not (folder / PAIRS_FILE).is_file() or not (folder / SOLO_FILE).is_file():
        return None
    return load_measurements(folder)


def _samples(m: Measurements, pairs: list[tuple[int, int, float, float]]):
    u = np.array([p.gpu_util for p in m.profiles])
    i = np.array([p[0] for p in pairs])
    j = np.array([p[1] for p in pairs])
    si = np.array([p[2] for p in pairs])
    sj = np.array([p[3] for p in pairs])
    return np.r_[u[i], u[j]], np.r_[u[j], u[i]], np.r_[si, sj]


def fit(m: Measurements, pairs: list | None = None) -> tuple[float, ...]:
    """Least-squares coefficients of the slowdown model on ``pairs`` (default: all)."""
    us, uo, speed = _samples(m, m.pairs if pairs is None else pairs)
    coef, *_ = np.linalg.lstsq(_features(us, uo), 1.0 - speed, rcond=None)
    return tuple(float(c) for c in coef)


@dataclass(frozen=True)
class Validation:
    """Held-out error of the fitted model, next to two yardsticks."""

    coef: tuple[float, ...]
    train_pairs: int
    test_pairs: int
    mae: float
    rmse: float
    median_mae: float  # a constant (the training median) predictor
    old_model_mae: float  # the previous analytic plain-packing model (assumed parameters)
    measured_median_speed: float
    predicted_median_speed: float


def _old_equal_model(us: np.ndarray, uo: np.ndarray) -> np.ndarray:
    """The analytic plain-packing model this package used before (assumed parameters)."""
    return np.minimum(1.0 / (1.0 + 0.8 * uo), 1.0 / np.maximum(1.0, us + uo))


def validate(m: Measurements, seed: int = 0, test_share: float = 0.2) -> Validation:
    """Fit on a seeded (1 - test_share) of the pairs, measure error on the rest."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(m.pairs))
    cut = max(1, int(round(test_share * len(order))))
    test = [m.pairs[k] for k in order[:cut]]
    train = [m.pairs[k] for k in order[cut:]]
    coef = fit(m, train)
    us, uo, speed = _samples(m, test)
    pred = predict_speed(us, uo, coef)
    _, _, train_speed = _samples(m, train)
    _, _, all_speed = _samples(m, m.pairs)
    all_us, all_uo, _ = _samples(m, m.pairs)
    return Validation(coef, len(train), len(test), float(np.abs(pred - speed).mean()),
                      float(np.sqrt(((pred - speed) ** 2).mean())),
                      float(np.abs(np.median(train_speed) - speed).mean()),
                      float(np.abs(_old_equal_model(us, uo) - speed).mean()),
                      float(np.median(all_speed)),
                      float(np.median(predict_speed(all_us, all_uo, coef))))


def _residual(a: int, b: int, scale: float) -> float:
    """A deterministic N(0, scale) draw for the unordered pair (a, b) and its order."""
    lo, hi = (a, b) if a <= b else (b, a)
    rng = np.random.default_rng([lo & 0x7FFFFFFF, hi & 0x7FFFFFFF, int(a > b)])
    return float(rng.normal(0.0, scale))


class PairTruth:
    """Plain co-location speeds the simulator *accounts* with (measured where available)."""

    def __init__(self, measurements: Measurements | None = None,
                 coef: tuple[float, ...] = DEFAULT_COEF, residual: float = DEFAULT_RMSE,
                 scale: float = 1.0, speed_scale: float = 1.0):
        """``scale`` multiplies every pair's slowdown (1 - speed; 1.2 = interference 20 %
        stronger), ``speed_scale`` every co-located speed (0.8 = pairs 20 % slower): the
        sensitivity knobs. The controller's prediction is not scaled (it does not know)."""
        if not (math.isfinite(scale) and scale >= 0):
            raise ConfigError(f"must be >= 0, got {scale}", field="scale")
        if not (math.isfinite(speed_scale) and speed_scale > 0):
            raise ConfigError(f"must be > 0, got {speed_scale}", field="speed_scale")
        self.table = measurements.table() if measurements is not None else {}
        self.coef, self.residual = coef, residual
        self.scale, self.speed_scale = scale, speed_scale
        self._cache: dict[tuple[int, int], tuple[float, float]] = {}

    def _scaled(self, speed: float) -> float:
        if self.scale == 1.0 and self.speed_scale == 1.0:
            return speed
        speed = (1.0 - self.scale * (1.0 - speed)) * self.speed_scale
        return float(min(1.0, max(MIN_SPEED, speed)))

    def speeds(self, a_id: int, a_util: float, a_prof: int, b_id: int, b_util: float,
               b_prof: int) -> tuple[float, float]:
        """(speed of a, speed of b) when jobs a and b share a GPU without priorities."""
        key = (a_id, b_id)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        measured = self.table.get((a_prof, b_prof)) if a_prof >= 0 and b_prof >= 0 else None
        if measured is not None:
            out = (min(1.0, measured[0]), min(1.0, measured[1]))
        else:
            sa = predict_speed(a_util, b_util, self.coef) + _residual(a_id, b_id, self.residual)
            sb = predict_speed(b_util, a_util, self.coef) + _residual(b_id, a_id, self.residual)
            out = (float(np.clip(sa, MIN_SPEED, 1.0)), float(np.clip(sb, MIN_SPEED, 1.0)))
        out = (self._scaled(out[0]), self._scaled(out[1]))
        self._cache[key] = out
        return out


def validate_by_workload(m: Measurements) -> dict[str, float]:
    """Leave-one-workload-out: for each model, fit without any pair that involves it and
    measure the error on those pairs (can the model predict a workload it has never seen?).
    Returns the per-workload MAE and, under ``"all"``, the pair-weighted mean."""
    names = sorted({m.profiles[i].model for i in m.paired_profiles()})
    out: dict[str, float] = {}
    total, count = 0.0, 0
    for name in names:
        test = [p for p in m.pairs if name in (m.profiles[p[0]].model, m.profiles[p[1]].model)]
        train = [p for p in m.pairs if p not in test]
        coef = fit(m, train)
        us, uo, speed = _samples(m, test)
        err = np.abs(predict_speed(us, uo, coef) - speed)
        out[name] = float(err.mean())
        total += float(err.sum())
        count += err.size
    out["all"] = total / count
    return out
