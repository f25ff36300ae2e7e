"""A forecaster that is never much worse than the best of its candidates: change detection,
online model choice among statsforecast's models (and optionally the transformer), calibrated
quantiles, and a fall-back to the long-run choice while no change is detected.

Why: CARSS (paper 07) claims an adaptive forecaster beats "traditional models"; measured on
held-out Bitbrains VMs and the GenAI trace our transformer alone does not (issue 54: 1.1–3.2×
the best model's MAE). No single model wins everywhere, so this forecaster *chooses*:

- every candidate (statsforecast's MSTL / AutoETS / AutoTheta / AutoARIMA, seasonal naive, the
  equal-weight mean of them and, in ``select-nn``, the adaptive transformer) is run walk-forward
  and issues an ``horizon``-step forecast at every interval; each step is scored when its truth
  arrives by the continuous ranked probability score (CRPS) of the candidate's Gaussian after
  calibration (below);
- a streaming BOCPD detector (the same one the adaptive transformer uses) watches log1p of the
  series. While **no change** is detected the choice is made on everything scored so far
  (``long`` intervals at most; unbounded by default): the fall-back is the candidate that has
  been best for longest. After a **detected change** the window restarts at the change, and
  once ``min_points`` post-change intervals (one season) are scored the candidate that is best
  since the change is used;
- a candidate replaces the current choice only if it is better by ``margin`` (5 %), so noise
  does not make the choice flap (a first version with 2 %, half a season after a change and
  a 4-season window switched six times on VM 9 and lost to every member: flapping costs);
- quantiles are **calibrated**: per horizon step, the chosen candidate's standard deviation is
  multiplied by the factor (from a grid, 0.1–5) that minimises its CRPS on the same window —
  over-wide and over-narrow intervals are both corrected, the median is the candidate's;
- before the first forecast, a backtest over the end of the training window (``backtest``
  intervals, two seasons by default) gives every candidate a score, so the first choice is
  already an informed one.

All candidates see the same history; choosing costs O(candidates × window) per interval.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import norm

from schedlab.carss.changepoint import BOCPD
from schedlab.carss.forecasts import Forecast, Forecaster
from schedlab.core.errors import BadInputError

_Z80 = 1.2815515655446004
_SCALES = np.exp(np.linspace(np.log(0.1), np.log(5.0), 33))
_SQRT_PI = np.sqrt(np.pi)
COMBO = "mean-of-members"


def gaussian_crps(z: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """CRPS of N(mu, sigma^2) at y, given z = (y - mu) / sigma (Gneiting & Raftery 2007)."""
    return sigma * (z * (2 * norm.cdf(z) - 1) + 2 * norm.pdf(z) - 1 / _SQRT_PI)


def _as_gaussian(fc: Forecast) -> tuple[np.ndarray, np.ndarray]:
    """Median and an equivalent standard deviation in counts (log-space forecasts included)."""
    mid = fc.point()
    if not fc.log:
        return mid, np.maximum(np.asarray(fc.std, dtype=float), 1e-9)
    spread = (fc.quantile(0.9) - fc.quantile(0.1)) / (2 * _Z80)
    return mid, np.maximum(spread, 1e-9)


def _default_members() -> tuple[str, ...]:
    from schedlab.carss import statsforecast as sf

    if sf.available():
        return (*sf.NAMES, "seasonal-naive")
    return ("ets", "arima", "seasonal-naive", "moving-average")


class SelectingForecaster:
    """Change-aware choice among candidate forecasters with calibrated Gaussian quantiles."""

    name = "select"

    def __init__(
        self,
        season: int = 48,
        seed: int = 0,
        members: Sequence[str] | None = None,
        horizon: int = 8,
        long: int | None = None,
        min_points: int | None = None,
        backtest: int | None = None,
        margin: float = 0.05,
        combine: bool = True,
        detect: bool = True,
        make: Callable[..., Forecaster] | None = None,
    ) -> None:
        if make is None:
            raise BadInputError(
                "needs the forecaster registry's builder; use make_forecaster('select')",
                field="make",
            )
        make_forecaster = make
        if horizon < 1:
            raise BadInputError(f"must be at least 1, got {horizon}", field="horizon")
        self.season, self.seed, self.horizon = int(season), seed, int(horizon)
        self.member_names = tuple(members) if members else _default_members()
        if not self.member_names:
            raise BadInputError("needs at least one candidate forecaster", field="members")
        self.members: dict[str, Forecaster] = {
            n: make_forecaster(n, season=season, seed=seed) for n in self.member_names
        }
        self.combine = combine and len(self.members) > 1
        self.candidates = (*self.member_names, COMBO) if self.combine else self.member_names
        self.long = int(long or 1_000_000)
        self.min_points = int(min_points or max(self.horizon, season, 12))
        self.backtest = backtest
        self.margin, self.detect = margin, detect
        self.history: list[float] = []
        self.changes: list[int] = []
        self.choices: list[tuple[int, str]] = []  # (interval, candidate) whenever it changes
        self.chosen = self.candidates[0]
        self.scale = np.ones(self.horizon)
        self.detector = BOCPD(min_gap=12)
        self._pending: dict[str, deque] = {c: deque() for c in self.candidates}
        # per candidate: interval scored, horizon step, z, sigma
        self._scores: dict[str, list[tuple[int, int, float, float]]] = {
            c: [] for c in self.candidates
        }
        self._current: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    # -- protocol -----------------------------------------------------------------------------
    def fit(self, history: np.ndarray) -> None:
        y = np.asarray(history, dtype=float)
        if y.size == 0 or not np.all(np.isfinite(y)):
            raise BadInputError("a forecaster needs finite observations", field="history")
        back = self.backtest if self.backtest is not None else 2 * self.season
        back = int(min(back, max(y.size - max(2 * self.season, 8), 0)))
        head = y[: y.size - back]
        try:
            for model in self.members.values():
                model.fit(head)
        except BadInputError:  # a member needs more history than the head: no backtest
            back, head = 0, y
            for model in self.members.values():
                model.fit(head)
        self.history = head.tolist()
        self.detector = BOCPD(min_gap=12)
        for v in head:
            self.detector.update(np.log1p(max(float(v), 0.0)))
        self._issue()
        for v in y[y.size - back :]:
            self.update(float(v))
        self._choose(margin=0.0)  # the first choice: the backtest's best, no hysteresis

    def update(self, value: float) -> None:
        v = float(value)
        t = len(self.history)  # index of this observation
        self._score(t, v)
        self.history.append(v)
        for model in self.members.values():
            model.update(v)
        cp = self.detector.update(np.log1p(max(v, 0.0)))
        if self.detect and cp is not None and (not self.changes or cp > self.changes[-1]):
            self.changes.append(int(cp))
        self._issue()
        self._choose()

    def predict(self, horizon: int) -> Forecast:
        if not self._current:
            raise BadInputError("call fit() before predict()", field="history")
        if horizon > self.horizon:
            mean, std = self._forecast_of(self.chosen, horizon)
        else:
            mean, std = self._current[self.chosen]
        scale = np.concatenate(
            [self.scale, np.full(max(horizon - self.scale.size, 0), self.scale[-1])]
        )[:horizon]
        return Forecast(mean[:horizon].copy(), std[:horizon] * scale)

    # -- internals ----------------------------------------------------------------------------
    def _forecast_of(self, name: str, horizon: int) -> tuple[np.ndarray, np.ndarray]:
        if name != COMBO:
            return _as_gaussian(self.members[name].predict(horizon))
        parts = [_as_gaussian(m.predict(horizon)) for m in self.members.values()]
        means = np.array([p[0] for p in parts])
        var = np.array([p[1] ** 2 for p in parts]).mean(axis=0) + means.var(axis=0)
        return means.mean(axis=0), np.sqrt(var)

    def _issue(self) -> None:
        """Every candidate's ``horizon``-step forecast from the current history."""
        t = len(self.history)
        parts = {n: _as_gaussian(m.predict(self.horizon)) for n, m in self.members.items()}
        if self.combine:
            means = np.array([p[0] for p in parts.values()])
            var = np.array([p[1] ** 2 for p in parts.values()]).mean(axis=0) + means.var(axis=0)
            parts[COMBO] = (means.mean(axis=0), np.sqrt(var))
        self._current = parts
        for name, (mean, std) in parts.items():
            pending = self._pending[name]
            pending.append((t, mean, std))
            while pending and pending[0][0] + self.horizon <= t:
                pending.popleft()

    def _score(self, t: int, value: float) -> None:
        for name, pending in self._pending.items():
            rows = self._scores[name]
            for start, mean, std in pending:
                step = t - start
                if 0 <= step < self.horizon:
                    rows.append((t, step, (value - mean[step]) / std[step], float(std[step])))
            if len(rows) > 3 * self.long * self.horizon:
                del rows[: len(rows) - 2 * self.long * self.horizon]

    def _window_start(self) -> int:
        """Since the last detected change once it has ``min_points`` scored intervals; else
        (no change, or too few points after it) the long window: the fall-back choice."""
        now = len(self.history)
        if self.changes and now - self.changes[-1] >= self.min_points:
            return max(now - self.long, self.changes[-1])
        return now - self.long

    def _window(self, name: str, start: int) -> np.ndarray:
        rows = self._scores[name]
        lo = len(rows)
        while lo > 0 and rows[lo - 1][0] >= start:
            lo -= 1
        return np.array(rows[lo:], dtype=float).reshape(-1, 4)

    def _calibrated(self, rows: np.ndarray) -> float:
        if rows.shape[0] == 0:
            return float("inf")
        z, sigma = rows[:, 2], rows[:, 3]
        crps = gaussian_crps(z[None, :] / _SCALES[:, None], sigma[None, :] * _SCALES[:, None])
        return float(crps.mean(axis=1).min())

    def _choose(self, margin: float | None = None) -> None:
        margin = self.margin if margin is None else margin
        start = self._window_start()
        windows = {c: self._window(c, start) for c in self.candidates}
        if min(w.shape[0] for w in windows.values()) < self.min_points:
            return
        score = {c: self._calibrated(w) for c, w in windows.items()}
        best = min(score, key=score.__getitem__)
        if best != self.chosen and score[best] < (1 - margin) * score[self.chosen]:
            self.chosen = best
            self.choices.append((len(self.history), best))
        rows = windows[self.chosen]
        scale = np.ones(self.horizon)
        for h in range(self.horizon):
            part = rows[rows[:, 1] == h]
            if part.shape[0] >= 4:
                z, sigma = part[:, 2], part[:, 3]
                crps = gaussian_crps(z[None] / _SCALES[:, None], sigma[None] * _SCALES[:, None])
                scale[h] = _SCALES[int(np.argmin(crps.mean(axis=1)))]
        self.scale = scale


def factory(make: Callable[..., Forecaster], extra: Sequence[str] = (), name: str = "select"):
    """A constructor taking the protocol's keyword arguments; ``make`` builds candidates by
    name (the registry's ``make_forecaster``, passed in so this module does not import it);
    ``extra`` candidates are added to the default ones (``select-nn`` adds the transformer)."""

    def build(**kwargs: object) -> SelectingForecaster:
        kwargs.setdefault("make", make)
        if extra:
            kwargs.setdefault("members", (*_default_members(), *extra))
        model = SelectingForecaster(**kwargs)  # type: ignore[arg-type]
        model.name = name
        return model

    return build
