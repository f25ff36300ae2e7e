"""Standard forecasters from Nixtla's statsforecast behind CARSS's Forecaster protocol.

CARSS (paper 07) claims lower forecasting error than "traditional models". The strongest
traditional models a practitioner would reach for are statsforecast's automatic ones, not
hand-written ETS/ARIMA: MSTL (multiple seasonal-trend decomposition with an AutoETS trend),
seasonal AutoARIMA, AutoETS and AutoTheta. They are registered as forecasters
(``sf-mstl``, ``sf-autoarima``, ``sf-autoets``, ``sf-autotheta``) so every CARSS command and
experiment compares against them on the same walk-forward protocol.

Walk-forward: the model is refitted on the whole history every ``refit`` observations (one
season by default; four for AutoARIMA, whose order search with seasonal P, Q <= 1 takes ~6 s
per fit on 300 hourly points) and in between applied to the grown history with the fitted
parameters (``forward``), as statsforecast's own cross-validation does with ``refit=k``. The
predictive distribution is Gaussian with the 80 % interval statsforecast reports
(std = (hi − lo) / 2.563).

statsforecast is an optional dependency (``pip install 'schedlab[forecast]'``); building one of
these forecasters without it is a one-line error.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from schedlab.carss.forecasts import Forecast
from schedlab.core.errors import BadInputError, MissingDependencyError

_Z80 = 1.2815515655446004  # standard normal 90 % quantile: the 80 % interval is ±z·σ


def _models() -> dict[str, Callable[[int], object]]:
    try:
        from statsforecast.models import MSTL, AutoARIMA, AutoETS, AutoTheta
    except ImportError:
        raise MissingDependencyError(
            "statsforecast is not installed; pip install 'schedlab[forecast]'"
        ) from None
    return {
        # MSTL with season 1 needs the supersmoother package; on a history shorter than two
        # seasons fall back to MSTL's own trend model (AutoETS without a seasonal component)
        "sf-mstl": lambda season: (
            MSTL(season_length=season) if season > 1 else AutoETS(season_length=1, model="ZZN")
        ),
        # seasonal orders P, Q <= 1: the full search costs ~17 s per fit on 300 hourly points
        "sf-autoarima": lambda season: AutoARIMA(season_length=season, max_P=1, max_Q=1),
        "sf-autoets": lambda season: AutoETS(season_length=season),
        "sf-autotheta": lambda season: AutoTheta(season_length=season),
    }


NAMES = ("sf-mstl", "sf-autoarima", "sf-autoets", "sf-autotheta")


def available() -> bool:
    """Whether statsforecast can be imported (the experiments include its models only then)."""
    try:
        import statsforecast  # noqa: F401
    except ImportError:
        return False
    return True


class StatsForecaster:
    """One statsforecast model, refitted every ``refit`` observations, forward in between."""

    def __init__(
        self, kind: str, season: int = 48, seed: int = 0, refit: int | None = None
    ) -> None:
        if kind not in NAMES:
            raise BadInputError(
                f"unknown statsforecast model {kind!r}; valid: {', '.join(NAMES)}",
                field="forecaster",
            )
        if season < 1:
            raise BadInputError(f"must be at least 1, got {season}", field="season")
        self.name, self.season, self.seed = kind, int(season), seed
        # seasonal AutoARIMA's order search costs seconds per fit: refit it every four seasons
        self.refit = int(refit or (4 * season if kind == "sf-autoarima" else season))
        self._make = _models()[kind]
        self.history: list[float] = []
        self._model = None
        self._since_fit = 0

    def fit(self, history: np.ndarray) -> None:
        values = np.asarray(history, dtype=float)
        if values.size == 0 or not np.all(np.isfinite(values)):
            raise BadInputError("a forecaster needs finite observations", field="history")
        self.history = values.tolist()
        self._fit()

    def update(self, value: float) -> None:
        self.history.append(float(value))
        self._since_fit += 1
        if self._since_fit >= self.refit:
            self._fit()

    def _fit(self) -> None:
        y = np.asarray(self.history, dtype=float)
        season = self.season if y.size >= 2 * self.season else 1  # too short for a season
        self._model = self._make(season)
        with warnings.catch_warnings():  # optimiser convergence notes; the fit is still used
            warnings.simplefilter("ignore")
            self._model.fit(y)
        self._since_fit = 0

    def predict(self, horizon: int) -> Forecast:
        if self._model is None:
            raise BadInputError("call fit() before predict()", field="history")
        y = np.asarray(self.history, dtype=float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self._since_fit == 0:
                out = self._model.predict(horizon, level=[80])
            else:
                out = self._model.forward(y, horizon, level=[80])
        mean = np.maximum(np.asarray(out["mean"], dtype=float), 0.0)
        spread = (np.asarray(out["hi-80"], dtype=float) - np.asarray(out["lo-80"], dtype=float)) / (
            2 * _Z80
        )
        std = np.where(np.isfinite(spread) & (spread > 0), spread, np.sqrt(np.maximum(mean, 1)))
        return Forecast(mean, std)


def factory(kind: str) -> Callable[..., StatsForecaster]:
    """A constructor taking the protocol's keyword arguments (``season``, ``seed``, ...)."""

    def build(**kwargs: object) -> StatsForecaster:
        return StatsForecaster(kind, **kwargs)  # type: ignore[arg-type]

    return build
