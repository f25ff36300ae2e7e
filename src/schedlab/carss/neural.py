"""Neural arrival forecasters (PyTorch): probabilistic transformer, adaptive wrapper, LSTM.

CARSS (paper 07): "a change-point detection module and a probabilistic transformer model ...
updates the prediction model in response to detected changes". The transformer reads the last
``context`` intervals of log1p(arrivals) (normalised per window, so a level shift does not push
inputs out of range) plus the time of day, and emits a Gaussian per step of the horizon, trained
by negative log-likelihood. :class:`AdaptiveTransformer` adds a streaming BOCPD detector; when it
fires, ruptures locates the change and the model is fine-tuned on post-change windows (mixed with
replayed older ones, so the diurnal pattern is not forgotten). The LSTM baseline shares the data
pipeline and head but is trained once, like the "traditional models" of the paper.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from schedlab.carss.changepoint import BOCPD, locate_change
from schedlab.carss.forecasts import Forecast
from schedlab.core.errors import BadInputError

MIN_SCALE = 0.25
LOCAL = 6  # floor of the per-window std in log space: quiet windows stay well-scaled


class _TransformerNet(nn.Module):
    def __init__(self, features: int, context: int, horizon: int, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Linear(features, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(
            width, nhead=4, dim_feedforward=2 * width, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(width, 2 * horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(x) + self.position)
        return self.head(h[:, -1])


class _LSTMNet(nn.Module):
    def __init__(self, features: int, context: int, horizon: int, width: int = 32) -> None:
        super().__init__()
        self.rnn = nn.LSTM(features, width, batch_first=True)
        self.head = nn.Linear(width, 2 * horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class _WindowForecaster:
    """Windowing, per-window normalisation, Gaussian NLL training and prediction."""

    name = "window"
    net_class: type[nn.Module] = _TransformerNet

    def __init__(
        self,
        season: int = 48,
        seed: int = 0,
        context: int = 24,
        horizon: int = 8,
        epochs: int = 40,
        lr: float = 3e-3,
    ) -> None:
        self.season, self.seed, self.context, self.horizon = season, seed, context, horizon
        self.epochs, self.lr = epochs, lr
        self.log: list[float] = []
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.net = self.net_class(3, context, horizon)
        self.optimiser = torch.optim.Adam(self.net.parameters(), lr=lr)
        self.rng = np.random.default_rng(seed)

    def _inputs(self, values: np.ndarray, start: int) -> tuple[np.ndarray, float, float]:
        m = float(values[-LOCAL:].mean())  # a local level: reacts to shifts like ETS does
        s = max(float(values.std()), MIN_SCALE)
        phase = 2 * np.pi * (start + np.arange(values.size)) / self.season
        return np.column_stack([(values - m) / s, np.sin(phase), np.cos(phase)]), m, s

    def _windows(self, ends: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Training pairs whose context ends at each index in ``ends``."""
        y = np.asarray(self.log)
        xs, ts = [], []
        for end in ends:
            ctx, m, s = self._inputs(y[end - self.context : end], end - self.context)
            xs.append(ctx)
            ts.append((y[end : end + self.horizon] - m) / s)
        return (
            torch.tensor(np.array(xs), dtype=torch.float32),
            torch.tensor(np.array(ts), dtype=torch.float32),
        )

    def _train(
        self, ends: np.ndarray, epochs: int, optimiser: torch.optim.Optimizer | None = None
    ) -> None:
        if ends.size == 0:
            return
        optimiser = optimiser or self.optimiser
        x, t = self._windows(ends)
        self.net.train()
        for _ in range(epochs):
            order = self.rng.permutation(len(x))
            for batch in np.array_split(order, max(1, len(order) // 64)):
                out = self.net(x[batch])
                mu, log_sigma = out[:, : self.horizon], out[:, self.horizon :].clamp(-4, 3)
                loss = (log_sigma + 0.5 * ((t[batch] - mu) / log_sigma.exp()) ** 2).mean()
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        self.net.eval()

    def _valid_ends(self) -> np.ndarray:
        return np.arange(self.context, len(self.log) - self.horizon + 1)

    def fit(self, history: np.ndarray) -> None:
        values = np.asarray(history, dtype=float)
        if values.size < self.context + self.horizon:
            raise BadInputError(
                f"needs at least {self.context + self.horizon} intervals to "
                f"train, got {values.size}",
                field="history",
            )
        self.log = list(np.log1p(np.maximum(values, 0.0)))
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            self._train(self._valid_ends(), self.epochs)

    def update(self, value: float) -> None:
        self.log.append(float(np.log1p(max(float(value), 0.0))))

    def _context(self) -> np.ndarray:
        y = np.asarray(self.log[-self.context :])
        if y.size < self.context:
            y = np.concatenate([np.full(self.context - y.size, y[0] if y.size else 0.0), y])
        return y

    def predict(self, horizon: int) -> Forecast:
        if horizon > self.horizon:
            raise BadInputError(f"trained for {self.horizon} steps ahead", field="horizon")
        y = self._context()
        ctx, m, s = self._inputs(y, len(self.log) - self.context)
        with torch.no_grad():
            out = self.net(torch.tensor(ctx[None], dtype=torch.float32))[0].numpy()
        mu, sigma = (
            out[:horizon],
            np.exp(np.clip(out[self.horizon : self.horizon + horizon], -4, 3)),
        )
        return Forecast(m + s * mu.astype(float), s * sigma.astype(float), log=True)


class TransformerForecaster(_WindowForecaster):
    """The probabilistic transformer, trained once on the initial window (no adaptation)."""

    name = "transformer"
    net_class = _TransformerNet


class LSTMForecaster(_WindowForecaster):
    """An LSTM with the same inputs and Gaussian head, trained once."""

    name = "lstm"
    net_class = _LSTMNet


class AdaptiveTransformer(TransformerForecaster):
    """The paper's framework: transformer + streaming change detection + fine-tuning on change."""

    name = "adaptive"

    def __init__(
        self,
        season: int = 48,
        seed: int = 0,
        context: int = 24,
        horizon: int = 8,
        epochs: int = 40,
        lr: float = 3e-3,
        tune_epochs: int = 3,
        tune_lr: float = 3e-4,
        hazard: float = 1 / 60,
        replay: int = 200,
    ) -> None:
        super().__init__(season, seed, context, horizon, epochs, lr)
        self.tune_epochs, self.replay = tune_epochs, replay
        self.tuner = torch.optim.Adam(self.net.parameters(), lr=tune_lr)
        self.detector = BOCPD(hazard=hazard, min_gap=12)
        self.changes: list[int] = []
        self.tunes = 0
        self._pending: list[int] = []

    def fit(self, history: np.ndarray) -> None:
        super().fit(history)
        self.detector = BOCPD(hazard=self.detector.hazard, min_gap=12)
        for v in self.log:
            self.detector.update(v)

    def update(self, value: float) -> None:
        super().update(value)
        now = len(self.log)
        cp = self.detector.update(self.log[-1])
        if cp is not None:
            window = np.expm1(np.asarray(self.log[max(0, now - 2 * self.context) :]))
            located = int(now - window.size + locate_change(window))
            if not self.changes or located > self.changes[-1]:
                self.changes.append(located)
            self._pending = [now, now + self.context // 2]  # tune now, again with more data
        if self._pending and now >= self._pending[0]:
            self._pending.pop(0)
            self._fine_tune()

    def _context(self) -> np.ndarray:
        """Regime-aware context: values before a detected change inside the window are shifted
        to the new regime's level, so the per-window normalisation is not a blend of both."""
        y = super()._context().copy()
        if not self.changes:
            return y
        split = self.context - (len(self.log) - self.changes[-1])
        if 0 < split <= self.context - 3:
            y[:split] += y[split:].mean() - y[:split].mean()
        return y

    def _fine_tune(self) -> None:
        """Retrain on everything seen so far (the new regime included), newest windows first
        in importance: all post-change windows plus up to ``replay`` older ones."""
        ends = self._valid_ends()
        if ends.size == 0:
            return
        since = self.changes[-1] if self.changes else 0
        recent = ends[ends + self.horizon > since]
        older = ends[ends + self.horizon <= since]
        take = min(older.size, max(self.replay, 2 * recent.size))
        replay = self.rng.choice(older, size=take, replace=False) if take else older[:0]
        with torch.random.fork_rng():
            torch.manual_seed(self.seed + len(self.log))
            self._train(np.concatenate([recent, replay]).astype(int), self.tune_epochs, self.tuner)
        self.tunes += 1
