"""The learned parts of the schedulers: CARSS's recurrent surrogate and GOBI's optimiser."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from schedlab.carss.hosts import make_hosts
from schedlab.carss.simulator import Cluster
from schedlab.carss.surrogate import CAND_DIM, CARSS, GOBI, OBS_DIM, _projected
from schedlab.carss.workloads import make_tasks


def test_recurrent_surrogate_learns_the_cosimulator_bias() -> None:
    """Fed a constant gap between co-simulated and realised cost, the GRU predicts it."""
    torch.set_num_threads(1)
    carss = CARSS(seed=0, forecaster_kwargs=dict(epochs=1, context=12, horizon=6))
    rng = np.random.default_rng(0)
    for _ in range(64):
        carss.buffer.append((rng.random((carss.seq_len, OBS_DIM)), rng.random(CAND_DIM), 0.7))
    for _ in range(150):
        carss._train()
    seq = torch.tensor(rng.random((5, carss.seq_len, OBS_DIM)), dtype=torch.float32)
    feats = torch.tensor(rng.random((5, CAND_DIM)), dtype=torch.float32)
    with torch.no_grad():
        assert np.allclose(carss.net(seq, feats).numpy(), 0.7, atol=0.1)


class _SquaredLoad(nn.Module):
    """A known surrogate: cost = Σ load², minimised by spreading load evenly."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x[:, : self.n] ** 2).sum(1, keepdim=True)


def test_gobi_gradient_step_improves_its_surrogate() -> None:
    """Starting from everything on one host, descent on the soft assignment spreads the load."""
    cluster = Cluster(make_hosts(4), 300.0)
    cluster.admit(make_tasks(8, 0.0, 0, np.random.default_rng(0)))
    gobi = GOBI(seed=0, steps=40)
    gobi.net = _SquaredLoad(4)
    start = np.zeros(len(cluster.tasks), dtype=np.int64)
    waiting = np.arange(len(cluster.tasks))
    better = gobi._optimise(cluster, start, waiting)
    cost = [float((_projected(cluster, p)[0] ** 2).sum()) for p in (start, better)]
    assert cost[1] < 0.7 * cost[0]
    assert (better >= 0).all()
    assert np.all(_projected(cluster, better)[1] <= 1.0 + 1e-9)  # RAM-feasible rounding
