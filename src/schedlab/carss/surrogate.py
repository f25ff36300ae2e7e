"""Learned schedulers (PyTorch): CARSS's recurrent surrogate and the GOBI-style baseline.

CARSS (paper 07): "the Co-simulated Adaptive Recurrent Surrogate Scheduler ... uses simulated QoS
metrics from the co-simulator to make scheduling decisions". Here a GRU reads the recent history
of the cluster (utilisation, queue, arrivals, realised and co-simulated cost) and, together with a
candidate decision's co-simulated QoS, predicts how far the co-simulator's horizon cost will be
from the cost really incurred. It is trained online on exactly that gap, so the scheduler learns
where the co-simulator (with its forecast arrivals and least-loaded future) is biased, and picks
the candidate with the lowest corrected, risk-adjusted cost.

GOBI (Tuli et al., "COSCO", IEEE TPDS 2022): a feed-forward surrogate of the next interval's
objective as a function of the host state after a decision, trained online on observed outcomes,
with the decision found by gradient descent on a soft assignment of waiting tasks to hosts. As
in COSCO, the surrogate is first trained offline on traces of the simulator driven by random
and least-loaded placements (here generated at the start, at the history's mean arrival rate),
then fine-tuned online. No co-simulation and no arrival forecast.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch
from torch import nn

from schedlab.carss.cosim import QoSPrediction
from schedlab.carss.placement import greedy, least_loaded
from schedlab.carss.policies import CoSimScheduler, _Passive
from schedlab.carss.simulator import Cluster, IntervalStats, Tasks, objective
from schedlab.carss.workloads import make_tasks

OBS_DIM, CAND_DIM = 7, 6


def _projected(cluster: Cluster, placement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CPU load and RAM fraction per host if ``placement`` were applied."""
    tk, hosts = cluster.tasks, cluster.hosts
    target = np.where(placement >= 0, placement, tk.host)
    placed = target >= 0
    load = np.bincount(target[placed], cluster.demand()[placed], hosts.n) / hosts.cpu
    ram = np.bincount(target[placed], tk.ram[placed], hosts.n) / hosts.ram
    return load, ram


