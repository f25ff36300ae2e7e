"""``schedlab hip-dfpt ...``: real DFPT runs, task statistics, scale simulations (13-hip_dfpt).

Every command is one library call; progress and errors go to stderr and ``--json`` prints one
JSON document on stdout. PySCF, Ray and the simulator load inside the commands.
"""

from __future__ import annotations

import typer
from rich.table import Table

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import ConfigError

app = typer.Typer(
    name="hip-dfpt",
    help="HIP-DFPT: irregular-task runtime for DFPT integrations (real PySCF + simulated scale).",
    no_args_is_help=True,
    add_completion=False,
)

MOLECULE_HELP = (
    "An .xyz file (Angstrom), a built-in molecule (see `molecules`) or alkane-N "
    "(C_nH_2n+2, e.g. alkane-40)."
)


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _table(rows: list[dict], title: str) -> Table:
    table = Table(title=title)
    for key in rows[0]:
        table.add_column(key, no_wrap=key in ("config", "tasks_of"))
    for row in rows:
        table.add_row(*(_fmt(v) for v in row.values()))
    return table


def _vertical(row: dict, title: str) -> Table:
    """One result as metric/value rows: readable on an 80-column terminal."""
    table = Table("metric", "value", title=title)
    for key, value in row.items():
        table.add_row(key, _fmt(value))
    return table


