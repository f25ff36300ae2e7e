"""CARSS's headline experiments, registered with ``schedlab reproduce``.

Paper 07 (CARSS) claims: (1) the online adaptive forecasting framework has lower forecasting
errors than traditional models; (2) it reduces the co-simulator's prediction error by 11% in
average response time and 22% in average SLA violation vs static arrivals; (3) CARSS cuts
average energy by 2.5%, response time by 8.2% and SLA violation by 82.7% vs the best baseline
scheduler. Each function below measures one of these on seeded workloads with regime changes
(rate shifts, bursts, a diurnal cycle); targets are the paper's figures.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl

from schedlab.carss.changepoint import BOCPD, detection_scores, offline_changepoints
from schedlab.carss.engine import run
from schedlab.carss.evaluate import cosim_errors, rolling_errors, summarise_cosim
from schedlab.carss.forecast import available_forecasters
from schedlab.carss.hosts import make_hosts
from schedlab.carss.schedulers import BASELINES, make_scheduler
from schedlab.carss.workloads import arrival_series, make_workload, read_arrivals
from schedlab.core.data import data_path
from schedlab.core.errors import BadInputError
from schedlab.core.experiment import Claim, Figure, Result, register

SEASON = 48  # a compressed "day" of 48 intervals
INTERVAL_S = 300.0  # COSCO's 5-minute scheduling interval
LOAD_PER_HOST = 2.6  # mean arrivals per host per interval (moderate congestion, bursts overload)


def _reduction(ours: float, theirs: float) -> float:
    """Percent by which ``ours`` is below ``theirs``; against a baseline at zero (no SLA
    violation at all) any positive figure of ours counts as -100 %."""
    if math.isnan(theirs) or math.isnan(ours):
        return float("nan")
    if theirs <= 0:
        return 0.0 if ours <= 0 else -100.0
    return 100.0 * (1.0 - ours / theirs)


def _threads() -> None:
    import torch

    torch.set_num_threads(1)  # the harness runs seeds in parallel processes


def _traditional(names) -> list[str]:
    return [
        n
        for n in names
        if n not in ("adaptive", "transformer", "lstm", "static", "select", "select-nn")
    ]


def _with_best(frame: pl.DataFrame) -> pl.DataFrame:
    """Name the best traditional model by MAE and by pinball loss on every row."""
    trad = frame.filter(pl.col("forecaster").is_in(_traditional(frame["forecaster"])))
    return frame.with_columns(
        best_traditional=pl.lit(trad.sort("mae")["forecaster"][0]),
        best_traditional_pinball=pl.lit(trad.sort("pinball")["forecaster"][0]),
    )


def _forecast_claims(frame: pl.DataFrame, where: str) -> list[Claim]:
    """Adaptive vs the best traditional model (statsforecast's included) and static replay."""
    mae = dict(zip(frame["forecaster"], frame["mae"], strict=True))
    pin = dict(zip(frame["forecaster"], frame["pinball"], strict=True))
    traditional = _traditional(mae)
    best_mae = min(traditional, key=mae.__getitem__)
    best_pin = min(traditional, key=pin.__getitem__)
    tag = (
        "statsforecast's MSTL/AutoARIMA/AutoETS/AutoTheta included"
        if any(n.startswith("sf-") for n in traditional)
        else "statsforecast not installed"
    )
    return [
        Claim(
            f"Adaptive forecasting has lower MAE than the best traditional model ({where}; "
            f"{tag}; the best is named per seed in the rows)",
            metric=f"MAE reduction vs best traditional model (%), {where}",
            measured=_reduction(mae["adaptive"], mae[best_mae]),
            target=0.0,
            comparison=">",
            paper_figure="lower forecasting error than traditional models",
            figure_metric="MAE (arrivals per interval)",
            baseline=best_mae, our_figure=mae["adaptive"], peer_figure=mae[best_mae],
            lower_is_better=True,
        ),
        Claim(
            f"Adaptive forecasting has lower quantile (pinball) loss than the best traditional "
            f"model ({where}; {tag})",
            metric=f"pinball-loss reduction vs best traditional (%), {where}",
            measured=_reduction(pin["adaptive"], pin[best_pin]),
            target=0.0,
            comparison=">",
            paper_figure="lower forecasting error than traditional models",
            baseline=best_pin,
        ),
        Claim(
            f"Adaptive forecasting beats the static arrival assumption ({where})",
            metric=f"MAE reduction vs static replay (%), {where}",
            measured=_reduction(mae["adaptive"], mae["static"]),
            target=0.0,
            comparison=">",
            paper_figure="static arrival series limits diversity",
            baseline="static replay",
        ),
    ]


@register(
    "carss",
    quick=dict(intervals=260, train=110, horizon=6),
    full=dict(intervals=900, train=300, horizon=8),
)
def forecast_accuracy(intervals: int, train: int, horizon: int, seed: int) -> Result:
    """Arrival forecasting error: adaptive transformer vs traditional models and static replay."""
    _threads()
    series = arrival_series("mixed", intervals, 30.0, seed, season=SEASON)
    frame = rolling_errors(series.counts, available_forecasters(), train, horizon, SEASON, seed)
    frame = _with_best(frame)
    detector = BOCPD(min_gap=12)
    online = [c for v in np.log1p(series.counts) if (c := detector.update(v)) is not None]
    f1_online = detection_scores(online, series.change_points)["f1"]
    f1_offline = detection_scores(offline_changepoints(series.counts), series.change_points)["f1"]
    frame = frame.with_columns(
        pl.lit(f1_online).alias("bocpd_f1"), pl.lit(f1_offline).alias("pelt_f1")
    )
    return Result(
        frame,
        figures=[_bar(frame, "forecaster", "mae", "forecast MAE (arrivals)")],
        claims=_forecast_claims(frame, "seeded series with regime changes"),
        ran_with="seeded generator (regime shifts, bursts, diurnal cycle)",
        data="generated",
    )


def genai_trace() -> Path | None:
    """The Alibaba GenAI request trace when present in the data dir (schedlab.core.data)."""
    path = data_path("alibaba", "genai_lora_request_trace.csv")
    return path if path.is_file() else None


#: forecasters left out of the quick real-trace run (in none of its claims; the full run has
#: them): the un-adapted transformer, the LSTM and the two selecting forecasters, whose
#: comparison on this trace is in ``forecast_selection``
QUICK_SKIPPED = ("transformer", "lstm", "select", "select-nn")


@register(
    "carss",
    quick=dict(intervals=336, train_share=0.35, horizon=6, quick=True),
    full=dict(intervals=0, train_share=0.35, horizon=8, quick=False),
)
def forecast_accuracy_real(
    intervals: int, train_share: float, horizon: int, seed: int, quick: bool = False
) -> Result:
    """The same walk-forward comparison on the real Alibaba GenAI trace (hourly arrivals).

    The trace is fixed, so seeds vary only the neural models' initialisation. ``intervals``
    keeps the first hours (quick: two weeks; 0 = all 553). Without the trace the experiment
    runs on a seeded series of the same length and says so. ``quick`` runs only the
    forecasters its claims compare (adaptive, static replay and every traditional model,
    statsforecast's included) and names the ones it skipped in ``ran_with``.
    """
    _threads()
    path = genai_trace()
    if path is not None:
        counts = read_arrivals(path, "gmt_create", 3600.0).counts
        season, ran_with = 24, f"real trace: {path.name} (Alibaba GenAI), hourly bins"
    else:
        counts = arrival_series("mixed", 553, 48.0, seed, season=24).counts
        season, ran_with = 24, "seeded generator (alibaba/ absent from the data dir)"
    if intervals:
        counts = counts[:intervals]
    train = max(int(train_share * counts.size), 2 * season)
    skipped = QUICK_SKIPPED if quick else ("lstm",)  # the LSTM is costliest and in no claim
    names = [n for n in available_forecasters() if n not in skipped]
    ran_with += f"; not run: {', '.join(skipped)}"
    # quick: AutoARIMA's order search (~6 s a fit) runs once on the training window and the
    # model is applied forward after it (statsforecast's cross-validation with refit=False);
    # full mode refits it every 4 days (fitting every statsforecast model once saved only
    # 2 s more and made AutoETS 26 % worse, so the others keep their daily refits)
    options = {"sf-autoarima": {"refit": 10**6}} if quick else None
    if quick:
        ran_with += "; sf-autoarima fitted once (refit=False), not every 4 days"
    frame = _with_best(rolling_errors(counts, names, train, horizon, season, seed, options))
    return Result(
        frame,
        figures=[_bar(frame, "forecaster", "mae", "forecast MAE, GenAI trace")],
        claims=_forecast_claims(
            frame, "Alibaba GenAI trace" if path else "seeded stand-in for the GenAI trace"
        ),
        ran_with=ran_with,
        data="real" if path is not None else "stand-in",
    )


@register(
    "carss",
    quick=dict(hosts=10, intervals=70, train=100, horizon=6, samples=4),
    full=dict(hosts=50, intervals=300, train=300, horizon=8, samples=8),
)
def cosim_prediction_error(
    hosts: int, intervals: int, train: int, horizon: int, samples: int, seed: int
) -> Result:
    """Co-simulator error on response time and SLA violation: adaptive vs static arrivals."""
    _threads()
    fleet = make_hosts(hosts)
    series = arrival_series("mixed", train + intervals, LOAD_PER_HOST * hosts, seed, season=SEASON)
    workload = make_workload(series.counts[train:], INTERVAL_S, seed + 1)
    points = cosim_errors(
        workload,
        fleet,
        series.counts[:train],
        ["static", "adaptive"],
        horizon,
        samples,
        SEASON,
        seed,
    )
    frame = summarise_cosim(points)
    by = {r["forecaster"]: r for r in frame.iter_rows(named=True)}
    rt = _reduction(by["adaptive"]["response_mae_s"], by["static"]["response_mae_s"])
    sla = _reduction(by["adaptive"]["sla_mae"], by["static"]["sla_mae"])
    return Result(
        frame,
        data="generated",
        claims=[
            Claim(
                "Adaptive forecasting reduces the co-simulator's error on average response time",
                metric="response-time MAE reduction vs static arrivals (%)",
                measured=rt,
                target=11.0,
                paper_figure="11%",
                baseline="static arrivals",
            ),
            Claim(
                "Adaptive forecasting reduces the co-simulator's error on SLA violation",
                metric="SLA-violation MAE reduction vs static arrivals (%)",
                measured=sla,
                target=22.0,
                paper_figure="22%",
                baseline="static arrivals",
            ),
        ],
    )


def scheduling_qos(hosts: int, intervals: int, train: int, samples: int, seed: int) -> Result:
    """Energy, response time and SLA violation: CARSS vs the best baseline scheduler, on the
    seeded synthetic workload (sine-wave demand). Superseded in ``reproduce`` by
    :func:`cosco_qos` (Bitbrains demand, real arrivals); kept callable for comparison with
    the earlier figures: ``scheduling_qos(hosts=8, intervals=48, train=100, samples=2,
    seed=0)``."""
    _threads()
    fleet = make_hosts(hosts)
    series = arrival_series("mixed", train + intervals, LOAD_PER_HOST * hosts, seed, season=SEASON)
    workload = make_workload(series.counts[train:], INTERVAL_S, seed + 1)
    rows = []
    for name in ("carss", "cosim-adaptive", "cosim-static", *BASELINES[1:]):
        scheduler = make_scheduler(
            name, seed=seed, season=SEASON, horizon=4, samples=samples, candidates=1
        )
        rows.append(run(scheduler, workload, fleet, series.counts[:train], seed=seed).summary)
    frame = pl.DataFrame(rows)
    by = {r["scheduler"]: r for r in rows}
    claims = [
        Claim(
            "Every scheduler accounts for every task (completed + unfinished = arrived)",
            metric="schedulers conserving tasks",
            required=True,
            kind="sanity",
            measured=float(sum(r["completed"] + r["unfinished"] == r["arrived"] for r in rows)),
            target=float(len(rows)),
            comparison="==",
        )
    ]
    for metric, label, paper in (
        ("avg_energy_kwh_per_interval", "average energy", 2.5),
        ("avg_response_s", "average response time", 8.2),
        ("sla_violation_rate", "average SLA violation", 82.7),
    ):
        best = min(BASELINES, key=lambda b, m=metric: by[b][m])
        frame = frame.with_columns(pl.lit(best).alias(f"best_baseline_{metric}"))
        claims.append(
            Claim(
                f"CARSS reduces {label} vs the best baseline scheduler (best per seed and metric)",
                metric=f"{label} reduction vs best baseline (%)",
                measured=_reduction(by["carss"][metric], by[best][metric]),
                target=paper,
                paper_figure=f"{paper}%",
                figure_metric=metric,
                baseline=best, our_figure=by["carss"][metric], peer_figure=by[best][metric],
                lower_is_better=True,
            )
        )
    others = [b for b in BASELINES if not b.startswith("cosim")]
    for metric, label, paper in (
        ("avg_response_s", "average response time", 8.2),
        ("sla_violation_rate", "average SLA violation", 82.7),
    ):
        best = min(others, key=lambda b, m=metric: by[b][m])
        claims.append(
            Claim(
                f"CARSS reduces {label} vs the best baseline that does not co-simulate "
                "(GOBI, EDF and other heuristics)",
                metric=f"{label} reduction vs best non-co-simulating (%)",
                measured=_reduction(by["carss"][metric], by[best][metric]),
                target=paper,
                paper_figure=f"{paper}%",
                figure_metric=metric,
                baseline=best, our_figure=by["carss"][metric], peer_figure=by[best][metric],
                lower_is_better=True,
            )
        )
    return Result(
        frame,
        figures=[_bar(frame, "scheduler", "avg_response_s", "average response time (s)")],
        claims=claims,
        data="generated",
    )


def _bar(frame: pl.DataFrame, label: str, value: str, title: str) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.bar(frame[label].to_list(), frame[value].to_list())
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=45)
    return Figure.from_matplotlib(fig, f"{value}-by-{label}", title)


