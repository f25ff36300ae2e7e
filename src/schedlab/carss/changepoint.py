"""Change-point detection on arrival series: streaming (BOCPD, Page-Hinkley) and offline (ruptures).

CARSS (paper 07) retrains its forecaster "in response to detected changes". A streaming
detector sees one interval's arrivals at a time and must say *when* the process changed, soon
after it did; the offline segmentation (ruptures' PELT) is used to locate the change precisely
within a recent window and to segment whole traces for the ``forecast`` command.

BOCPD: Adams & MacKay, "Bayesian Online Changepoint Detection" (2007), Gaussian observations
with unknown mean and precision (Normal-Gamma conjugate prior), constant hazard, run lengths
truncated at ``max_run`` so each update costs O(max_run). Page-Hinkley: Page (1954), two-sided.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from scipy.special import gammaln

from schedlab.core.errors import BadInputError
from schedlab.core.registry import lookup


class Detector(Protocol):
    """A streaming detector: feed one value, get back a change point index or None."""

    name: str

    def update(self, value: float) -> int | None: ...


class BOCPD:
    """Bayesian online change-point detection with a Student-t predictive."""

    name = "bocpd"

    def __init__(
        self,
        hazard: float = 1 / 60,
        max_run: int = 300,
        mu0: float = 0.0,
        kappa0: float = 0.1,
        alpha0: float = 2.0,
        beta0: float = 0.1,
        min_gap: int = 8,
        drop: int = 8,
        threshold: float = 0.8,
    ) -> None:
        if not 0 < hazard < 1:
            raise BadInputError("must be in (0, 1)", field="hazard")
        self.hazard, self.max_run, self.min_gap, self.drop = hazard, max_run, min_gap, drop
        self.threshold = threshold
        self.prior = (mu0, kappa0, alpha0, beta0)
        self.t = 0
        self.last_cp = -min_gap
        self._reset_params(first=None)

    def _reset_params(self, first: float | None) -> None:
        mu0, kappa0, alpha0, beta0 = self.prior
        self.log_r = np.array([0.0])
        self.mu = np.array([mu0 if first is None else first])
        self.kappa, self.alpha, self.beta = (
            np.array([kappa0]),
            np.array([alpha0]),
            np.array([beta0]),
        )

    def _log_pred(self, x: float) -> np.ndarray:
        scale2 = self.beta * (self.kappa + 1) / (self.alpha * self.kappa)
        nu = 2 * self.alpha
        z = (x - self.mu) ** 2 / (nu * scale2)
        return (
            gammaln((nu + 1) / 2)
            - gammaln(nu / 2)
            - 0.5 * np.log(np.pi * nu * scale2)
            - (nu + 1) / 2 * np.log1p(z)
        )

    def update(self, value: float) -> int | None:
        """Absorb one observation; return the index where a new regime began, if detected."""
        x = float(value)
        if self.t == 0:
            self._reset_params(first=x)
        log_pred = self._log_pred(x)
        grow = self.log_r + log_pred + np.log1p(-self.hazard)
        change = np.logaddexp.reduce(self.log_r + log_pred + np.log(self.hazard))
        log_r = np.concatenate([[change], grow])
        log_r -= np.logaddexp.reduce(log_r)
        mu0, kappa0, alpha0, beta0 = self.prior
        mu0 = self.mu[0]  # a new run starts from the long-run level, not an arbitrary zero
        new_mu = (self.kappa * self.mu + x) / (self.kappa + 1)
        new_beta = self.beta + self.kappa * (x - self.mu) ** 2 / (2 * (self.kappa + 1))
        self.mu = np.concatenate([[mu0], new_mu])
        self.kappa = np.concatenate([[kappa0], self.kappa + 1])
        self.alpha = np.concatenate([[alpha0], self.alpha + 0.5])
        self.beta = np.concatenate([[beta0], new_beta])
        self.log_r = log_r
        if log_r.size > self.max_run:  # truncate the least likely long tail
            keep = slice(0, self.max_run)
            self.log_r, self.mu, self.kappa = log_r[keep], self.mu[keep], self.kappa[keep]
            self.alpha, self.beta = self.alpha[keep], self.beta[keep]
            self.log_r -= np.logaddexp.reduce(self.log_r)
        self.t += 1
        return self._decide()

    def _decide(self) -> int | None:
        """Fire once the posterior puts most of its mass on a run that began within the last
        ``drop`` intervals; the change point is where the most likely such run began."""
        recent = self.log_r[: self.drop + 1]
        if np.exp(np.logaddexp.reduce(recent)) <= self.threshold or self.t <= self.drop:
            return None
        cp = self.t - int(np.argmax(recent))
        if cp < self.last_cp + self.min_gap:
            return None
        self.last_cp = cp
        return cp


class PageHinkley:
    """Two-sided Page-Hinkley test on the mean; reports the alarm time as the change point."""

    name = "page-hinkley"

    def __init__(self, delta: float = 0.05, threshold: float = 3.0, alpha: float = 0.97) -> None:
        self.delta, self.threshold, self.alpha = delta, threshold, alpha
        self.t = 0
        self._reset()

    def _reset(self) -> None:
        self.mean, self.n = 0.0, 0
        self.up = self.down = self.min_up = self.max_down = 0.0

    def update(self, value: float) -> int | None:
        x = float(value)
        self.n += 1
        self.mean += (x - self.mean) / self.n
        self.up = self.alpha * self.up + (x - self.mean - self.delta)
        self.down = self.alpha * self.down + (x - self.mean + self.delta)
        self.min_up, self.max_down = min(self.min_up, self.up), max(self.max_down, self.down)
        self.t += 1
        if self.up - self.min_up > self.threshold or self.max_down - self.down > self.threshold:
            self._reset()
            return self.t - 1
        return None


DETECTORS = {"bocpd": BOCPD, "page-hinkley": PageHinkley}


def make_detector(name: str, **kwargs: float) -> Detector:
    return lookup(DETECTORS, "change-point detector", name)(**kwargs)


def offline_changepoints(
    series: np.ndarray, penalty: float | None = None, min_size: int = 5
) -> list[int]:
    """PELT segmentation (ruptures, L2 cost) of log arrivals; returns change indices."""
    import ruptures as rpt

    x = np.log1p(np.asarray(series, dtype=float))
    if x.size < 2 * min_size:
        return []
    sigma2 = max(float(np.var(np.diff(x))) / 2, 1e-6)  # noise level from first differences
    pen = penalty if penalty is not None else 2 * sigma2 * np.log(x.size) * 3
    ends = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(x.reshape(-1, 1)).predict(pen=pen)
    return [int(e) for e in ends[:-1]]


def locate_change(window: np.ndarray) -> int:
    """Where in ``window`` the single most likely change lies (ruptures binary segmentation)."""
    import ruptures as rpt

    x = np.log1p(np.asarray(window, dtype=float)).reshape(-1, 1)
    if x.shape[0] < 6:
        return 0
    return int(rpt.Binseg(model="l2", min_size=3, jump=1).fit(x).predict(n_bkps=1)[0])


def detection_scores(
    found: list[int], truth: list[int] | tuple[int, ...], tolerance: int = 6
) -> dict[str, float]:
    """Precision, recall, F1 and mean location error; a detection matches the nearest unmatched
    true change within ``tolerance`` intervals."""
    truth, used, delays = list(truth), set(), []
    for cp in sorted(found):
        match = sorted(
            (abs(cp - c), i)
            for i, c in enumerate(truth)
            if i not in used and abs(cp - c) <= tolerance
        )
        if match:
            used.add(match[0][1])
            delays.append(match[0][0])
    tp = len(used)
    precision = tp / len(found) if found else (1.0 if not truth else 0.0)
    recall = tp / len(truth) if truth else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return dict(
        precision=precision,
        recall=recall,
        f1=f1,
        error=float(np.mean(delays)) if delays else float("nan"),
    )
