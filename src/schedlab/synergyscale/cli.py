"""``schedlab synergyscale ...``: train with offloading, plan at scale, measure this machine.

SynergyScale (../shared/papers/11-synergyscale.md). Every command is one library call; progress
and errors go to stderr and ``--json`` prints one JSON document on stdout. Torch is imported
inside the commands so ``schedlab --help`` stays fast.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import typer
from rich.table import Table

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import ConfigError

app = typer.Typer(
    name="synergyscale",
    help="SynergyScale: train past the GPU memory wall with hierarchical offloading.",
    no_args_is_help=True,
    add_completion=False,
)

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}

#: plan's --params ceiling: far past any named GPU server, and small enough to stay fast
MAX_PLAN_PARAMS = 1e16


def parse_size(text: str, field: str) -> int:
    """'2GiB', '512MB', '1.5e9' -> bytes; a clear error naming the option otherwise."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ConfigError(f"cannot read {text!r} as a size (e.g. 2GiB, 512MB, 1e9)", field=field)
    value = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if value < 1:
        raise ConfigError("must be at least one byte", field=field)
    return int(value)


def _table(title: str, row: dict) -> Table:
    table = Table("metric", "value", title=title)
    for key, value in row.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    return table


@app.command()
@handle_errors
def train(
    model: str = typer.Option(
        "gpt-tiny", "--model", "-m", help="gpt-tiny | gpt-small | gpt-medium | CONFIG.json"
    ),
    policy: str = typer.Option(
        "synergyscale", "--policy", help="synergyscale | zero-offload | zero-infinity | no-offload"
    ),
    device_budget: str = typer.Option("2GiB", "--device-budget", help="Device tier budget."),
    host_budget: str = typer.Option("8GiB", "--host-budget", help="Host tier budget."),
    nvme: Path = typer.Option(None, "--nvme", help="Directory for NVMe-tier chunk files."),
    nvme_budget: str = typer.Option(None, "--nvme-budget", help="NVMe tier budget."),
    steps: int = typer.Option(10, "--steps", min=1, help="Training iterations."),
    data: Path = typer.Option(None, "--data", help="Train on this file's bytes (vocab>=256)."),
    seed: int = typer.Option(0, "--seed", help="Initialisation and data seed."),
    executor: str = typer.Option("threads", "--executor", help="threads | cuda"),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Train a GPT with model states offloaded across device, host and NVMe tiers."""
    from schedlab.synergyscale.model import load_config
    from schedlab.synergyscale.training import train as run_train
    from schedlab.synergyscale.workloads import synthetic_batches, text_batches

    if executor not in ("threads", "cuda"):
        raise ConfigError(f"unknown executor {executor!r}; valid: threads, cuda", field="executor")
    if executor == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "the cuda executor needs a CUDA GPU and this torch sees none", field="executor"
            )
    budgets = (
        parse_size(device_budget, "device_budget"),
        parse_size(host_budget, "host_budget"),
        parse_size(nvme_budget, "nvme_budget") if nvme_budget else None,
    )
    cfg = load_config(model)
    batches = text_batches(data, cfg, steps, seed) if data else synthetic_batches(cfg, steps, seed)
    device = "cuda" if executor == "cuda" else "cpu"
    err_console.print(f"training {model} with {policy} for {steps} steps ...")
    report = run_train(
        cfg,
        batches,
        policy,
        budgets[0],
        budgets[1],
        nvme,
        seed,
        executor=executor,
        device=device,
        nvme_budget=budgets[2],
    )
    summary = report.summary()
    if json_out:
        emit_json(dict(summary=summary, losses=report.losses, step_seconds=report.step_seconds))
        return
    out_console.print(_table(f"{model} · {policy}", summary))


@app.command()
@handle_errors
def plan(
    params: float = typer.Option(114e9, "--params", help="Model size in parameters."),
    gpu: str = typer.Option("a100-80g", "--gpu", help="a100-80g | h100 | h200"),
    policy: str = typer.Option("synergyscale", "--policy", help="Offloading policy."),
    batch: int = typer.Option(4, "--batch", min=1, help="Micro-batch (sequences)."),
    seq: int = typer.Option(2048, "--seq", min=1, help="Sequence length."),
    largest: bool = typer.Option(False, "--largest", help="Also report the largest model."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Plan a model of --params parameters on a named GPU server (analytic)."""
    from schedlab.synergyscale.hardware import named_hardware
    from schedlab.synergyscale.scaling import largest_model, plan_for_params

    if not math.isfinite(params) or params < 1:
        raise ConfigError("must be a finite number of at least 1", field="params")
    if params > MAX_PLAN_PARAMS:
        raise ConfigError(
            f"must be at most {MAX_PLAN_PARAMS:.0e} (no named GPU comes close)", field="params"
        )
    hw = named_hardware(gpu)
    layers, est = plan_for_params(params, hw, policy, batch, seq)
    row = dict(gpu=gpu, layers=layers, d_model=128 * layers, **est.row())
    if largest:
        max_layers, best = largest_model(hw, policy, batch, seq)
        row.update(largest_layers=max_layers, largest_params=best.params if best else 0)
    if json_out:
        emit_json(row)
        return
    out_console.print(_table(f"{policy} on {gpu}", row))


@app.command()
@handle_errors
def hardware(
    nvme: Path = typer.Option(None, "--nvme", help="Directory to measure as the NVMe tier."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Measure this machine's copy, file, FLOP/s and CPU-Adam rates; list named GPUs."""
    from schedlab.synergyscale.hardware import NAMED_HARDWARE, measure_local

    rows = [measure_local(nvme).row(), *(hw.row() for hw in NAMED_HARDWARE.values())]
    if json_out:
        emit_json(rows)
        return
    table = Table("name", "device", "host", "h2d GB/s", "nvme r/w GB/s", "TFLOP/s", "Adam Mparam/s")
    for r in rows:
        table.add_row(
            r["name"],
            f"{r['device_bytes'] / 2**30:.0f} GiB",
            f"{r['host_bytes'] / 2**30:.0f} GiB",
            f"{r['h2d_bw'] / 1e9:.1f}",
            f"{r['nvme_read_bw'] / 1e9:.1f}/{r['nvme_write_bw'] / 1e9:.1f}",
            f"{r['device_flops'] / 1e12:.3g}",
            f"{r['cpu_adam_rate'] / 1e6:.0f}",
        )
    out_console.print(table)


@app.command()
@handle_errors
def policies(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the offloading policies (the method and its baselines)."""
    from schedlab.synergyscale.policies import POLICIES

    rows = [
        dict(
            name=name,
            doc=(factory.__doc__ or "").strip().splitlines()[0] if factory.__doc__ else "",
        )
        for name, factory in POLICIES.items()
    ]
    if json_out:
        emit_json(rows)
        return
    for row in rows:
        out_console.print(f"[bold]{row['name']}[/bold]  {row['doc']}")


@app.command()
@handle_errors
def fit(
    model: str = typer.Option("nanogpt", "--model", "-m", help="nanogpt | gpt2 (transformers)"),
    config: Path = typer.Option(
        None, "--config", "-c", help="Engine config JSON (EngineConfig fields)."
    ),
    size: Path = typer.Option(
        None, "--size", help="Model shape JSON (NanoGPTConfig or GPT2Config fields)."
    ),
    steps: int = typer.Option(20, "--steps", min=1, help="Training steps."),
    lr: float = typer.Option(1e-3, "--lr", help="Adam learning rate."),
    seed: int = typer.Option(0, "--seed", help="Initialisation and data seed."),
    batch_size: int = typer.Option(4, "--batch", min=1, help="Sequences per step."),
    checkpoint: Path = typer.Option(
        None, "--checkpoint", help="Checkpoint directory, written atomically after every step."
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue from --checkpoint."),
    reference: bool = typer.Option(
        False, "--reference", help="Also train plain torch + Adam and report the largest loss gap."
    ),
    data: Path = typer.Option(
        None,
        "--data",
        help="Train on this file's bytes (byte-level "
        "tokens; the model's vocabulary must be >= 256).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Train a model the project did not write through synergyscale.initialize."""
    from schedlab.core.io import read_json, validate_model
    from schedlab.synergyscale.config import EngineConfig
    from schedlab.synergyscale.examples import fit as run_fit
    from schedlab.synergyscale.examples import fit_reference

    cfg = validate_model(
        EngineConfig, read_json(config, "engine config") if config else {}, path=config
    )
    shape = read_json(size, "model size") if size else None
    from schedlab.synergyscale.examples import build_model

    try:
        build_model(model, shape)  # check the shape before any engine is set up
    except ConfigError as exc:
        if size is not None and exc.field != "model":
            exc.path = exc.path or size
        raise
    if resume and checkpoint is None:
        raise ConfigError("--resume needs --checkpoint", field="resume")
    err_console.print(f"training {model} for {steps} steps ({cfg.tier} tier, {cfg.schedule})")
    try:
        result = run_fit(
            model,
            steps,
            cfg,
            size=shape,
            lr=lr,
            seed=seed,
            batch_size=batch_size,
            checkpoint=checkpoint,
            resume=resume,
            data=data,
        )
    except ConfigError as exc:
        if config is not None and exc.path is None and exc.field in EngineConfig.model_fields:
            exc.path = config  # e.g. a budget below the fetch window: name the config file
        raise
    doc = dict(
        model=model,
        steps=steps,
        resumed_from=result.resumed_from,
        losses=result.losses,
        step_seconds=result.step_seconds,
        stats=result.stats,
    )
    if reference:
        ref = fit_reference(
            model, steps, size=shape, lr=lr, seed=seed, batch_size=batch_size, data=data
        )
        doc["max_loss_gap_vs_torch_adam"] = max(
            abs(a - b) for a, b in zip(ref, result.losses, strict=True)
        )
    if json_out:
        emit_json(doc)
        return
    row = dict(
        first_loss=result.losses[0],
        last_loss=result.losses[-1],
        resumed_from=result.resumed_from,
        **result.stats,
    )
    if reference:
        row["max_loss_gap_vs_torch_adam"] = doc["max_loss_gap_vs_torch_adam"]
    out_console.print(_table(f"{model} · synergyscale.initialize", row))
