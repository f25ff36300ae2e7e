"""``schedlab couchsurfer ...``: simulate, compare schedulers, place (EJPP), trace tools, GPU check.

CouchSurfer (paper 06). Every command is one library call; ``--json`` prints one JSON document.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import ConfigError

app = typer.Typer(help="CouchSurfer: exploratory jobs surfing on long-running jobs' GPUs.",
                  no_args_is_help=True, add_completion=False)

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


FORMATS = ("alibaba", "philly", "helios")


def _load(trace: Path | None, seed: int | None, n_jobs: int, gpus: int, load: float,
          exp_share: float, *, nodes: Path | None = None, fmt: str = "alibaba",
          colocation: Path | None = None, sample: int | None = None,
          trace_load: float | None = None, predictor: str = "history",
          gpus_per_node: int = 8) -> tuple:
    """(jobs, cluster or None, truth, info) from a trace (any format) or the generator."""
    from schedlab.couchsurfer.interference import PairTruth, load_measurements
    from schedlab.couchsurfer.workloads import TraceOptions, WorkloadSpec, generate, read_trace

    if (trace is None) == (seed is None):
        raise ConfigError("give exactly one of --trace FILE or --seed N", field="trace/seed")
    if fmt not in FORMATS:
        raise ConfigError(f"unknown format '{fmt}'; valid: {', '.join(FORMATS)}",
                          field="format")
    from schedlab.couchsurfer.predict import PREDICTORS

    if predictor not in PREDICTORS:  # checked here: a trace with estimate_s never asks
        raise ConfigError(f"unknown predictor '{predictor}'; valid: {', '.join(PREDICTORS)}",
                          field="predictor")
    alibaba_only = [name for name, value in (("--nodes", nodes), ("--sample", sample),
                                             ("--trace-load", trace_load)) if value is not None]
    if alibaba_only and (trace is None or fmt != "alibaba"):
        raise ConfigError(f"{', '.join(alibaba_only)}: only for an Alibaba pod list "
                          f"(--trace FILE --format alibaba)", field=alibaba_only[0][2:])
    measurements = load_measurements(colocation) if colocation is not None else None
    truth = PairTruth(measurements) if measurements is not None else None
    if trace is None:
        jobs = generate(WorkloadSpec(jobs=n_jobs, gpus=gpus, load=load, exp_share=exp_share),
                        seed)
        return jobs, None, truth, {"ran_with": "seeded generator"}
    if fmt == "philly":
        from schedlab.couchsurfer.philly import read_philly

        got = read_philly(trace, gpus=gpus, predictor=predictor, measurements=measurements)
    elif fmt == "helios":
        from schedlab.couchsurfer.helios import read_helios

        got = read_helios(trace, gpus=gpus, predictor=predictor, measurements=measurements)
    elif nodes is not None or sample is not None or trace_load is not None:
        from schedlab.couchsurfer.alibaba import load_alibaba

        got = load_alibaba(trace, nodes, gpus=gpus, jobs=sample, load=trace_load,
                           predictor=predictor, measurements=measurements)
    else:
        jobs = read_trace(trace, TraceOptions(predictor=predictor))
        return jobs, None, truth, {"ran_with": f"pod list {trace}"}
    if not got.jobs:
        raise ConfigError("no job of the trace fits the cluster", field="gpus")
    info = {"ran_with": got.ran_with, "dropped": got.dropped, **got.counts,
            "offered_load": got.offered_load, "estimate_log_error": got.estimate_log_error}
    return got.jobs, got.cluster, truth, info


def _print_summary(rows: list[dict]) -> None:
    from rich.table import Table

    keys = ["scheduler", "exp_queue_s_mean", "exp_queue_s_p99", "exp_jct_s_mean",
            "det_queue_s_mean", "det_slowdown_mean", "det_hosted_slowdown_max", "makespan_s",
            "gpu_util", "preemptions"]
    table = Table(*keys)
    for row in rows:
        table.add_row(*[f"{row[k]:.4g}" if isinstance(row[k], float) else str(row[k])
                        for k in keys])
    out_console.print(table)


# options the simulate and compare commands share (one definition each)
_TRACE = typer.Option(None, "--trace", help="Trace file (see --format).")
_SEED = typer.Option(None, "--seed", help="Generate a seeded workload instead.")
_FMT = typer.Option("alibaba", "--format", help="alibaba (pod list), philly, helios.")
_NODES = typer.Option(None, "--nodes", help="Alibaba node list: the real cluster.")
_COLOC = typer.Option(None, "--colocation", help="Lucid's colocation folder (measured pairs).")
_SAMPLE = typer.Option(None, "--sample", min=1, help="Pods sampled from the trace.")
_LOAD = typer.Option(None, "--trace-load", help="Compress arrivals to it.")
_PRED = typer.Option("history", "--predictor", help="history, noisy, oracle.")


@app.command()
@handle_errors
def simulate(
    trace: Path = _TRACE,
    seed: int = _SEED,
    scheduler: str = typer.Option("couchsurfer", "--scheduler", "-s", help="Scheduler name."),
    fmt: str = _FMT,
    nodes: Path = _NODES,
    colocation: Path = _COLOC,
    sample: int = _SAMPLE,
    trace_load: float = _LOAD,
    predictor: str = _PRED,
    n_jobs: int = typer.Option(2_000, "--n-jobs", min=1, help="Generated jobs."),
    gpus: int = typer.Option(64, "--gpus", min=1, help="GPUs (a multiple of --gpus-per-node)."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1),
    load: float = typer.Option(0.9, "--load", help="Deterministic GPU load offered."),
    exp_share: float = typer.Option(0.6, "--exp-share", help="Share of exploratory jobs."),
    guard: float = typer.Option(0.05, "--guard", help="Largest host slowdown JFM allows."),
    out: Path = typer.Option(None, "--out", help="Write per-job results (.parquet/.csv)."),
    json_out: bool = JSON,
) -> None:
    """Replay a trace (or a seeded workload) under one scheduler and print the paper's metrics."""
    from schedlab.core.io import write_frame
    from schedlab.couchsurfer.fusion import FusionParams
    from schedlab.couchsurfer.runner import simulate as run

    if gpus % gpus_per_node and nodes is None:
        raise ConfigError("must be a multiple of --gpus-per-node", field="gpus")
    jobs, cluster, truth, info = _load(trace, seed, n_jobs, gpus, load, exp_share, nodes=nodes,
                                       fmt=fmt, colocation=colocation, sample=sample,
                                       trace_load=trace_load, predictor=predictor)
    real = cluster.gpus if cluster is not None else gpus
    err_console.print(f"simulating {len(jobs)} jobs on {real} GPUs with {scheduler} "
                      f"({info['ran_with']})")
    report = run(jobs, scheduler, nodes=None if cluster else gpus // gpus_per_node,
                 gpus_per_node=gpus_per_node, fusion=FusionParams(guard=guard),
                 copy_jobs=False, cluster=cluster, truth=truth)
    if out is not None:
        write_frame(report.jobs, out)
    emit_json({**report.summary, "trace": info}) if json_out \
        else _print_summary([report.summary])