# --- COSCO's setting: Bitbrains demand, COSCO's fleet, real arrivals -----------------------

#: COSCO's arrival rate: 5 new containers per interval for 50 hosts
COSCO_RATE_PER_HOST = 0.1
#: the co-simulating variants of the forecast ablation (all with the forecast-driven actions)
ABLATION = ("cosim-none", "cosim-static", "cosim-ets", "cosim-mstl", "cosim-adaptive", "carss")


def cosco_setting(hosts: int, intervals: int, train: int, seed: int):
    """(workload, fleet, history, sampler, where) for COSCO's setting: Bitbrains VM demand
    traces (BWGD2), COSCO's Azure fleet and power tables, and arrivals from the Alibaba GenAI
    trace at 5-min bins scaled to COSCO's 0.1 per host per interval; the seed picks the window
    of the trace and the tasks. Seeded stand-ins are used (and named) for absent data."""
    from schedlab.carss.bitbrains import (
        bitbrains_dir,
        bitbrains_workload,
        read_vm_traces,
        sampler_for,
        seeded_vm_traces,
    )
    from schedlab.carss.hosts import COSCO_FLEET

    fleet = make_hosts(hosts, COSCO_FLEET)
    path = genai_trace()
    rng = np.random.default_rng(seed)
    if path is not None:
        counts = read_arrivals(path, "gmt_create", INTERVAL_S).counts.astype(float)
        # the trace has quiet days (57 % of 5-min bins are empty): draw windows whose
        # scheduled part is at least as busy as the trace on average
        for _ in range(1000):
            start = int(rng.integers(0, counts.size - train - intervals))
            window = counts[start : start + train + intervals]
            if window[train:].mean() >= counts.mean():
                break
        arrivals = f"Alibaba GenAI trace, 5-min bins from interval {start}"
    else:
        window = arrival_series("mixed", train + intervals, 5.0, seed, season=288).counts
        arrivals = "seeded arrivals (alibaba/ absent from the data dir)"
    scaled = window * (COSCO_RATE_PER_HOST * hosts) / max(window[train:].mean(), 1e-9)
    window = np.diff(np.floor(np.cumsum(scaled)), prepend=0.0)  # integers, same total
    directory = bitbrains_dir()
    if directory is not None:
        traces = read_vm_traces(directory)
        demand = f"Bitbrains Rnd VM demand ({len(traces)} VMs)"
    else:
        traces = seeded_vm_traces(seed)
        demand = f"seeded VM demand ({len(traces)} VMs; bitbrains/ absent from the data dir)"
    workload = bitbrains_workload(window[train:], traces, INTERVAL_S, seed + 1)
    real = directory is not None and path is not None
    where = f"{'real data: ' if real else ''}{demand} + {arrivals}"
    return workload, fleet, window[:train], sampler_for(workload, traces), where


