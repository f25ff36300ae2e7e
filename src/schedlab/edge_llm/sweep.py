"""Regime sweeps where routing matters: online routing vs every fixed mode and DistServe.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). Axes: cloud SM share (congestion), WAN one-way latency,
backhaul bandwidth, edge GPU class, prompt/output length mix and offered load; each point
replays the same requests through ``online``, the four fixed modes, ``distserve`` (placement
search) and ``splitwise``. The
yardstick of every claim is the best of those baselines *on the same replay* (the strongest
fixed choice an operator could have made with hindsight), never the router's own estimate.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import polars as pl

from schedlab.edge_llm.config import EdgeConfig
from schedlab.edge_llm.simulator import simulate
from schedlab.edge_llm.workloads import CLASSES, EdgeRequest, generate

FIXED = ("cloud", "split", "mix", "disagg")
BASELINES = (*FIXED, "distserve", "splitwise")
POLICIES = (*BASELINES, "online")
BASE_RATE = 1.5
#: length mixes: class shares (chat, rag, agent); "long-prompt" is RAG-heavy, "long-output"
#: agent-heavy with doubled outputs
MIXES: dict[str, dict[str, tuple]] = {
    "chat-heavy": {
        "chat": (0.8, *CLASSES["chat"][1:]),
        "rag": (0.1, *CLASSES["rag"][1:]),
        "agent": (0.1, *CLASSES["agent"][1:]),
    },
    "long-prompt": {
        "chat": (0.2, *CLASSES["chat"][1:]),
        "rag": (0.7, *CLASSES["rag"][1:]),
        "agent": (0.1, *CLASSES["agent"][1:]),
    },
    "long-output": {k: (v[0], v[1], v[2], 2 * v[3], *v[4:]) for k, v in CLASSES.items()},
}
#: axis -> (config field or "mix"/"rate", values); every point keeps the other axes at base
AXES: dict[str, tuple[str, tuple]] = {
    "cloud_sm": ("cloud_sm_budget", (1.0, 0.5, 0.3, 0.2)),
    "wan_ms": ("wan_ms", (5.0, 30.0, 80.0, 150.0)),
    "backhaul_gbps": ("backhaul_gbps", (0.5, 2.0, 10.0, 100.0)),
    "edge_gpu": ("edge_gpu", ("a10g", "a6000", "a800")),
    "length_mix": ("mix", ("chat-heavy", "long-prompt", "long-output")),
    "rate": ("rate", (0.5, 1.5, 2.5, 3.5)),
}


def points(
    axes: tuple[str, ...] | None = None, only: tuple | None = None
) -> Iterator[tuple[str, object, dict, float, str | None]]:
    """(axis, value, config changes, rate, length mix) for every sweep point (of ``axes``, all
    when None; only the values in ``only`` when given)."""
    for axis in tuple(AXES) if axes is None else axes:
        field, values = AXES[axis]
        for value in values if only is None else [v for v in values if v in only]:
            if field == "rate":
                yield axis, value, {}, float(value), None
            elif field == "mix":
                yield axis, value, {}, BASE_RATE, str(value)
            else:
                yield axis, value, {field: value}, BASE_RATE, None


def run_point(requests: list[EdgeRequest], cfg: EdgeConfig, policies=POLICIES) -> list[dict]:
    """One summary per policy; online's row also carries the paired bootstrap 95% interval
    of its mean-E2E reduction vs the best baseline on the same requests (``gain_lo/hi``, %)."""
    results = {p: simulate(requests, p, cfg) for p in policies}
    rows = [r.summary for r in results.values()]
    base = [p for p in policies if p in BASELINES]
    if "online" in results and base:
        best = min(base, key=lambda p: results[p].summary["mean_e2e"])
        lo, hi = paired_gain_ci(results["online"].requests, results[best].requests)
        results["online"].summary.update(gain_lo=lo, gain_hi=hi)
    return rows


def paired_gain_ci(
    ours: pl.DataFrame, peer: pl.DataFrame, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of 100·(peer mean − ours mean)/peer mean, resampling
    requests in pairs (the same request under both policies), so the noise of the workload
    itself cancels and only the policies' difference is tested."""
    a = ours.sort("rid")["e2e"].to_numpy()
    b = peer.sort("rid")["e2e"].to_numpy()
    idx = np.random.default_rng(seed).integers(0, a.size, size=(resamples, a.size))
    pa, pb = a[idx].mean(axis=1), b[idx].mean(axis=1)
    gains = 100.0 * (pb - pa) / pb
    return float(np.percentile(gains, 2.5)), float(np.percentile(gains, 97.5))