def _one(args: tuple) -> dict:
    """Module-level so the process pool / Ray can pickle it."""
    from schedlab.couchsurfer.fusion import FusionParams
    from schedlab.couchsurfer.runner import simulate as run

    jobs, name, nodes, gpn, guard, cluster, truth = args
    return run(jobs, name, nodes=nodes, gpus_per_node=gpn, fusion=FusionParams(guard=guard),
               cluster=cluster, truth=truth).summary


@app.command()
@handle_errors
def compare(
    trace: Path = _TRACE,
    seed: int = _SEED,
    fmt: str = _FMT,
    nodes: Path = _NODES,
    colocation: Path = _COLOC,
    sample: int = _SAMPLE,
    trace_load: float = _LOAD,
    predictor: str = _PRED,
    n_jobs: int = typer.Option(2_000, "--n-jobs", min=1),
    gpus: int = typer.Option(64, "--gpus", min=1),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1),
    load: float = typer.Option(0.9, "--load"),
    exp_share: float = typer.Option(0.6, "--exp-share"),
    guard: float = typer.Option(0.05, "--guard"),
    executor: str = typer.Option("local", "--executor", help="local or ray."),
    jobs: int = typer.Option(None, "--jobs", help="Parallel workers (default: all cores)."),
    ray_address: str = typer.Option(None, "--ray-address"),
    json_out: bool = JSON,
) -> None:
    """Run every scheduler on the same workload (in parallel) and compare the metrics."""
    from schedlab.core.executors import make_executor
    from schedlab.couchsurfer.policies import SCHEDULERS

    if gpus % gpus_per_node and nodes is None:
        raise ConfigError("must be a multiple of --gpus-per-node", field="gpus")
    workload, cluster, truth, _ = _load(trace, seed, n_jobs, gpus, load, exp_share, nodes=nodes,
                                        fmt=fmt, colocation=colocation, sample=sample,
                                        trace_load=trace_load, predictor=predictor)
    items = [(workload, name, None if cluster else gpus // gpus_per_node, gpus_per_node, guard,
              cluster, truth) for name in SCHEDULERS]
    pool = make_executor(executor, jobs, ray_address)
    try:
        rows: list = [None] * len(items)
        for index, row in pool.map_unordered(_one, items):
            rows[index] = row
    finally:
        pool.close()
    emit_json(rows) if json_out else _print_summary(rows)