class _Recurrent(nn.Module):
    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.gru = nn.GRU(OBS_DIM, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden + CAND_DIM, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, seq: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        _, h = self.gru(seq)
        return self.head(torch.cat([h[-1], cand], dim=1)).squeeze(1)


class CARSS(CoSimScheduler):
    """Adaptive co-simulation + a GRU surrogate that corrects its QoS predictions online."""

    name = "carss"

    def __init__(
        self,
        horizon: int = 4,
        samples: int = 3,
        season: int = 48,
        seed: int = 0,
        candidates: int = 2,
        forecaster_kwargs: dict | None = None,
        seq_len: int = 8,
        risk: float = 0.5,
        warmup: int = 12,
        actions: bool = False,
    ) -> None:
        super().__init__(
            "adaptive", horizon, samples, season, seed, candidates, forecaster_kwargs, actions
        )
        self.seq_len, self.risk, self.warmup = seq_len, risk, warmup
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.net = _Recurrent()
        self.optimiser = torch.optim.Adam(self.net.parameters(), lr=3e-3)
        self.rng = np.random.default_rng(seed)
        self.obs: deque[np.ndarray] = deque([np.zeros(OBS_DIM)] * seq_len, maxlen=seq_len)
        self.realised: dict[int, float] = {}
        self.pending: list[tuple[int, np.ndarray, np.ndarray, float]] = []
        self.buffer: deque[tuple[np.ndarray, np.ndarray, float]] = deque(maxlen=400)
        self._arrived = 0.0
        self._predicted = 0.0
        self._feats = np.zeros((0, CAND_DIM))

    def arrive(self, batch: Tasks) -> None:
        super().arrive(batch)
        self._arrived = float(len(batch))

    def _candidate_features(
        self, cluster: Cluster, p: QoSPrediction, placement: np.ndarray
    ) -> np.ndarray:
        load, _ = _projected(cluster, getattr(placement, "placement", placement))
        return np.array(
            [
                p.objective,
                p.objective_std,
                p.migrations / cluster.hosts.n,
                float(load.std()),
                float(load.max()),
                p.sla_rate,
            ]
        )

    def score(
        self, cluster: Cluster, predictions: list[QoSPrediction], candidates: list[np.ndarray]
    ) -> np.ndarray:
        feats = np.array(
            [
                self._candidate_features(cluster, p, c)
                for p, c in zip(predictions, candidates, strict=True)
            ]
        )
        base = np.array([p.objective + self.risk * p.objective_std for p in predictions])
        self._feats = feats
        if len(self.buffer) < self.warmup:
            return base
        seq = torch.tensor(np.array(self.obs), dtype=torch.float32)[None].expand(len(feats), -1, -1)
        with torch.no_grad():
            residual = self.net(seq, torch.tensor(feats, dtype=torch.float32)).numpy()
        return base + residual

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        placement = super().decide(cluster, rng)
        chosen = self.last[self.chosen]
        self._predicted = chosen.objective
        self.pending.append(
            (cluster.interval, np.array(self.obs), self._feats[self.chosen], chosen.objective)
        )
        return placement

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        """Record the realised cost; once a decision's horizon has passed, learn its gap."""
        cost = objective(stats, cluster.hosts, cluster.interval_s, self.cosim.weights)
        self.realised[stats.interval] = cost
        n = cluster.hosts.n
        self.obs.append(
            np.array(
                [
                    stats.util_mean,
                    stats.util_max,
                    stats.waiting / n,
                    stats.running / n,
                    np.log1p(self._arrived),
                    cost,
                    self._predicted / self.cosim.horizon,
                ]
            )
        )
        h = self.cosim.horizon
        while self.pending and self.pending[0][0] + h - 1 <= stats.interval:
            start, seq, feats, predicted = self.pending.pop(0)
            real = sum(self.realised.get(start + k, cost) for k in range(h))
            self.buffer.append((seq, feats, real - predicted))
        self._train()

    def _train(self, steps: int = 2, batch: int = 32) -> None:
        if len(self.buffer) < self.warmup:
            return
        for _ in range(steps):
            pick = self.rng.integers(0, len(self.buffer), min(batch, len(self.buffer)))
            seq = torch.tensor(np.array([self.buffer[i][0] for i in pick]), dtype=torch.float32)
            feats = torch.tensor(np.array([self.buffer[i][1] for i in pick]), dtype=torch.float32)
            target = torch.tensor([self.buffer[i][2] for i in pick], dtype=torch.float32)
            loss = ((self.net(seq, feats) - target) ** 2).mean()
            self.optimiser.zero_grad()
            loss.backward()
            self.optimiser.step()


class GOBI(_Passive):
    """Gradient-based optimisation over a feed-forward surrogate of the next interval's cost."""

    name = "gobi"

    def __init__(
        self, seed: int = 0, steps: int = 12, lr: float = 0.3, warmup: int = 12, offline: int = 200
    ) -> None:
        self.seed, self.steps, self.lr, self.warmup = seed, steps, lr, warmup
        self.offline = offline
        self.rate = 1.0
        self.net: nn.Module | None = None
        self.rng = np.random.default_rng(seed)
        self.buffer: deque[tuple[np.ndarray, float]] = deque(maxlen=1000)
        self._pending: np.ndarray | None = None

    def _build(self, n: int) -> None:
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            self.net = nn.Sequential(
                nn.Linear(2 * n + 1, 64),
                nn.Softplus(),
                nn.Linear(64, 64),
                nn.Softplus(),
                nn.Linear(64, 1),
            )
        self.optimiser = torch.optim.Adam(self.net.parameters(), lr=3e-3)

    def prepare(self, history: np.ndarray) -> None:
        self.rate = float(np.mean(history)) if len(history) else 1.0

    def _pretrain(self, cluster: Cluster) -> None:
        """COSCO-style offline data: run a private copy of the cluster with random or
        least-loaded placements and learn the next-interval cost from it."""
        rng = np.random.default_rng(self.seed + 7919)
        twin = Cluster(cluster.hosts, cluster.interval_s, record=False)
        tid = 0
        for _ in range(self.offline):
            n = int(rng.poisson(self.rate * rng.uniform(0.3, 1.7)))
            twin.admit(make_tasks(n, twin.now, tid, rng))
            tid += n
            if rng.random() < 0.5:
                placement = greedy(twin, lambda load, ram, need: rng.random(load.size))
            else:
                placement = greedy(twin, least_loaded)
            waiting = np.flatnonzero(twin.tasks.host < 0)
            features = self._features(twin, placement, waiting)
            moved, refused = twin.apply(placement)
            stats = twin.step(moved, refused)
            self.buffer.append((features, self._target(stats, twin)))
            if stats.waiting > 3 * twin.hosts.n:  # a runaway queue teaches nothing useful
                twin = Cluster(cluster.hosts, cluster.interval_s, record=False)
        self._fit(steps=600)

    @staticmethod
    def _target(stats: IntervalStats, cluster: Cluster) -> float:
        """log1p of the interval's cost: same minimiser, but a few overloaded intervals no
        longer dominate the squared-error fit."""
        return float(np.log1p(objective(stats, cluster.hosts, cluster.interval_s)))

    def decide(self, cluster: Cluster, rng: np.random.Generator) -> np.ndarray:
        if self.net is None:
            self._build(cluster.hosts.n)
            if self.offline:
                self._pretrain(cluster)
        placement = greedy(cluster, least_loaded)
        waiting = np.flatnonzero(cluster.tasks.host < 0)
        if waiting.size and len(self.buffer) >= self.warmup:
            moved = self._optimise(cluster, placement.copy(), waiting)
            # keep the descent's result only if the surrogate itself prefers it once rounded
            if self._predict(cluster, moved, waiting) < self._predict(cluster, placement, waiting):
                placement = moved
        self._pending = self._features(cluster, placement, waiting)
        return placement

    def _features(self, cluster: Cluster, placement: np.ndarray, waiting: np.ndarray) -> np.ndarray:
        load, ram = _projected(cluster, placement)
        return np.concatenate([load, ram, [waiting.size / cluster.hosts.n]])

    def _predict(self, cluster: Cluster, placement: np.ndarray, waiting: np.ndarray) -> float:
        x = torch.tensor(self._features(cluster, placement, waiting)[None], dtype=torch.float32)
        with torch.no_grad():
            return float(self.net(x)[0, 0])

    def _optimise(self, cluster: Cluster, start: np.ndarray, waiting: np.ndarray) -> np.ndarray:
        """Descend the surrogate over a softmax assignment of waiting tasks, then round it to
        the most likely RAM-feasible host per task."""
        hosts, tk = cluster.hosts, cluster.tasks
        base = start.copy()
        base[waiting] = -1
        base_load, base_ram = _projected(cluster, base)
        cpu = torch.tensor(
            cluster.demand()[waiting][:, None] / hosts.cpu[None], dtype=torch.float32
        )
        mem = torch.tensor(tk.ram[waiting][:, None] / hosts.ram[None], dtype=torch.float32)
        init = np.zeros((waiting.size, hosts.n))
        ok = start[waiting] >= 0
        init[np.flatnonzero(ok), start[waiting][ok]] = 3.0
        logits = torch.tensor(init, dtype=torch.float32, requires_grad=True)
        opt = torch.optim.Adam([logits], lr=self.lr)
        extra = torch.tensor([waiting.size / hosts.n], dtype=torch.float32)
        for _ in range(self.steps):
            a = torch.softmax(logits, dim=1)
            x = torch.cat(
                [
                    torch.tensor(base_load, dtype=torch.float32) + (a * cpu).sum(0),
                    torch.tensor(base_ram, dtype=torch.float32) + (a * mem).sum(0),
                    extra,
                ]
            )
            loss = self.net(x[None]).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        prefer = torch.argsort(logits.detach(), dim=1, descending=True).numpy()
        ram = cluster.ram_used().copy()
        out = base
        for row, i in enumerate(waiting):
            for h in prefer[row]:
                if ram[h] + tk.ram[i] <= hosts.ram[h]:
                    out[i] = h
                    ram[h] += tk.ram[i]
                    break
        return out

    def feedback(self, cluster: Cluster, stats: IntervalStats) -> None:
        if self._pending is None:
            return
        self.buffer.append((self._pending, self._target(stats, cluster)))
        if len(self.buffer) >= self.warmup:
            self._fit(steps=2)

    def _fit(self, steps: int, batch: int = 64) -> None:
        for _ in range(steps):
            pick = self.rng.integers(0, len(self.buffer), min(batch, len(self.buffer)))
            x = torch.tensor(np.array([self.buffer[i][0] for i in pick]), dtype=torch.float32)
            y = torch.tensor([self.buffer[i][1] for i in pick], dtype=torch.float32)
            loss = ((self.net(x).squeeze(1) - y) ** 2).mean()
            self.optimiser.zero_grad()
            loss.backward()
            self.optimiser.step()