def sweep(
    n: int,
    seed: int,
    model: str = "llama-3-8b",
    axes: tuple[str, ...] | None = None,
    extra: tuple[tuple[str, object, dict, float, str | None], ...] = (),
    only: tuple | None = None,
) -> pl.DataFrame:
    """Every point of the sweep (restricted to the values in ``only`` when given): one row per
    (point, policy) with the replay's summary."""
    rows = []
    for axis, value, changes, rate, mix in (*points(axes, only), *extra):
        cfg = EdgeConfig(model=model).with_(**changes)
        reqs = generate(n, rate, seed, classes=MIXES[mix] if mix else None)
        for s in run_point(reqs, cfg):
            rows.append(dict(model=model, axis=axis, value=str(value), rate=rate, seed=seed, **s))
    return pl.DataFrame(rows)


def versus_best(frame: pl.DataFrame) -> pl.DataFrame:
    """Per point: online vs the best baseline (mean E2E and SLO), and which baseline it was."""
    keys = ["model", "axis", "value", "seed"]
    base = frame.filter(pl.col("policy").is_in(list(BASELINES)))
    best_e2e = (
        base.sort("mean_e2e")
        .group_by(keys, maintain_order=True)
        .first()
        .select(
            *keys, pl.col("policy").alias("best_e2e_policy"), pl.col("mean_e2e").alias("best_e2e")
        )
    )
    best_slo = base.group_by(keys).agg(pl.col("slo").max().alias("best_slo"))
    extra = [pl.col(c) for c in ("gain_lo", "gain_hi") if c in frame.columns]
    online = frame.filter(pl.col("policy") == "online").select(
        *keys,
        pl.col("mean_e2e").alias("online_e2e"),
        pl.col("slo").alias("online_slo"),
        *extra,
        *[pl.col(f"n_{m}") for m in FIXED],
    )
    out = online.join(best_e2e, on=keys).join(best_slo, on=keys)
    return out.with_columns(
        gain_pct=100.0 * (pl.col("best_e2e") - pl.col("online_e2e")) / pl.col("best_e2e"),
        slo_pp=100.0 * (pl.col("online_slo") - pl.col("best_slo")),
    )


def frontier_figure(frame: pl.DataFrame, path=None):
    """Mean E2E of every policy along each axis, and online's mode histogram per point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = list(dict.fromkeys(frame["axis"].to_list()))
    fig, grid = plt.subplots(2, len(axes), figsize=(3.2 * len(axes), 6.2), squeeze=False)
    mean = frame.group_by(["axis", "value", "policy"], maintain_order=True).agg(
        pl.col("mean_e2e").mean(), *[pl.col(f"n_{m}").sum() for m in FIXED]
    )
    for j, axis in enumerate(axes):
        sel = mean.filter(pl.col("axis") == axis)
        values = list(dict.fromkeys(sel["value"].to_list()))
        x = np.arange(len(values))
        ax = grid[0][j]
        for policy in POLICIES:
            ys = [
                sel.filter((pl.col("value") == v) & (pl.col("policy") == policy))["mean_e2e"].item()
                for v in values
            ]
            ax.plot(
                x,
                ys,
                marker="o" if policy == "online" else ".",
                lw=2.5 if policy == "online" else 1,
                label=policy,
            )
        ax.set(yscale="log", title=axis, ylabel="mean E2E (s)" if j == 0 else None)
        ax.set_xticks(x, values, fontsize=7)
        hist = grid[1][j]
        bottom = np.zeros(len(values))
        on = sel.filter(pl.col("policy") == "online")
        for mode in FIXED:
            counts = np.array(
                [on.filter(pl.col("value") == v)[f"n_{mode}"].item() for v in values], dtype=float
            )
            hist.bar(x, counts, bottom=bottom, label=mode)
            bottom += counts
        hist.set_xticks(x, values, fontsize=7)
        hist.set(ylabel="online requests" if j == 0 else None)
    grid[0][0].legend(fontsize=6)
    grid[1][0].legend(fontsize=6)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