@app.command()
@handle_errors
def tradeoff(
    gpus: int = typer.Option(32, help="GPUs of the real-trace slice (32, 256 or 1000)."),
    seeds: str = typer.Option("0,1,2", help="Comma-separated seeds."),
    out: Path = typer.Option(Path("couchsurfer-tradeoff"), help="Folder for the frames."),
    parts: str = typer.Option("front,stress,sensitivity", help="Which parts to run."),
    quick: bool = typer.Option(False, help="Fewer knob values and stresses."),
    json_out: bool = JSON,
) -> None:
    """Pareto front, guard under stress and interference sensitivity: Parquet, CSV, PNG."""
    from schedlab.couchsurfer.tradeoff import write_all

    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"seeds must be integers, got '{seeds}'", field="seeds") from None
    written = write_all(gpus, seed_list, str(out),
                        tuple(p.strip() for p in parts.split(",") if p.strip()), quick)
    if json_out:
        emit_json(written)
    else:
        for kind, path in written.items():
            out_console.print(f"{kind}: {path}")


@app.command()
@handle_errors
def place(
    seed: int = typer.Option(0, "--seed"),
    nodes: int = typer.Option(4, "--nodes", min=1),
    gpus_per_node: int = typer.Option(4, "--gpus-per-node", min=1),
    n_jobs: int = typer.Option(10, "--n-jobs", min=1, help="Waiting exploratory jobs."),
    json_out: bool = JSON,
) -> None:
    """Solve one random EJPP snapshot with the threshold algorithm and the exact ILP."""
    import time

    import numpy as np

    from schedlab.couchsurfer.ejpp import evaluate, place_threshold, random_instance, solve_ilp

    inst = random_instance(np.random.default_rng(seed), nodes, gpus_per_node, n_jobs)
    t0 = time.perf_counter()
    greedy = place_threshold(inst)
    t1 = time.perf_counter()
    exact = solve_ilp(inst)
    t2 = time.perf_counter()
    doc = dict(threshold=dict(plan=greedy, value=evaluate(inst, greedy), ms=1e3 * (t1 - t0)),
               ilp=dict(plan=exact, value=evaluate(inst, exact), ms=1e3 * (t2 - t1)))
    if json_out:
        emit_json(doc)
        return
    for name, part in doc.items():
        out_console.print(f"{name:9s} placed {len(part['plan'])}/{n_jobs} jobs, "
                          f"value {part['value']:.3f}, {part['ms']:.2f} ms")


@app.command()
@handle_errors
def generate(
    out: Path = typer.Argument(..., help="CSV to write (Alibaba pod-list format)."),
    seed: int = typer.Option(0, "--seed"),
    n_jobs: int = typer.Option(2_000, "--n-jobs", min=1),
    gpus: int = typer.Option(64, "--gpus", min=1),
    load: float = typer.Option(0.9, "--load"),
    exp_share: float = typer.Option(0.6, "--exp-share"),
    json_out: bool = JSON,
) -> None:
    """Write a seeded workload as a trace that ``simulate --trace`` replays."""
    from schedlab.couchsurfer.workloads import write_trace

    jobs, *_ = _load(None, seed, n_jobs, gpus, load, exp_share)
    write_trace(jobs, out)
    doc = dict(path=str(out), jobs=len(jobs))
    emit_json(doc) if json_out else out_console.print(f"wrote {len(jobs)} jobs to {out}")


@app.command()
@handle_errors
def gpucheck(
    device: str = typer.Option("cuda", "--device", help="cuda (real check) or cpu (smoke)."),
    steps: int = typer.Option(200, "--steps", min=1),
    out: Path = typer.Option(None, "--out", help="Write the measured pairs (.csv/.parquet)."),
    json_out: bool = JSON,
) -> None:
    """Measure host slowdown and surfer rate of two real training loops sharing a device."""
    import polars as pl

    from schedlab.core.io import write_frame
    from schedlab.couchsurfer.fusion import fit_params
    from schedlab.couchsurfer.gpucheck import sweep

    rows = sweep(device=device, steps=steps)
    fitted = fit_params(rows)
    if out is not None:
        write_frame(pl.DataFrame(rows), out)
    doc = dict(pairs=rows, fitted=dict(priority_residual=fitted.priority_residual))
    emit_json(doc) if json_out else out_console.print(doc)
