"""``schedlab harp ...``: estimate, compare schedules, sweep designs (HARP, 16-harp.md).

Every command is one library call; progress and errors go to stderr, ``--json`` prints one
JSON document on stdout.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import typer
from rich.table import Table

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import ConfigError

app = typer.Typer(
    name="harp",
    help="HARP: map and schedule transformers on analog CIM + digital accelerators.",
    no_args_is_help=True,
    add_completion=False,
)

MODEL_HELP = "Built-in model name (see `models`) or a JSON model config file."
ARCH_HELP = "Architecture JSON file (partial files override the defaults)."
CAL_HELP = ("Published parameters to start from: isaac | puma | mnsim, or a calibration .toml "
            "(--arch then overrides them).")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Send whatever the solvers print (Python or C level) to stderr, so ``--json`` stays one
    document on stdout."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real fd 1 (embedded); the Python-level redirect still applies
        saved = None
    try:
        if saved is not None:
            os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"expected comma-separated integers, got {text!r}",
                          field=name) from None
    if not values or min(values) < 1:
        raise ConfigError("needs at least one positive integer", field=name)
    return values


@app.command()
@handle_errors
def estimate(
    model: str = typer.Option("bert-base", "--model", "-m", help=MODEL_HELP),
    arch: Path = typer.Option(None, "--arch", help=ARCH_HELP),
    calibration: str = typer.Option(None, "--calibration", help=CAL_HELP),
    strategy: str = typer.Option("latency", "--strategy", help="latency | area | balanced"),
    scheduler: str = typer.Option("harp", "--scheduler",
                                  help="harp | harp-vector | single-vector | non-pipelined | "
                                       "mnsim-pipeline | mnsim-nopipe"),
    method: str = typer.Option("estimate", "--method", help="estimate | simulate"),
    solver: str = typer.Option("auto", "--solver", help="auto | ilp | levels | greedy"),
    tokens: int = typer.Option(None, "--tokens", min=1, help="Override the sequence length."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Latency, throughput, area, energy and utilisation of one model on one architecture."""
    from schedlab.harp.archfile import load_arch
    from schedlab.harp.engine import evaluate
    from schedlab.harp.workloads import load_model

    with _quiet():
        report = evaluate(load_model(model, tokens), load_arch(arch, calibration), strategy,
                          scheduler, method, solver=solver)
    if json_out:
        emit_json(report.__dict__)
        return
    table = Table("metric", "value", title=f"{report.model} · {strategy} · {scheduler}")
    for key, value in report.row().items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    out_console.print(table)


