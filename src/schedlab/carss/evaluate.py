"""Measurement procedures behind the experiments and the CLI: rolling forecast evaluation and
co-simulator prediction error.

CARSS (paper 07) claims (1) lower forecasting error than traditional models and (2) a
co-simulator coupled with adaptive forecasting predicts average response time and SLA violation
better (by 11% and 22%) than one with static arrivals. Both are measured here as library calls.
"""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from schedlab.carss.cosim import CoSimulator, TaskPool, horizon_metrics
from schedlab.carss.forecast import make_forecaster
from schedlab.carss.hosts import Hosts
from schedlab.carss.placement import greedy, least_loaded
from schedlab.carss.simulator import Cluster
from schedlab.carss.workloads import Workload
from schedlab.core.errors import BadInputError

LEVELS = (0.1, 0.5, 0.9)
#: quantile grid of the CRPS: CRPS = 2 * mean pinball loss over all levels (Gneiting &
#: Raftery 2007), approximated on 19 levels so log-space forecasts are scored the same way
CRPS_LEVELS = np.linspace(0.05, 0.95, 19)


def crps(fc, truth: np.ndarray) -> float:
    """Mean CRPS of a forecast over its steps (quantile-grid approximation)."""
    loss = 0.0
    for q in CRPS_LEVELS:
        diff = truth - fc.quantile(float(q))
        loss += np.maximum(q * diff, (q - 1) * diff).mean()
    return float(2 * loss / CRPS_LEVELS.size)


def rolling_errors(
    series: np.ndarray,
    names: list[str],
    train: int,
    horizon: int,
    season: int,
    seed: int,
    options: dict[str, dict] | None = None,
) -> pl.DataFrame:
    """Fit each forecaster on ``series[:train]``, then walk forward one interval at a time,
    forecasting ``horizon`` steps and observing the truth. MAE/RMSE of the median forecast,
    mean pinball loss over the 10/50/90% quantiles, CRPS (19-level quantile grid) and the 80%
    interval's coverage; ``cpu_s`` is each forecaster's CPU time (fit + walk). ``options``:
    extra constructor arguments per forecaster name."""
    y = np.asarray(series, dtype=float)
    if train < 1 or train + horizon > y.size:
        raise BadInputError(f"need train >= 1 and train + horizon <= {y.size}", field="train")
    rows = []
    for name in names:
        started = time.process_time()
        model = make_forecaster(name, season=season, seed=seed, **(options or {}).get(name, {}))
        model.fit(y[:train])
        abs_err, sq_err, pinball, inside, crpss = [], [], [], [], []
        for t in range(train, y.size - horizon + 1):
            fc = model.predict(horizon)
            truth = y[t : t + horizon]
            point = fc.point()
            abs_err.append(np.abs(point - truth).mean())
            sq_err.append(((point - truth) ** 2).mean())
            qs = [fc.quantile(q) for q in LEVELS]
            pinball.append(
                np.mean(
                    [
                        np.maximum(q * (truth - v), (q - 1) * (truth - v)).mean()
                        for q, v in zip(LEVELS, qs, strict=True)
                    ]
                )
            )
            inside.append(((truth >= qs[0]) & (truth <= qs[2])).mean())
            crpss.append(crps(fc, truth))
            model.update(y[t])
        rows.append(
            dict(
                forecaster=name,
                mae=float(np.mean(abs_err)),
                rmse=float(np.sqrt(np.mean(sq_err))),
                pinball=float(np.mean(pinball)),
                crps=float(np.mean(crpss)),
                coverage80=float(np.mean(inside)),
                changes_detected=len(getattr(model, "changes", [])),
                fine_tunes=int(getattr(model, "tunes", 0)),
                cpu_s=time.process_time() - started,
            )
        )
    return pl.DataFrame(rows)


def cosim_errors(
    workload: Workload,
    hosts: Hosts,
    history: np.ndarray,
    forecasters: list[str],
    horizon: int,
    samples: int,
    season: int,
    seed: int,
    every: int = 2,
) -> pl.DataFrame:
    """Run the real cluster under least-loaded and, every ``every`` intervals, ask a
    co-simulator per forecaster to predict the next ``horizon`` intervals' average response
    time and SLA-violation rate; compare with what then really happened."""
    rng = np.random.default_rng(seed)
    cluster = Cluster(hosts, workload.interval_s)
    pool = TaskPool()
    sims = {}
    for name in forecasters:
        model = make_forecaster(name, season=season, seed=seed)
        model.fit(np.asarray(history, dtype=float))
        sims[name] = CoSimulator(model, pool, horizon, samples)
    predictions, actual = [], []
    n = len(workload.batches)
    for t in range(n):
        batch = workload.batches[t]
        cluster.admit(batch.copy())
        pool.add(batch)
        for sim in sims.values():
            sim.forecaster.update(float(len(batch)))
        placement = greedy(cluster, least_loaded)
        if t % every == 0 and t + horizon <= n:
            for name, sim in sims.items():
                p = sim.evaluate(cluster, [placement], np.random.default_rng(rng.integers(1 << 31)))
                predictions.append(
                    dict(
                        interval=t,
                        forecaster=name,
                        pred_response_s=p[0].avg_response_s,
                        pred_sla=p[0].sla_rate,
                        pred_energy_j=p[0].energy_j,
                    )
                )
        moved, refused = cluster.apply(placement)
        actual.append(cluster.step(moved, refused))
    truth = {t: horizon_metrics(actual[t : t + horizon]) for t in range(n - horizon + 1)}
    frame = pl.DataFrame(predictions)
    return frame.with_columns(
        pl.col("interval")
        .map_elements(lambda t: truth[t][1], return_dtype=pl.Float64)
        .alias("true_response_s"),
        pl.col("interval")
        .map_elements(lambda t: truth[t][2], return_dtype=pl.Float64)
        .alias("true_sla"),
        pl.col("interval")
        .map_elements(lambda t: truth[t][0], return_dtype=pl.Float64)
        .alias("true_energy_j"),
    )


def summarise_cosim(frame: pl.DataFrame) -> pl.DataFrame:
    """Per forecaster: mean absolute error of predicted response time, SLA rate and energy."""
    return frame.group_by("forecaster", maintain_order=True).agg(
        (pl.col("pred_response_s") - pl.col("true_response_s"))
        .abs()
        .mean()
        .alias("response_mae_s"),
        (pl.col("pred_sla") - pl.col("true_sla")).abs().mean().alias("sla_mae"),
        ((pl.col("pred_energy_j") - pl.col("true_energy_j")).abs() / pl.col("true_energy_j"))
        .mean()
        .alias("energy_mape"),
        pl.len().alias("points"),
    )