def _compare(names, hosts, intervals, train, samples, offline, drain, seed):
    workload, fleet, history, sampler, where = cosco_setting(hosts, intervals, train, seed)
    rows = []
    for name in names:
        scheduler = make_scheduler(
            name,
            seed=seed,
            season=288,
            horizon=4,
            samples=samples,
            candidates=1,
            actions=True,
            task_source=sampler,
            offline=offline,
        )
        summary = run(scheduler, workload, fleet, history, seed=seed, drain=drain).summary
        summary["cost"] = summary["energy_kwh"] / max(summary["completed"], 1)
        rows.append(summary)
    return pl.DataFrame(rows), {r["scheduler"]: r for r in rows}, where


def _conserving(rows: dict) -> Claim:
    return Claim(
        "(sanity check: the simulator's invariant, not evidence) Every scheduler accounts for "
        "every task (completed + unfinished = arrived)",
        metric="schedulers conserving tasks",
        paper_figure="(sanity check, not evidence)",
        required=True,
        kind="sanity",
        measured=float(
            sum(r["completed"] + r["unfinished"] == r["arrived"] for r in rows.values())
        ),
        target=float(len(rows)),
        comparison="==",
    )


@register(
    "carss",
    quick=dict(hosts=8, intervals=8, train=300, samples=1, offline=20, drain=24),
    full=dict(hosts=20, intervals=60, train=300, samples=2, offline=200, drain=40),
)
def cosco_qos(
    hosts: int, intervals: int, train: int, samples: int, offline: int, drain: int, seed: int
) -> Result:
    """COSCO's setting (Bitbrains demand, COSCO's fleet, real GenAI arrivals): COSCO's nine
    baselines (does GOBI beat least-loaded, as COSCO reports?), CARSS vs the best baseline,
    and the forecast ablation (no forecast / static / ETS / MSTL / adaptive / + GRU)."""
    _threads()
    from schedlab.carss.schedulers import COSCO_BASELINES

    baselines = ("least-loaded", "pack-sleep", *COSCO_BASELINES)
    names = (*baselines, "gobi-ll", *ABLATION)
    frame, by, where = _compare(names, hosts, intervals, train, samples, offline, drain, seed)
    claims = [_conserving(by)]
    for metric, label in (
        ("avg_response_s", "average response time"),
        ("avg_energy_kwh_per_interval", "average energy"),
        ("sla_violation_rate", "SLA violation"),
    ):
        claims.append(
            Claim(
                f"GOBI (COSCO's, random start for new containers) has lower {label} than "
                "least-loaded on Bitbrains + GenAI arrivals (COSCO reports GOBI ahead)",
                metric=f"GOBI's {label} reduction vs least-loaded (%)",
                measured=_reduction(by["gobi"][metric], by["least-loaded"][metric]),
                target=0.0,
                comparison=">",
                paper_figure="GOBI best among COSCO's baselines",
                kind="sanity",  # the baseline is as strong as its own paper says
            )
        )
    for metric, label, paper in (
        ("avg_energy_kwh_per_interval", "average energy", 2.5),
        ("avg_response_s", "average response time", 8.2),
        ("sla_violation_rate", "average SLA violation", 82.7),
    ):
        pool = (*baselines, "gobi-ll", "cosim-static")
        best = min(pool, key=lambda b, m=metric: by[b][m])
        frame = frame.with_columns(pl.lit(best).alias(f"best_baseline_{metric}"))
        claims.append(
            Claim(
                f"CARSS reduces {label} vs the best baseline (COSCO's nine, least-loaded, "
                "pack-sleep, static co-simulation; best per seed and metric), Bitbrains + GenAI",
                metric=f"{label} reduction vs best baseline (%)",
                measured=_reduction(by["carss"][metric], by[best][metric]),
                target=paper,
                paper_figure=f"{paper}%",
                figure_metric=metric,
                baseline=best, our_figure=by["carss"][metric], peer_figure=by[best][metric],
                lower_is_better=True,
            )
        )
    return Result(
        frame,
        claims=claims,
        ran_with=where,
        data="real" if where.startswith("real data") else "stand-in",
        figures=[
            _bar(
                frame, "scheduler", "avg_response_s", "average response time (s), Bitbrains + GenAI"
            )
        ],
    )