@app.command()
@handle_errors
def decode(
    model: str = typer.Option("gpt2-small", "--model", "-m", help=MODEL_HELP),
    arch: Path = typer.Option(None, "--arch", help=ARCH_HELP),
    calibration: str = typer.Option(None, "--calibration", help=CAL_HELP),
    prompt: int = typer.Option(None, "--prompt", min=1, help="Prompt tokens (the prefill)."),
    new_tokens: int = typer.Option(64, "--new-tokens", min=1, help="Tokens generated."),
    scheduler: str = typer.Option("harp", "--scheduler", help="any scheduler of estimate"),
    method: str = typer.Option("estimate", "--method", help="estimate | simulate"),
    every: int = typer.Option(1, "--every", min=1, help="Evaluate every n-th decode step."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """KV-cache decoding of a causal model: the prefill, then one token at a time."""
    from schedlab.harp.archfile import load_arch
    from schedlab.harp.decoding import evaluate_decoding
    from schedlab.harp.workloads import load_model

    with _quiet():
        report = evaluate_decoding(load_model(model, prompt), load_arch(arch, calibration),
                                   new_tokens, scheduler, method=method, every=every)
    if json_out:
        emit_json({**report.row(), "step_us": report.step_us})
        return
    table = Table("metric", "value", title=f"{report.model} · decode · {scheduler}")
    for key, value in report.row().items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    out_console.print(table)


@app.command()
@handle_errors
def compare(
    model: str = typer.Option("bert-base", "--model", "-m", help=MODEL_HELP),
    arch: Path = typer.Option(None, "--arch", help=ARCH_HELP),
    calibration: str = typer.Option(None, "--calibration", help=CAL_HELP),
    strategy: str = typer.Option("latency", "--strategy", help="latency | area | balanced"),
    method: str = typer.Option("simulate", "--method", help="estimate | simulate"),
    tokens: int = typer.Option(None, "--tokens", min=1, help="Override the sequence length."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Every scheduler (HARP and the baselines) on the same mapping, with speed-ups."""
    from schedlab.harp.archfile import load_arch
    from schedlab.harp.engine import evaluate
    from schedlab.harp.mapping import make_mapper
    from schedlab.harp.policies import SCHEDULERS
    from schedlab.harp.reprogram import fits
    from schedlab.harp.workloads import load_model

    with _quiet():
        work, spec = load_model(model, tokens), load_arch(arch, calibration)
        streamed = spec.reprogram.enabled and not fits(work, spec)
        # a model larger than the chip is streamed: each group is mapped inside evaluate
        mapping = None if streamed else make_mapper(strategy).map(work, spec)
        rows = [evaluate(work, spec, strategy, name, method, mapping=mapping).row()
                for name in SCHEDULERS]
    harp = next(r for r in rows if r["scheduler"] == "harp")["latency_us"]
    for row in rows:
        row["harp_speedup"] = row["latency_us"] / harp
    if json_out:
        emit_json(rows)
        return
    table = Table("scheduler", "latency µs", "HARP speed-up", "analog util", "digital util",
                  title=f"{work.name} ({work.tokens} tokens) · {strategy} mapping · {method}")
    for row in rows:
        table.add_row(str(row["scheduler"]), f"{row['latency_us']:.1f}",
                      f"{row['harp_speedup']:.2f}x", f"{row['analog_util']:.1%}",
                      f"{row['digital_util']:.1%}")
    out_console.print(table)


@app.command()
@handle_errors
def sweep(
    model: str = typer.Option("bert-base", "--model", "-m", help=MODEL_HELP),
    arch: Path = typer.Option(None, "--arch", help="Base architecture JSON file."),
    calibration: str = typer.Option(None, "--calibration", help=CAL_HELP),
    crossbar: str = typer.Option("64,128,256", "--crossbar", help="Crossbar sizes (square)."),
    adcs: str = typer.Option("1,2,4,8", "--adcs", help="ADCs per crossbar."),
    units: str = typer.Option("8,16,32,64", "--units", help="Digital unit counts."),
    strategy: str = typer.Option("balanced", "--strategy", help="latency | area | balanced"),
    scheduler: str = typer.Option("harp", "--scheduler", help="Scheduler to evaluate."),
    tokens: int = typer.Option(None, "--tokens", min=1, help="Override the sequence length."),
    out: Path = typer.Option(None, "--out", help="Write the table (.csv or .parquet)."),
    plot: Path = typer.Option(None, "--plot", help="Write the Pareto plot (.png)."),
    executor: str = typer.Option("local", "--executor", help="local | ray"),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Parallel workers."),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster address."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Design-space sweep (crossbar size x ADCs x digital units) with a latency/area front."""
    import polars as pl

    from schedlab.core.io import write_bytes, write_frame
    from schedlab.harp.archfile import load_arch
    from schedlab.harp.mapping import make_mapper
    from schedlab.harp.policies import make_scheduler
    from schedlab.harp.sweep import design_points, plot_pareto, run_sweep
    from schedlab.harp.workloads import load_model

    make_mapper(strategy), make_scheduler(scheduler), load_model(model, tokens)  # fail early
    points = design_points(model, _ints(crossbar, "crossbar"), _ints(adcs, "adcs"),
                           _ints(units, "units"), strategy, scheduler, tokens,
                           load_arch(arch, calibration))
    err_console.print(f"evaluating {len(points)} designs on {executor} x{jobs}")
    with _quiet():
        frame = run_sweep(points, executor, jobs, ray_address)
    if out is not None:
        write_frame(frame, out)
    if plot is not None:
        import io

        buffer = io.BytesIO()
        plot_pareto(frame, f"{model}: {strategy} mapping").savefig(buffer, format="png")
        write_bytes(plot, buffer.getvalue())
    front = frame.filter(pl.col("pareto")).sort("area_mm2")
    if json_out:
        emit_json({"points": frame.to_dicts(), "pareto": front.to_dicts()})
        return
    table = Table("crossbar", "ADCs", "units", "latency µs", "area mm²", "energy µJ",
                  title=f"Pareto front: {len(front)} of {len(frame)} designs")
    for row in front.iter_rows(named=True):
        table.add_row(str(row["crossbar"]), str(row["adcs"]), str(row["digital_units"]),
                      f"{row['latency_us']:.1f}", f"{row['area_mm2']:.1f}",
                      f"{row['energy_uj']:.0f}")
    out_console.print(table)


@app.command()
@handle_errors
def models(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The built-in transformer shapes."""
    from schedlab.harp.workloads import MODELS

    rows = [cfg.model_dump() for cfg in MODELS.values()]
    if json_out:
        emit_json(rows)
        return
    table = Table(*rows[0].keys())
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    out_console.print(table)


@app.command("calibration")
@handle_errors
def show_calibration(
    name: str = typer.Argument(None, help="isaac | puma | mnsim or a .toml; omit for all."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Published parameters with their sources, and our model against the papers' figures."""
    from schedlab.harp.calibration import CALIBRATIONS, load_calibration, validation_rows

    names = (name,) if name else CALIBRATIONS
    cals = [load_calibration(n) for n in names]
    rows = validation_rows(tuple(str(n) for n in names))
    if json_out:
        emit_json({"calibrations": [{"key": c.key, "paper": c.paper, "code": c.code,
                                     "params": [p.__dict__ for p in c.params]} for c in cals],
                   "validation": rows})
        return
    for cal in cals:
        table = Table("field", "value", "source", title=f"{cal.key}: {cal.paper}")
        for p in cal.params:
            table.add_row(p.field, f"{p.value:g}", p.cite)
        out_console.print(table)
    table = Table("source", "metric", "parameters", "ours", "paper", "error",
                  title="our cost model against the papers' figures")
    for r in rows:
        table.add_row(r["source"], f"{r['metric']} ({r['unit']})", r["calibration_used"],
                      f"{r['ours']:.4g}", f"{r['reported']:.4g}", f"{r['error']:+.1%}")
    out_console.print(table)


@app.command("arch")
@handle_errors
def show_arch(
    arch: Path = typer.Option(None, "--arch", help=ARCH_HELP),
    calibration: str = typer.Option(None, "--calibration", help=CAL_HELP),
    out: Path = typer.Option(None, "--out", help="Write the full architecture JSON here."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Print (or write) the full architecture, defaults filled in, as a template to edit."""
    import json

    from schedlab.core.io import write_text
    from schedlab.harp.archfile import load_arch

    spec = load_arch(arch, calibration)
    if out is not None:
        write_text(out, spec.model_dump_json(indent=2) + "\n")
        err_console.print(f"wrote {out}")
    if json_out or out is None:
        emit_json(json.loads(spec.model_dump_json()))