@app.command()
@handle_errors
def molecules(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the built-in molecules."""
    from schedlab.hip_dfpt.workloads import builtin_molecule, builtin_molecules

    rows = [
        dict(
            name=n,
            atoms=len(builtin_molecule(n).symbols),
            electrons=builtin_molecule(n).n_electrons,
        )
        for n in builtin_molecules()
    ]
    if json_out:
        emit_json(rows)
        return
    out_console.print(_table(rows, "built-in molecules"))


@app.command()
@handle_errors
def run(
    molecule: str = typer.Option("water", "--molecule", "-m", help=MOLECULE_HELP),
    basis: str = typer.Option("6-31g", "--basis", "-b", help="Any PySCF basis name."),
    workers: int = typer.Option(2, "--workers", "-w", min=1, help="Devices (workers)."),
    streams: int = typer.Option(2, "--streams", min=1, help="Streams per device."),
    balancer: str = typer.Option(
        "hip-dfpt",
        "--balancer",
        help="hip-dfpt | round-robin | count-balanced | lpt-points | work-stealing",
    ),
    executor: str = typer.Option(
        "local",
        "--executor",
        help="local (threads) | process (one OS process per device, shared memory) | ray (actors)",
    ),
    grid_level: int = typer.Option(1, "--grid-level", min=0, max=9, help="PySCF grid level."),
    xc: str = typer.Option(
        "lda,vwn",
        "--xc",
        help="LDA, GGA or hybrid functional (PySCF name: lda,vwn | pbe | pbe0 | b3lyp ...).",
    ),
    cache_ao: bool = typer.Option(
        True,
        "--cache-ao/--ao-on-the-fly",
        help="Keep every "
        "task's basis values, or compute them per task (memory "
        "grows with the batch, not grid x basis).",
    ),
    replan: str = typer.Option(
        "model",
        "--replan",
        help="model (plan once from the 5% sample) | measured (re-plan on the live task "
        "times) | adaptive (per-device speeds, refits, stealing in device time: unequal "
        "devices)",
    ),
    deterministic: bool = typer.Option(
        True,
        "--deterministic/--float-sum",
        help="Exact "
        "fixed-point reduction (bit-identical for any device "
        "count) or plain float summation.",
    ),
    charge: int = typer.Option(0, "--charge", help="Molecular charge (closed shell)."),
    pool: bool = typer.Option(True, "--pool/--no-pool", help="Pooled device buffers."),
    gpu: bool = typer.Option(False, "--gpu", help="Run the kernels with CuPy on a GPU."),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """DFPT static polarisability with every grid integration run by the runtime; checks it
    against PySCF and reports balance, timings and the memory pool."""
    from schedlab.hip_dfpt.pipeline import prepare, reference_polarizability, run_polarizability
    from schedlab.hip_dfpt.policies import make_balancer
    from schedlab.hip_dfpt.workloads import load_molecule

    if executor not in ("local", "process", "ray"):
        raise ConfigError(
            f"unknown executor '{executor}'; valid: local, process, ray", field="executor"
        )
    if replan not in ("model", "measured", "adaptive"):
        raise ConfigError(
            f"unknown --replan '{replan}'; valid: model, measured, adaptive", field="replan"
        )
    make_balancer(balancer)  # fail on a bad name before the SCF
    mol = load_molecule(molecule, charge)
    with err_console.status(f"SCF and task build for {mol.name}/{basis}"):
        # micro-task sizes from the tasks each worker gets, so small molecules balance too
        work = prepare(mol, basis, grid_level, xc, cache_ao=cache_ao, workers=workers * streams)
        reference = reference_polarizability(work.system)
    with err_console.status(f"CPHF through the runtime ({balancer}, {workers}x{streams})"):
        result = run_polarizability(
            work,
            balancer,
            reference,
            workers,
            streams,
            executor,
            seed,
            pool,
            gpu,
            replan,
            deterministic,
        )
    summary = dict(
        molecule=mol.name,
        basis=basis,
        xc=xc,
        executor=executor,
        workers=workers,
        streams=streams,
        raw_batches=len(work.raw.tasks),
        micro_tasks=len(work.composed.tasks),
        vxc_error=work.vxc_error,
        **result.summary(),
        alpha=result.alpha.tolist(),
    )
    if json_out:
        emit_json(summary)
        return
    summary.pop("alpha")
    out_console.print(_vertical(summary, f"HIP-DFPT runtime: {mol.name}/{basis}"))
    out_console.print("polarisability tensor (a.u.):")
    out_console.print(result.alpha.round(6))


@app.command()
@handle_errors
def tasks(
    molecule: str = typer.Option("water", "--molecule", "-m", help=MOLECULE_HELP),
    basis: str = typer.Option("6-31g", "--basis", "-b", help="Any PySCF basis name."),
    grid_level: int = typer.Option(1, "--grid-level", min=0, max=9),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Measured task-cost distribution before/after composition and the models' 5%-sample error."""
    import numpy as np

    from schedlab.hip_dfpt.perfmodel import MODELS, make_model, mape, sample_tasks
    from schedlab.hip_dfpt.pipeline import measured_costs, prepare
    from schedlab.hip_dfpt.tasks import cost_distribution
    from schedlab.hip_dfpt.workloads import load_molecule

    with err_console.status("SCF, batching and timing every task"):
        work = prepare(load_molecule(molecule), basis, grid_level)
        costs = {
            "raw": measured_costs(work.raw, seed),
            "composed": measured_costs(work.composed, seed),
        }
    rows = []
    for name, store in (("raw", work.raw), ("composed", work.composed)):
        seconds, features = costs[name], store.features
        sample = sample_tasks(features, 0.05, seed)
        rest = np.setdiff1d(np.arange(len(features)), sample)
        errors = {
            f"mape_{m}": mape(
                make_model(m).fit(features.take(sample), seconds[sample]).predict(features)[rest],
                seconds[rest],
            )
            for m in MODELS
        }
        rows.append(
            dict(
                tasks_of=name,
                **cost_distribution(seconds),
                total_s=float(seconds.sum()),
                dense_share=float(features.branch.mean()),
                **errors,
            )
        )
    if json_out:
        emit_json(rows)
        return
    for row in rows:
        out_console.print(_vertical(row, f"task costs ({row['tasks_of']}): {molecule}/{basis}"))


@app.command()
@handle_errors
def calibrate(
    train: str = typer.Option(
        "water,ammonia,ethane,alkane-3,alkane-5",
        "--train",
        help="Comma-separated molecules (names or .xyz) to fit on.",
    ),
    held_out: str = typer.Option(
        "butane,benzene", "--held-out", help="Comma-separated molecules to validate on."
    ),
    basis: str = typer.Option("6-31g", "--basis", "-b"),
    atoms: int = typer.Option(2000, "--atoms", min=1, help="Synthetic atoms (simulated)."),
    devices: int = typer.Option(64, "--devices", min=1, help="Simulated CPU-calibrated devices."),
    seed: int = typer.Option(0, "--seed"),
    save_times: str = typer.Option(
        None,
        "--save-times",
        help="Write every measured task "
        "(features, seconds, molecule, split) to this .parquet/.csv.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Fit the simulator's cost parameters on measured micro-task times, validate on held-out
    molecules, then a SIMULATED scale balance on the calibrated devices."""
    from schedlab.hip_dfpt.calibrate import calibrate as run_calibration
    from schedlab.hip_dfpt.calibrate import calibrated_scale, measure_tasks

    names = [tuple(n.strip() for n in v.split(",") if n.strip()) for v in (train, held_out)]
    for label, group in zip(("--train", "--held-out"), names, strict=True):
        if not group:
            raise ConfigError(f"{label} names no molecule", field=label.lstrip("-"))
    with err_console.status("SCF and timing every micro-task of the training molecules"):
        tr = measure_tasks(names[0], basis, seed=seed)
    with err_console.status("SCF and timing every micro-task of the held-out molecules"):
        ho = measure_tasks(names[1], basis, seed=seed)
    cal = run_calibration(tr, ho, seed)
    if save_times:
        import polars as pl

        from schedlab.core.io import write_frame

        write_frame(
            pl.concat(
                [
                    tr.with_columns(pl.lit("train").alias("split")),
                    ho.with_columns(pl.lit("held_out").alias("split")),
                ]
            ),
            save_times,
        )
    d = cal.device
    row = dict(
        train=",".join(names[0]),
        held_out=",".join(names[1]),
        train_tasks=tr.height,
        held_out_tasks=ho.height,
        launch_us=d.launch_overhead * 1e6,
        dense_gflops=d.gemm_flops / 1e9,
        sparse_gflops=d.loop_flops / 1e9,
        memory_gbs=d.memory_bandwidth / 1e9,
        noise_sigma=d.noise_sigma,
        train_mape=cal.train_mape,
        held_out_mape=cal.held_out_mape,
        held_out_total_error=cal.held_out_total_error,
        held_out_model_mape=cal.held_out_model_mape,
        **{f"held_out_mape_{k}": v for k, v in cal.per_molecule.items()},
        **{f"sim_{k}": v for k, v in calibrated_scale(cal, tr, atoms, devices, seed).items()},
    )
    if json_out:
        emit_json(row)
        return
    out_console.print(_vertical(row, "calibrated simulator (fit: measured; scale: SIMULATED)"))


def _simulate_one(args: tuple) -> list[dict]:
    """Module-level so process pools and Ray can run seeds in parallel."""
    from schedlab.hip_dfpt.scale import scale_study

    atoms, devices, streams, seed, balancers = args
    report = scale_study(atoms, devices, streams, seed, balancers=balancers)
    return [
        dict(seed=seed, **row, model_mape=report.model_error["branch-hybrid"])
        for row in report.rows
    ]


@app.command()
@handle_errors
def simulate(
    devices: int = typer.Option(8192, "--devices", "-d", min=1, help="Simulated devices."),
    atoms: int = typer.Option(200_006, "--atoms", "-a", min=1, help="Atoms in the system."),
    streams: int = typer.Option(4, "--streams", min=1, help="Streams per device."),
    balancer: list[str] = typer.Option(None, "--balancer", help="Balancers (default: all)."),
    seeds: int = typer.Option(1, "--seeds", min=1, help="Seeds 0..N-1."),
    executor: str = typer.Option("local", "--executor", help="local | ray (seeds in parallel)"),
    jobs: int = typer.Option(1, "--jobs", min=1, help="Parallel seeds."),
    ray_address: str = typer.Option(None, "--ray-address"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Simulated scale study (labelled as simulated): balance, occupation, throughput."""
    from schedlab.core.executors import make_executor
    from schedlab.hip_dfpt.policies import make_balancer

    for name in balancer or []:
        make_balancer(name)
    pool = make_executor(executor, jobs, ray_address)
    items = [
        (atoms, devices, streams, s, tuple(balancer) if balancer else None) for s in range(seeds)
    ]
    rows: list[dict] = []
    try:
        with err_console.status(f"simulating {devices} devices, {atoms} atoms"):
            for _, result in pool.map_unordered(_simulate_one, items):
                rows.extend(result)
    finally:
        pool.close()
    rows.sort(key=lambda r: (r["seed"], r["config"]))
    if json_out:
        emit_json(dict(simulated=True, rows=rows))
        return
    keep = {
        "config": "config",
        "tasks": "tasks",
        "balance": "max/mean",
        "occupation": "occup",
        "utilisation": "util",
        "throughput_tflops": "TFLOP/s",
        "steals": "steals",
    }
    if seeds > 1:
        keep = {"seed": "seed", **keep}
    short = [
        {v: round(r[k], 3) if isinstance(r[k], float) else r[k] for k, v in keep.items()}
        for r in rows
    ]
    out_console.print(
        _table(short, f"SIMULATED: {devices} devices x {streams} streams, {atoms} atoms")
    )