# --- issue 54: decisions that depend on the forecast, regret vs an oracle -----------------

#: forecasters the provisioning decision is run with (ours first); the oracle knows the truth
PROVISION_FORECASTERS = ("select", "sf-mstl", "seasonal-naive", "last-value", "static")


@register(
    "carss",
    quick=dict(hosts=8, intervals=16, train=300, drain=24),
    full=dict(hosts=20, intervals=60, train=300, drain=40),
)
def forecast_provisioning(hosts: int, intervals: int, train: int, drain: int, seed: int) -> Result:
    """How many hosts to keep awake and where to place arriving containers, from forecast
    quantiles over the horizon (carss/provision.py), in COSCO's setting (Bitbrains demand,
    COSCO's fleet, GenAI arrivals). Yardstick: regret of the run's objective vs an oracle that
    applies the same rule to the true future arrivals; whether the host count chosen from the
    same state changes with the forecaster (shadow forecasters, same arrivals)."""
    _threads()
    from schedlab.carss.provision import Provisioner, run_objective

    workload, fleet, history, _, where = cosco_setting(hosts, intervals, train, seed)
    rows, logs = [], None
    runs = [("oracle", Provisioner(oracle=workload, seed=seed))]
    for name in PROVISION_FORECASTERS:
        shadows = PROVISION_FORECASTERS[1:] if name == "select" else ()
        runs.append((name, Provisioner(name, seed=seed, shadows=shadows)))
    runs.append(("select (median only, q=0.5)", Provisioner("select", seed=seed, quantile=0.5)))
    runs.append(("least-loaded (all awake)", make_scheduler("least-loaded", seed=seed)))
    for label, scheduler in runs:
        report = run(scheduler, workload, fleet, history, seed=seed, drain=drain)
        summary = dict(report.summary, scheduler=label)
        summary["objective"] = run_objective(report.intervals, fleet, INTERVAL_S)
        rows.append(summary)
        if label == "select":
            logs = pl.DataFrame(scheduler.log)
    oracle = rows[0]["objective"]
    for r in rows:
        r["regret_pct"] = 100.0 * (r["objective"] - oracle) / oracle
    frame = pl.DataFrame(rows)
    by = {r["scheduler"]: r for r in rows}
    differs = {n: float((logs[n] != logs["hosts"]).mean()) for n in PROVISION_FORECASTERS[1:]}
    gap = {n: float((logs[n] - logs["hosts"]).abs().mean()) for n in PROVISION_FORECASTERS[1:]}
    frame = frame.with_columns(
        *[pl.lit(differs[n]).alias(f"share_decisions_differ_vs_{n}") for n in differs],
        *[pl.lit(gap[n]).alias(f"mean_host_gap_vs_{n}") for n in gap],
    )
    others = [n for n in PROVISION_FORECASTERS[1:]]
    best_other = min(others, key=lambda n: by[n]["objective"])
    claims = [
        _conserving(by),
        Claim(
            "Provisioning from forecast quantiles with the selecting forecaster stays within 5 % "
            "of an oracle that knows the future arrivals (regret of the run's objective)",
            metric="regret vs oracle (%), objective = energy/peak + task-s/host-interval + late",
            measured=by["select"]["regret_pct"],
            target=5.0,
            comparison="<=",
            paper_figure="(issue 54's yardstick: regret vs an oracle)",
            baseline="oracle (same rule, true arrivals)",
            our_figure=by["select"]["objective"], peer_figure=oracle, lower_is_better=True,
            figure_metric="run objective",
        ),
        Claim(
            "The selecting forecaster's provisioning has no more regret than the best of the "
            "other forecasters (MSTL, seasonal naive, last value, static replay) on the same rule",
            metric="regret vs oracle (%): ours minus the best other forecaster's",
            measured=by["select"]["regret_pct"] - by[best_other]["regret_pct"],
            target=0.0,
            comparison="<=",
            baseline=best_other,
            our_figure=by["select"]["objective"], peer_figure=by[best_other]["objective"],
            lower_is_better=True, figure_metric="run objective",
        ),
        Claim(
            "The host count chosen from the same state changes with the forecaster (static "
            "replay vs ours: share of intervals with a different choice)",
            metric="share of decisions that differ, select vs static replay",
            measured=differs["static"],
            target=0.0,
            comparison=">",
            paper_figure="(issue 54: MSTL and adaptive picked the same candidate 30/30)",
            baseline="static",
        ),
        Claim(
            "Forecast-quantile provisioning has response time no worse than least-loaded "
            "(which keeps every host awake)",
            metric="average response time reduction vs least-loaded (%)",
            measured=_reduction(by["select"]["avg_response_s"],
                                by["least-loaded (all awake)"]["avg_response_s"]),
            target=0.0,
            comparison=">=",
            baseline="least-loaded",
            our_figure=by["select"]["avg_response_s"],
            peer_figure=by["least-loaded (all awake)"]["avg_response_s"],
            lower_is_better=True, figure_metric="average response time (s)",
        ),
    ]
    return Result(
        frame,
        claims=claims,
        ran_with=where,
        data="real" if where.startswith("real data") else "stand-in",
        figures=[_bar(frame, "scheduler", "regret_pct", "regret vs oracle (%)")],
    )


