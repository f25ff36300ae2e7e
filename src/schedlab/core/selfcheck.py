"""The harness's own experiment: Jain's fairness index on allocations with a known answer.

Jain, Chiu & Hawe (1984) show that when k of n users get an equal share and the rest get
nothing, J = k/n, and that 1/n <= J <= 1 for any allocation. This checks our metric against
both on seeded random allocations, so ``schedlab reproduce`` always has an honest experiment to
run end to end, even before any system is implemented.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from schedlab.core.experiment import Claim, Figure, Result, register
from schedlab.core.metrics import jain_index


@register("core", quick=dict(trials=200), full=dict(trials=5_000))
def jain_known_allocations(trials: int, seed: int) -> Result:
    """Jain's index equals k/n on k-of-n equal allocations and stays in [1/n, 1]."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(trials):
        n = int(rng.integers(1, 200))
        k = int(rng.integers(1, n + 1))
        share = float(rng.uniform(0.1, 100.0))
        allocation = np.zeros(n)
        allocation[rng.choice(n, size=k, replace=False)] = share
        random_alloc = rng.exponential(1.0, size=n) * (rng.random(n) < 0.7)
        j_random = jain_index(random_alloc)
        rows.append(dict(n=n, k=k, expected=k / n, jain=jain_index(allocation),
                         random_jain=j_random,
                         in_bounds=(1 / n - 1e-12) <= j_random <= 1 + 1e-12))
    frame = pl.DataFrame(rows).with_columns(error=(pl.col("jain") - pl.col("expected")).abs())
    claims = [
        Claim("An allocation in which k of n users share equally has Jain's index k/n",
              metric="max |J - k/n|", measured=float(frame["error"].max()), target=1e-12,
              comparison="<=", paper_figure="J = k/n (exact)", required=True, kind="sanity"),
        Claim("Jain's index of any allocation lies in [1/n, 1]",
              metric="share of random allocations in bounds",
              measured=float(frame["in_bounds"].mean()), target=1.0, comparison=">=",
              paper_figure="1/n <= J <= 1", required=True,
              kind="sanity"),
    ]
    return Result(frame, claims=claims, figures=[_plot(frame)], data="generated")


def _plot(frame: pl.DataFrame) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.5, 4))
    ax.plot([0, 1], [0, 1], color="grey", lw=1, label="J = k/n")
    ax.scatter(frame["expected"], frame["jain"], s=8, label="measured")
    ax.set_xlabel("k / n")
    ax.set_ylabel("Jain's index")
    ax.legend()
    return Figure.from_matplotlib(fig, "jain-vs-k-over-n",
                                  "Jain's index of k-of-n equal allocations against k/n")
