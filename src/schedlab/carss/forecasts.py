"""What every arrival forecaster returns (``Forecast``) and the protocol it implements.

Why a module of its own: the classical forecasters (``forecast``), the neural ones (``neural``)
and statsforecast's (``statsforecast``) all build ``Forecast`` objects, and the registry in
``forecast`` lists all of them; keeping the shared types below all three breaks the import cycle
between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.stats import norm


@dataclass(frozen=True)
class Forecast:
    """A Gaussian forecast per step, in count space or (``log``) in log1p(count) space."""

    mean: np.ndarray
    std: np.ndarray
    log: bool = False

    def point(self) -> np.ndarray:
        """The median forecast in counts (the MAE-optimal point)."""
        return np.maximum(np.expm1(self.mean) if self.log else self.mean, 0.0)

    def quantile(self, q: float) -> np.ndarray:
        value = self.mean + norm.ppf(q) * self.std
        return np.maximum(np.expm1(value) if self.log else value, 0.0)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` sample paths of non-negative integer arrivals, shape (n, horizon)."""
        z = np.clip(rng.standard_normal((n, self.mean.size)), -3.0, 3.0)  # no 1-in-10^4 tails
        value = self.mean + z * self.std
        value = np.expm1(value) if self.log else value
        return np.maximum(np.rint(value), 0).astype(np.int64)


class Forecaster(Protocol):
    """Fit on an initial window, then observe one interval at a time and predict ahead."""

    name: str

    def fit(self, history: np.ndarray) -> None: ...

    def update(self, value: float) -> None: ...

    def predict(self, horizon: int) -> Forecast: ...
