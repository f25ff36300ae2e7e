"""``schedlab carss ...``: forecast arrivals, simulate a scheduler, compare schedulers.

CARSS (paper 07). Every command is one library call; ``--json`` prints one JSON document on
stdout; progress and logs go to stderr. PyTorch is imported only by commands that need it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import ConfigError

app = typer.Typer(
    help="CARSS: co-simulated adaptive scheduling with online arrival forecasting.",
    no_args_is_help=True,
    add_completion=False,
)

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


def _series(
    trace: Path | None,
    column: str,
    interval_s: float,
    seed: int | None,
    intervals: int,
    base: float,
) -> tuple:
    """(counts, true change points or None, label) from a trace or a seeded generator."""
    from schedlab.carss.workloads import arrival_series, read_arrivals

    if (trace is None) == (seed is None):
        raise ConfigError("give exactly one of --trace FILE or --seed N", field="trace/seed")
    if trace is not None:
        got = read_arrivals(trace, column, interval_s)
        return got.counts, None, str(trace)
    gen = arrival_series("mixed", intervals, base, seed)
    return gen.counts, list(gen.change_points), f"seeded mixed arrivals (seed {seed})"


@app.command()
@handle_errors
def forecast(
    trace: Path = typer.Option(None, "--trace", help="CSV/Parquet with a timestamp column."),
    column: str = typer.Option("timestamp", "--column", "-c", help="Timestamp column."),
    interval_s: float = typer.Option(3600.0, "--interval", help="Seconds per interval."),
    seed: int = typer.Option(None, "--seed", help="Use seeded arrivals instead of a trace."),
    intervals: int = typer.Option(300, "--intervals", min=40, help="Seeded series length."),
    forecaster: str = typer.Option("adaptive", "--forecaster", "-f", help="Forecaster name."),
    horizon: int = typer.Option(8, "--horizon", min=1, max=8, help="Intervals ahead."),
    season: int = typer.Option(24, "--season", min=2, help="Intervals per day/season."),
    plot: Path = typer.Option(Path("carss-forecast.png"), "--plot", help="Figure to write."),
    json_out: bool = JSON,
) -> None:
    """Fit on the series, print the next HORIZON intervals with an 80% band, and the change
    points found online (BOCPD, as the forecaster saw them) and offline (ruptures PELT)."""
    import torch

    from schedlab.carss.changepoint import offline_changepoints
    from schedlab.carss.forecast import make_forecaster
    from schedlab.carss.plots import forecast_figure

    torch.set_num_threads(1)
    counts, truth, label = _series(trace, column, interval_s, seed, intervals, 30.0)
    if counts.size < 40:
        raise ConfigError(
            f"only {counts.size} intervals; use a shorter --interval", field="interval"
        )
    model = make_forecaster(forecaster, season=season, seed=0)
    train = max(32, counts.size // 3)
    model.fit(counts[:train])
    for value in counts[train:]:
        model.update(float(value))
    fc = model.predict(horizon)
    doc = dict(
        source=label,
        intervals=int(counts.size),
        forecaster=forecaster,
        mean=fc.point().tolist(),
        p10=fc.quantile(0.1).tolist(),
        p90=fc.quantile(0.9).tolist(),
        online_changes=list(getattr(model, "changes", [])),
        offline_changes=offline_changepoints(counts),
        true_changes=truth,
        plot=str(plot),
    )
    forecast_figure(counts, fc, doc["online_changes"], doc["offline_changes"], plot)
    if json_out:
        emit_json(doc)
        return
    out_console.print(f"{label}: {counts.size} intervals; next {horizon} ({forecaster}):")
    for h, (m, lo, hi) in enumerate(zip(doc["mean"], doc["p10"], doc["p90"], strict=True), 1):
        out_console.print(f"  t+{h}: {m:8.1f}   [{lo:.1f}, {hi:.1f}]")
    out_console.print(f"online change points: {doc['online_changes']}")
    out_console.print(f"offline change points: {doc['offline_changes']}")
    err_console.print(f"plot written to {plot}")


@app.command("compare-forecasters")
@handle_errors
def compare_forecasters(
    trace: Path = typer.Option(None, "--trace", help="CSV/Parquet with a timestamp column."),
    column: str = typer.Option("timestamp", "--column", "-c", help="Timestamp column."),
    interval_s: float = typer.Option(3600.0, "--interval", help="Seconds per interval."),
    seed: int = typer.Option(None, "--seed", help="Use seeded arrivals instead of a trace."),
    intervals: int = typer.Option(300, "--intervals", min=40, help="Seeded series length."),
    forecaster: list[str] = typer.Option(
        None, "--forecaster", "-f", help="Forecasters to compare (default: all)."
    ),
    horizon: int = typer.Option(6, "--horizon", min=1, max=8),
    train: float = typer.Option(
        0.35,
        "--train",
        min=0.05,
        max=0.9,
        help="Share of the series used to fit before walking forward.",
    ),
    season: int = typer.Option(24, "--season", min=2, help="Intervals per day/season."),
    json_out: bool = JSON,
) -> None:
    """Walk-forward forecast errors (MAE, RMSE, pinball, 80% coverage) of every forecaster."""
    import torch

    from schedlab.carss.evaluate import rolling_errors
    from schedlab.carss.forecast import available_forecasters

    torch.set_num_threads(1)
    counts, _, label = _series(trace, column, interval_s, seed, intervals, 30.0)
    names = forecaster or available_forecasters()
    err_console.print(f"{label}: {counts.size} intervals; comparing {', '.join(names)}")
    frame = rolling_errors(counts, names, int(counts.size * train), horizon, season, 0)
    if json_out:
        emit_json(frame.to_dicts())
        return
    out_console.print(frame)


@app.command("cosim-error")
@handle_errors
def cosim_error(
    trace: Path = typer.Option(None, "--trace", help="Real arrivals (timestamp column)."),
    column: str = typer.Option("timestamp", "--column", "-c"),
    scale: float = typer.Option(1.0, "--scale", min=0.0, help="Multiply trace arrivals."),
    start: int = typer.Option(0, "--start", min=0, help="First trace interval to use."),
    seed: int = typer.Option(0, "--seed", help="Seed (workload tasks; arrivals if no trace)."),
    hosts: int = typer.Option(10, "--hosts", min=1),
    intervals: int = typer.Option(70, "--intervals", min=8),
    train: int = typer.Option(100, "--train", min=32, help="History intervals for forecasters."),
    horizon: int = typer.Option(6, "--horizon", min=1, max=8),
    samples: int = typer.Option(4, "--samples", min=1),
    season: int = typer.Option(48, "--season", min=2, help="Intervals per day/season."),
    json_out: bool = JSON,
) -> None:
    """Co-simulator prediction error (response time, SLA, energy): static vs adaptive arrivals."""
    import torch

    from schedlab.carss.evaluate import cosim_errors, summarise_cosim
    from schedlab.carss.hosts import make_hosts
    from schedlab.carss.workloads import (
        arrival_series,
        make_workload,
        read_arrivals,
        scale_counts,
    )

    torch.set_num_threads(1)
    if trace is not None:
        counts = read_arrivals(trace, column, 300.0).counts[start:]
        if counts.size < train + intervals:
            raise ConfigError(
                f"trace has {counts.size} intervals after --start; need --train + --intervals",
                field="intervals",
            )
        counts = scale_counts(counts[: train + intervals], scale)
        _need_arrivals(counts[train:], scale)
    else:
        counts = arrival_series("mixed", train + intervals, 3.2 * hosts, seed, season=season).counts
    workload = make_workload(counts[train : train + intervals], 300.0, seed + 1)
    points = cosim_errors(
        workload,
        make_hosts(hosts),
        counts[:train],
        ["static", "adaptive"],
        horizon,
        samples,
        season,
        seed,
    )
    frame = summarise_cosim(points)
    if json_out:
        emit_json(frame.to_dicts())
        return
    out_console.print(frame)


@app.command()
@handle_errors
def simulate(
    scheduler: list[str] = typer.Option(
        ["carss"], "--scheduler", "-s", help="Scheduler name (repeat to compare)."
    ),
    hosts: int = typer.Option(20, "--hosts", min=1),
    intervals: int = typer.Option(60, "--intervals", min=1),
    train: int = typer.Option(100, "--train", min=32, help="History intervals for forecasters."),
    load: float = typer.Option(2.6, "--load", min=0.01, help="Arrivals per host per interval."),
    trace: Path = typer.Option(None, "--trace", help="Use a real arrival trace (timestamps)."),
    column: str = typer.Option("timestamp", "--column", "-c"),
    scale: float = typer.Option(1.0, "--scale", min=0.0, help="Multiply trace arrivals."),
    start: int = typer.Option(0, "--start", min=0, help="First trace interval to use."),
    season: int = typer.Option(48, "--season", min=2, help="Intervals per day (288 = 5-min)."),
    seed: int = typer.Option(0, "--seed"),
    bitbrains: Path = typer.Option(
        None,
        "--bitbrains",
        help="Directory of Bitbrains VM traces (*.csv[.gz]): task demand as in COSCO's BWGD2.",
    ),
    fleet_name: str = typer.Option(
        "cloudsim",
        "--fleet",
        help="cloudsim or cosco (COSCO's Azure B2s/B4ms/B8ms fleet and power tables).",
    ),
    actions: bool = typer.Option(
        False,
        "--actions",
        help="Co-simulating schedulers may also sleep/wake hosts, defer and migrate pre-emptively.",
    ),
    drain: int = typer.Option(12, "--drain", min=0, help="Intervals without arrivals at the end."),
    out: Path = typer.Option(None, "--out", help="Per-interval results (.parquet/.csv)."),
    json_out: bool = JSON,
) -> None:
    """Run schedulers on the same workload and print energy, response time, SLA violation."""
    import polars as pl
    import torch

    from schedlab.carss.engine import run
    from schedlab.carss.hosts import make_hosts
    from schedlab.carss.schedulers import make_scheduler
    from schedlab.carss.workloads import (
        arrival_series,
        make_workload,
        read_arrivals,
        scale_counts,
    )
    from schedlab.core.io import write_frame

    torch.set_num_threads(1)
    if trace is not None:
        counts = read_arrivals(trace, column, 300.0).counts[start:]
        if counts.size < train + 1:
            raise ConfigError(f"trace has {counts.size} intervals; need > --train", field="train")
        counts = scale_counts(counts[: train + intervals], scale)
        _need_arrivals(counts[train:], scale)
    else:
        counts = arrival_series(
            "mixed", train + intervals, load * hosts, seed, season=season
        ).counts
    from schedlab.carss.hosts import CLOUDSIM_FLEET, COSCO_FLEET

    fleets = {"cloudsim": CLOUDSIM_FLEET, "cosco": COSCO_FLEET}
    if fleet_name not in fleets:
        raise ConfigError(f"unknown fleet '{fleet_name}'; valid: cloudsim, cosco", field="fleet")
    fleet = make_hosts(hosts, fleets[fleet_name])
    sampler = None
    if bitbrains is not None:
        from schedlab.carss.bitbrains import bitbrains_workload, read_vm_traces, sampler_for

        vms = read_vm_traces(bitbrains)
        workload = bitbrains_workload(counts[train:], vms, 300.0, seed + 1)
        sampler = sampler_for(workload, vms)
    else:
        workload = make_workload(counts[train:], 300.0, seed + 1)
    rows, frames = [], []
    for name in scheduler:
        policy = make_scheduler(
            name, seed=seed, season=season, actions=actions, task_source=sampler
        )
        err_console.print(f"simulating {name} on {hosts} hosts, {len(workload.batches)} intervals")
        report = run(policy, workload, fleet, counts[:train], seed=seed, drain=drain)
        rows.append(report.summary)
        _warn_overload(name, report.summary)
        frames.append(report.intervals.with_columns(pl.lit(name).alias("scheduler")))
    if out is not None:
        write_frame(pl.concat(frames), out)
    if json_out:
        emit_json(rows)
        return
    from rich.table import Table

    keys = [
        "scheduler",
        "energy_kwh",
        "avg_response_s",
        "sla_violation_rate",
        "migrations",
        "avg_scheduling_s",
    ]
    table = Table(*keys)
    for row in rows:
        table.add_row(
            *[f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k]) for k in keys]
        )
    out_console.print(table)


def _need_arrivals(window, scale: float) -> None:
    """A simulated window without a single task has no response time to report."""
    if int(window.sum()) == 0:
        raise ConfigError(
            f"the trace window after --train has no arrivals at --scale {scale:g};"
            " nothing to schedule (use a larger --scale or another --start)",
            field="scale",
        )


#: above this share of SLA-violating tasks a run is reported as overloaded
OVERLOAD_SLA = 0.5


def _warn_overload(name: str, summary: dict) -> None:
    """One stderr line when the cluster could not keep up: results then measure the backlog."""
    unfinished, completed = int(summary.get("unfinished", 0)), int(summary.get("completed", 0))
    sla = float(summary.get("sla_violation_rate", 0.0))
    if unfinished and not completed:
        err_console.print(
            f"warning: {name}: no task finished before the run ended ({unfinished:,} "
            "unfinished; response time is undefined): the run is shorter than the tasks' "
            "lifetimes, add --drain N or more --intervals"
        )
    elif unfinished or sla > OVERLOAD_SLA:
        err_console.print(
            f"warning: {name}: the cluster is overloaded ({unfinished:,} of "
            f"{unfinished + completed:,} tasks unfinished, SLA violation {sla:.0%}); lower "
            "--scale/--load or add --hosts"
        )


@app.command("list")
@handle_errors
def list_names(json_out: bool = JSON) -> None:
    """List schedulers, forecasters, change-point detectors and host models."""
    from schedlab.carss.changepoint import DETECTORS
    from schedlab.carss.forecast import FORECASTERS
    from schedlab.carss.hosts import HOST_MODELS
    from schedlab.carss.schedulers import ABLATIONS, SCHEDULERS

    doc = dict(
        schedulers=[*SCHEDULERS, *ABLATIONS],
        forecasters=list(FORECASTERS),
        detectors=list(DETECTORS),
        host_models=list(HOST_MODELS),
    )
    if json_out:
        emit_json(doc)
        return
    for key, names in doc.items():
        out_console.print(f"{key}: {', '.join(names)}")