# --- issue 54: a forecaster never worse than the best statsforecast model by more than noise

#: Bitbrains VMs looked at while designing the selecting forecaster; the experiment holds
#: them out and evaluates on the others
SELECTION_DEV_VMS = ("9", "21")
#: statsforecast's models (and its SeasonalNaive, which our seasonal-naive equals): the peers
SF_PEERS = ("sf-mstl", "sf-autoets", "sf-autotheta", "sf-autoarima", "seasonal-naive")


def _hourly(values: np.ndarray) -> np.ndarray:
    n = values.size // 12 * 12
    return values[:n].reshape(-1, 12).mean(axis=1)


@register(
    "carss",
    quick=dict(vms=1, hours=240, horizon=6, genai=False),
    full=dict(vms=6, hours=0, horizon=6, genai=True),
)
def forecast_selection(vms: int, hours: int, horizon: int, genai: bool, seed: int) -> Result:
    """The selecting forecaster (change detection + model choice among statsforecast's models
    + calibrated quantiles, carss/selector.py) vs each statsforecast model run side by side on
    the same walk-forward protocol: held-out Bitbrains VMs (hourly mean CPU usage, season one
    day, half of each trace to fit) and, in full mode, the GenAI arrivals (hourly). Quick: one
    held-out VM per seed, its first ``hours`` hours; full: the first ``vms`` held-out VMs."""
    _threads()
    from schedlab.carss.bitbrains import bitbrains_dir, read_vm_trace
    from schedlab.carss.statsforecast import available

    if not available():
        raise BadInputError(
            "forecast_selection compares with statsforecast; pip install 'schedlab[forecast]'",
            field="statsforecast",
        )
    directory = bitbrains_dir()
    series: list[tuple[str, np.ndarray, str]] = []
    if directory is not None:
        files = sorted(
            (p for p in Path(directory).glob("*.csv*") if p.name.split(".")[0] not in
             SELECTION_DEV_VMS),
            key=lambda p: int(p.name.split(".")[0]),
        )
        chosen = [files[seed % len(files)]] if vms == 1 else files[:vms]
        for path in chosen:
            y = _hourly(read_vm_trace(path).usage_mhz)
            series.append((f"vm-{path.name.split('.')[0]}", y[:hours] if hours else y, "real"))
    else:
        for k in range(vms):
            y = arrival_series("mixed", hours or 692, 300.0, seed + k, season=24).counts
            series.append((f"seeded-{seed + k}", y.astype(float), "stand-in"))
    if genai and (path := genai_trace()) is not None:
        series.append(("genai", read_arrivals(path, "gmt_create", 3600.0).counts, "real"))
    names = [*SF_PEERS, "select"] + (["select-nn"] if genai else [])
    frames = []
    for label, y, kind in series:
        frame = rolling_errors(y, names, y.size // 2, horizon, 24, seed)
        frames.append(frame.with_columns(series=pl.lit(label), data=pl.lit(kind)))
    frame = pl.concat(frames)
    claims, rows = [], []
    for metric in ("mae", "crps"):
        gaps = []
        for label, *_ in series:
            part = frame.filter(pl.col("series") == label)
            value = dict(zip(part["forecaster"], part[metric], strict=True))
            best = min(SF_PEERS, key=value.__getitem__)
            gap = 100.0 * (value["select"] / value[best] - 1.0)
            gaps.append(gap)
            rows.append(dict(series=label, metric=metric, best_statsforecast=best, gap_pct=gap))
        vm_gaps = [g for (label, *_), g in zip(series, gaps, strict=True) if label != "genai"]
        claims.append(
            Claim(
                f"The selecting forecaster is best or within 5 % of the best statsforecast model "
                f"on {metric.upper()} (held-out Bitbrains VMs: share of VMs)",
                metric=f"share of held-out VMs with {metric.upper()} <= 1.05 x best statsforecast",
                measured=float(np.mean([g <= 5.0 for g in vm_gaps])),
                target=0.5,
                comparison=">",
                paper_figure="(issue 54: never worse than the best statsforecast model)",
                baseline="best statsforecast model per VM",
            )
        )
        claims.append(
            Claim(
                f"Mean {metric.upper()} gap of the selecting forecaster to the best statsforecast "
                "model per held-out VM (%)",
                metric=f"{metric.upper()} vs best statsforecast model per VM (% above)",
                measured=float(np.mean(vm_gaps)),
                target=5.0,
                comparison="<=",
                baseline="best statsforecast model per VM",
            )
        )
        if genai and any(label == "genai" for label, *_ in series):
            claims.append(
                Claim(
                    f"The selecting forecaster is within 5 % of the best statsforecast model on "
                    f"{metric.upper()}, GenAI arrivals (hourly)",
                    metric=f"{metric.upper()} vs best statsforecast model (% above), GenAI",
                    measured=gaps[-1],
                    target=5.0,
                    comparison="<=",
                    baseline="best statsforecast model",
                )
            )
    real = all(kind == "real" for _, _, kind in series)
    gap_table = pl.DataFrame(rows).pivot("metric", index="series", values="gap_pct")
    frame = frame.join(
        gap_table.rename({"mae": "select_mae_gap_pct", "crps": "select_crps_gap_pct"}),
        on="series",
    )
    return Result(
        frame,
        claims=claims,
        ran_with=", ".join(label for label, *_ in series)
        + f" (held out; {', '.join(SELECTION_DEV_VMS)} were used while designing)",
        data="real" if real else "stand-in",
        figures=[_bar(frame.filter(pl.col("series") == series[0][0]), "forecaster", "crps",
                      f"CRPS, {series[0][0]}")],
    )
