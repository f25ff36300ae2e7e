"""Arrival forecasters behind one protocol: the paper's adaptive model and every baseline.

CARSS (paper 07) couples its co-simulator with "an online adaptive arrival forecasting framework"
(change-point detection + a probabilistic transformer that is fine-tuned when the arrival process
changes) and compares it with traditional forecasters and with the static-arrival assumption of
earlier co-simulators. Every forecaster here is probabilistic (it can be sampled), because the
co-simulator runs the cluster forward under *sampled* future arrivals.

Neural forecasters (transformer, LSTM) live in :mod:`schedlab.carss.neural` and import PyTorch
only when built.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize

from schedlab.carss.forecasts import Forecast, Forecaster
from schedlab.core.errors import BadInputError
from schedlab.core.registry import lookup

__all__ = ["FORECASTERS", "ARIMA", "DampedETS", "Forecast", "Forecaster", "LastValue",
           "MovingAverage", "SeasonalNaive", "StaticReplay", "available_forecasters",
           "make_forecaster"]


class _Online:
    """Keeps the observed series and one-step residuals (for the predictive spread)."""

    name = "base"

    def __init__(self, season: int = 48, seed: int = 0) -> None:
        self.season, self.seed = season, seed  # one constructor signature for every forecaster
        self.history: list[float] = []
        self.residuals: list[float] = []

    def fit(self, history: np.ndarray) -> None:
        values = np.asarray(history, dtype=float)
        if values.size == 0:
            raise BadInputError("a forecaster needs at least one observation", field="history")
        self.history = []
        for v in values:
            self.update(float(v))

    def update(self, value: float) -> None:
        if self.history:
            self.residuals.append(float(value) - float(self._ahead(1)[0]))
            self.residuals = self.residuals[-200:]
        self.history.append(float(value))

    def _ahead(self, horizon: int) -> np.ndarray:
        raise NotImplementedError

    def predict(self, horizon: int) -> Forecast:
        mean = np.maximum(self._ahead(horizon), 0.0)
        scale = (
            float(np.std(self.residuals)) if len(self.residuals) > 2 else np.sqrt(max(mean[0], 1.0))
        )
        return Forecast(mean, scale * np.sqrt(np.arange(1, horizon + 1)))


class LastValue(_Online):
    """Naive: the next intervals look like the last one."""

    name = "last-value"

    def _ahead(self, horizon: int) -> np.ndarray:
        return np.full(horizon, self.history[-1])


class MovingAverage(_Online):
    """The mean of the last ``window`` intervals."""

    name = "moving-average"

    def __init__(self, season: int = 48, seed: int = 0, window: int = 12) -> None:
        super().__init__(season, seed)
        self.window = window

    def _ahead(self, horizon: int) -> np.ndarray:
        return np.full(horizon, float(np.mean(self.history[-self.window :])))


class SeasonalNaive(_Online):
    """The value one season (day) ago; falls back to the last value before a full season."""

    name = "seasonal-naive"

    def _ahead(self, horizon: int) -> np.ndarray:
        n = len(self.history)
        if n < self.season:
            return np.full(horizon, self.history[-1])
        return np.array([self.history[n - self.season + (h % self.season)] for h in range(horizon)])


class DampedETS(_Online):
    """Holt's additive damped-trend exponential smoothing, ETS(A,Ad,N).

    Smoothing parameters are fitted once on the initial window by minimising one-step squared
    error (L-BFGS-B), then states update online: the "traditional model" that is not retrained.
    """

    name = "ets"

    def __init__(self, season: int = 48, seed: int = 0) -> None:
        super().__init__(season, seed)
        self.params = (0.5, 0.1, 0.9)
        self.level = self.trend = 0.0

    @staticmethod
    def _sse(params: np.ndarray, y: np.ndarray) -> float:
        alpha, beta, phi = params
        level, trend, sse = y[0], 0.0, 0.0
        for v in y[1:]:
            pred = level + phi * trend
            sse += (v - pred) ** 2
            new_level = alpha * v + (1 - alpha) * pred
            trend = beta * (new_level - level) + (1 - beta) * phi * trend
            level = new_level
        return sse

    def fit(self, history: np.ndarray) -> None:
        y = np.asarray(history, dtype=float)
        if y.size >= 4:
            best = minimize(
                self._sse,
                np.array([0.5, 0.05, 0.9]),
                args=(y,),
                bounds=[(0.01, 0.99), (0.0, 0.5), (0.8, 0.98)],
                method="L-BFGS-B",
            )
            self.params = tuple(float(p) for p in best.x)
        self.level, self.trend = float(y[0]) if y.size else 0.0, 0.0
        self.residuals = []
        super().fit(y)

    def update(self, value: float) -> None:
        alpha, beta, phi = self.params
        if not self.history:
            self.level, self.trend = float(value), 0.0
            self.history.append(float(value))
            return
        pred = self.level + phi * self.trend
        self.residuals = (self.residuals + [float(value) - pred])[-200:]
        new_level = alpha * value + (1 - alpha) * pred
        self.trend = beta * (new_level - self.level) + (1 - beta) * phi * self.trend
        self.level = new_level
        self.history.append(float(value))

    def _ahead(self, horizon: int) -> np.ndarray:
        phi = self.params[2]
        damp = np.cumsum(phi ** np.arange(1, horizon + 1))
        return self.level + damp * self.trend


class ARIMA(_Online):
    """ARIMA(p, 1, 0) with drift: an AR(p) on first differences, fitted once on the initial
    window by ordinary least squares (the conditional MLE for Gaussian errors), then rolled
    forward online with fixed coefficients."""

    name = "arima"

    def __init__(self, season: int = 48, seed: int = 0, order: int = 3) -> None:
        super().__init__(season, seed)
        self.order = order
        self.coef = np.zeros(order + 1)

    def fit(self, history: np.ndarray) -> None:
        y = np.asarray(history, dtype=float)
        d = np.diff(y)
        p = self.order
        if d.size > 2 * p + 2:
            lags = np.column_stack(
                [np.ones(d.size - p)] + [d[p - k - 1 : d.size - k - 1] for k in range(p)]
            )
            self.coef = np.linalg.lstsq(lags, d[p:], rcond=None)[0]
        super().fit(y)

    def _ahead(self, horizon: int) -> np.ndarray:
        p = self.order
        diffs = list(np.diff(self.history[-(p + 1) :])) if len(self.history) > p else [0.0] * p
        diffs = [0.0] * (p - len(diffs)) + diffs
        level, out = self.history[-1], []
        for _ in range(horizon):
            step = self.coef[0] + sum(self.coef[k + 1] * diffs[-k - 1] for k in range(p))
            level += step
            diffs.append(step)
            out.append(level)
        return np.array(out)


class StaticReplay(_Online):
    """The static-arrival assumption the paper criticises: replay the initial window forever.

    The co-simulators CARSS improves on run with one fixed arrival series; here it is the
    series seen during the initial window, replayed cyclically and aligned by time index.
    """

    name = "static"

    def __init__(self, season: int = 48, seed: int = 0) -> None:
        super().__init__(season, seed)
        self.script = np.zeros(1)

    def fit(self, history: np.ndarray) -> None:
        self.script = np.asarray(history, dtype=float).copy()
        if self.script.size == 0:
            raise BadInputError("a forecaster needs at least one observation", field="history")
        super().fit(history)

    def _ahead(self, horizon: int) -> np.ndarray:
        n = len(self.history)
        return self.script[(n + np.arange(horizon)) % self.script.size]

    def predict(self, horizon: int) -> Forecast:
        mean = self._ahead(horizon)
        return Forecast(mean, np.sqrt(np.maximum(mean, 1.0)))  # Poisson noise around the script


def _neural(kind: str) -> Callable[..., Forecaster]:
    def build(**kwargs: object) -> Forecaster:
        from schedlab.carss import neural

        return getattr(neural, kind)(**kwargs)

    return build


FORECASTERS: dict[str, Callable[..., Forecaster]] = {
    "adaptive": _neural("AdaptiveTransformer"),
    "transformer": _neural("TransformerForecaster"),
    "lstm": _neural("LSTMForecaster"),
    "ets": DampedETS,
    "arima": ARIMA,
    "seasonal-naive": SeasonalNaive,
    "moving-average": MovingAverage,
    "last-value": LastValue,
    "static": StaticReplay,
}


def _register_statsforecast() -> None:
    """statsforecast's automatic models (``sf-*``), built lazily; see carss/statsforecast.py."""
    from schedlab.carss import statsforecast as sf

    for kind in sf.NAMES:
        FORECASTERS[kind] = sf.factory(kind)


_register_statsforecast()


def _register_selector() -> None:
    """The change-aware model choice (carss/selector.py): ``select`` among statsforecast's
    models (hand-written ones without statsforecast), ``select-nn`` adds the transformer."""
    from schedlab.carss import selector

    FORECASTERS["select"] = selector.factory(make_forecaster)
    FORECASTERS["select-nn"] = selector.factory(make_forecaster, ("adaptive",), "select-nn")



def available_forecasters() -> list[str]:
    """Every registered forecaster whose dependencies import (statsforecast's are optional)."""
    from schedlab.carss import statsforecast as sf

    return [n for n in FORECASTERS if not n.startswith("sf-") or sf.available()]


def make_forecaster(name: str, **kwargs: object) -> Forecaster:
    """Build a forecaster by CLI name; every one takes ``season`` and ``seed`` (and its own
    extra keyword arguments)."""
    return lookup(FORECASTERS, "forecaster", name)(**kwargs)


_register_selector()  # after make_forecaster, which the selector builds its candidates with
