"""``schedlab faircache ...``: simulate a trace or workload, generate traces, show costs."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import BadInputError
from schedlab.core.io import ensure_directory, write_frame, write_text

app = typer.Typer(
    help="FairCache: fair multi-tenant LLM serving with context caching.",
    no_args_is_help=True,
    add_completion=False,
)

TABLE_COLUMNS = (
    "tenant",
    "finished",
    "compute_service",
    "unified_service",
    "hit_rate",
    "host_hit_rate",
    "executed",
    "attributed",
)


@app.command()
@handle_errors
def simulate(
    trace: Path = typer.Option(None, "--trace", help="Mooncake JSONL, Azure or BurstGPT CSV."),
    fmt: str = typer.Option(None, "--format", help="mooncake|azure|burstgpt (default: guess)."),
    block_tokens: int = typer.Option(
        None, "--block-tokens", min=1, help="Tokens per hash block (Mooncake default 512)."
    ),
    workload: str = typer.Option(None, "--workload", help="A generated workload by name."),
    tenants: int = typer.Option(4, "--tenants", min=1, help="Tenants (workload / mapping)."),
    assign: str = typer.Option(
        "keep",
        "--assign",
        help="keep|prefix|session|round-robin: map trace requests to "
        "tenants (session: by the trace's session/user id).",
    ),
    weights: str = typer.Option(
        None, "--weights", help="Tenant weights, 'name=w,...' or 'w0,w1,...' (default 1)."
    ),
    context: str = typer.Option(
        "refuse", "--context", help="refuse|truncate prompts beyond the model's context."
    ),
    scheduler: str = typer.Option("faircache", "--scheduler", help="fcfs|vtc|lpm|dlpm|faircache"),
    cache: str = typer.Option(
        "faircache", "--cache", help="lru|lfu|static|isolated|cost-aware|faircache"
    ),
    host_gb: float = typer.Option(8.0, "--host-gb", min=0, help="Host-memory cache size."),
    model: str = typer.Option("llama-3-8b", "--model"),
    gpu: str = typer.Option("a100-80g", "--gpu"),
    kv_tokens: int = typer.Option(None, "--kv-tokens", help="GPU KV pool (default: memory)."),
    no_cache: bool = typer.Option(False, "--no-prefix-cache", help="Disable prefix caching."),
    duration: float = typer.Option(120.0, "--duration", help="Workload length, seconds."),
    seed: int = typer.Option(0, "--seed"),
    out: Path = typer.Option(
        None, "--out", help="Write tenants.csv, requests.parquet, summary.json here."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Replay a trace (or a named workload) and print a per-tenant table."""
    from schedlab.faircache.simulator import EngineConfig
    from schedlab.faircache.simulator import simulate as run

    loaded = _load(trace, fmt, block_tokens, workload, tenants, assign, duration, seed)
    config = EngineConfig(
        model=model,
        gpu=gpu,
        kv_tokens=kv_tokens,
        host_gb=host_gb,
        prefix_cache=not no_cache,
        context=context,
        tenant_weights=_parse_weights(weights, loaded.tenant_names),
    )
    err_console.print(f"simulating {len(loaded)} requests, {loaded.n_tenants} tenants ...")
    result = run(loaded, scheduler, cache, config)
    if result.summary.get("truncated"):
        err_console.print(
            f"warning: {result.summary['truncated']} requests truncated to {model}'s context window"
        )
    if out is not None:
        ensure_directory(out)
        write_frame(result.tenants, out / "tenants.csv")
        write_frame(result.requests, out / "requests.parquet")
        write_frame(result.samples, out / "samples.parquet")
        write_text(out / "summary.json", json.dumps(result.summary, indent=2, default=str))
    if json_out:
        emit_json(dict(summary=result.summary, tenants=result.tenants.to_dicts()))
        return
    table = Table(*TABLE_COLUMNS, title=f"{scheduler} + {cache} on {loaded.name}")
    for row in result.tenants.select(TABLE_COLUMNS).iter_rows():
        table.add_row(*(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row))
    out_console.print(table)
    s = result.summary
    out_console.print(
        f"throughput {s['throughput_rps']:.2f} req/s, TTFT p50/p99 "
        f"{s['ttft_p50']:.3f}/{s['ttft_p99']:.3f} s, TPOT p50/p99 "
        f"{s['tpot_p50'] * 1e3:.1f}/{s['tpot_p99'] * 1e3:.1f} ms, host util "
        f"{s['host_util']:.2f}"
    )


@app.command()
@handle_errors
def serve(
    trace: Path = typer.Option(None, "--trace", help="Mooncake JSONL, Azure or BurstGPT CSV."),
    fmt: str = typer.Option(None, "--format", help="mooncake|azure|burstgpt (default: guess)."),
    block_tokens: int = typer.Option(
        None, "--block-tokens", min=1, help="Tokens per hash block of the trace."
    ),
    workload: str = typer.Option(None, "--workload", help="A generated workload by name."),
    tenants: int = typer.Option(4, "--tenants", min=1, help="Tenants (workload / mapping)."),
    assign: str = typer.Option("keep", "--assign", help="keep|prefix|session|round-robin."),
    weights: str = typer.Option(None, "--weights", help="'name=w,...' or 'w0,w1,...'."),
    context: str = typer.Option(
        "refuse", "--context", help="refuse|truncate requests beyond the model's context."
    ),
    scheduler: str = typer.Option("faircache", "--scheduler", help="fcfs|vtc|lpm|dlpm|faircache"),
    cache: str = typer.Option(
        "lru", "--cache", help="lru|lfu|static|isolated|cost-aware|faircache"
    ),
    max_requests: int = typer.Option(
        200, "--max-requests", min=1, help="Serve the first N requests (CPU engine: keep small)."
    ),
    time_scale: float = typer.Option(
        1.0, "--time-scale", min=0, help="Multiply arrival times (engine CPU-seconds)."
    ),
    layers: int = typer.Option(2, "--layers", min=1),
    hidden: int = typer.Option(64, "--hidden", min=1),
    max_context: int = typer.Option(2048, "--max-context", min=2),
    page_tokens: int = typer.Option(16, "--page-tokens", min=1, help="Tokens per KV block."),
    gpu_blocks: int = typer.Option(512, "--gpu-blocks", min=1, help="Device KV pool, blocks."),
    host_blocks: int = typer.Option(256, "--host-blocks", min=0, help="Host tier, blocks."),
    max_batch: int = typer.Option(32, "--max-batch", min=1),
    no_cache: bool = typer.Option(False, "--no-prefix-cache", help="Disable prefix caching."),
    token_budget: int = typer.Option(
        512, "--token-budget", min=1, help="Prompt tokens per step (all tokens if chunked)."
    ),
    chunked: bool = typer.Option(
        False, "--chunked-prefill", help="vLLM-style chunked prefill within --token-budget."
    ),
    preemption: bool = typer.Option(
        False,
        "--preemption",
        help="Allocate KV blocks as tokens are written; preempt by recompute when none is left.",
    ),
    duration: float = typer.Option(10.0, "--duration", help="Workload length, seconds."),
    seed: int = typer.Option(0, "--seed"),
    out: Path = typer.Option(
        None,
        "--out",
        help="Write tenants.csv, requests.parquet, "
        "samples.parquet, summary.json here (read by report).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Serve a trace on the real CPU engine (a transformers Llama, paged KV, prefix cache,
    host tier) and print per-tenant measured CPU time, service and latency."""
    import dataclasses

    from schedlab.faircache.managers import make_plugins
    from schedlab.faircache.real_engine import serve as run
    from schedlab.llm.engine import EngineOptions, TinyLlama
    from schedlab.llm.requests import Trace, fit_context

    make_plugins(scheduler, cache)  # unknown names fail before any work
    if out is not None:
        ensure_directory(out)  # an unusable --out fails before the run, not after it
    loaded = _load(trace, fmt, block_tokens, workload, tenants, assign, duration, seed)
    reqs = sorted(loaded.requests, key=lambda r: r.arrival)[:max_requests]
    reqs = [dataclasses.replace(r, arrival=r.arrival * time_scale) for r in reqs]
    loaded = Trace(reqs, loaded.block_tokens, loaded.name, loaded.tenant_names)
    heads = 4 if hidden % 4 == 0 else 1
    model = TinyLlama(
        layers=layers,
        hidden=hidden,
        intermediate=2 * hidden,
        heads=heads,
        kv_heads=heads // 2 or 1,
        max_context=max_context,
    )
    truncated = fit_context(loaded, max_context, f"the engine's {max_context}-token model", context)
    if truncated:
        err_console.print(f"warning: {truncated} requests truncated to {max_context} tokens")
    options = EngineOptions(
        block_tokens=page_tokens,
        gpu_blocks=gpu_blocks,
        host_blocks=host_blocks,
        max_batch=max_batch,
        prefix_cache=not no_cache,
        token_budget=token_budget,
        chunked_prefill=chunked,
        preemption=preemption,
        tenant_weights=_parse_weights(weights, loaded.tenant_names),
    )
    err_console.print(
        f"serving {len(loaded)} requests, {loaded.n_tenants} tenants on a "
        f"{layers}-layer, {hidden}-wide Llama (CPU) ..."
    )
    result = run(loaded, scheduler, cache, options, model)
    summary = dict(
        result.summary,
        truncated=truncated,
        tenant_weights=[float(w) for w in result.tenants["weight"]],
    )
    if out is not None:
        write_frame(result.tenants, out / "tenants.csv")
        write_frame(result.requests, out / "requests.parquet")
        write_frame(result.samples, out / "samples.parquet")
        write_text(out / "summary.json", json.dumps(summary, indent=2, default=str))
    if json_out:
        emit_json(dict(summary=summary, tenants=result.tenants.to_dicts()))
        return
    cols = (
        "tenant",
        "finished",
        "cpu_s",
        "cpu_share",
        "tokens_served",
        "compute_service",
        "unified_service",
        "hit_rate",
        "ttft_p50",
        "ttft_p99",
        "tpot_p50",
        "tpot_p99",
    )
    table = Table(*cols, title=f"{scheduler} + {cache} on {loaded.name} (real CPU engine)")
    for row in result.tenants.select(cols).iter_rows():
        table.add_row(*(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row))
    out_console.print(table)
    out_console.print(
        f"{summary['requests']} requests in {summary['engine_seconds']:.2f} "
        f"engine CPU-s, {summary['tokens_per_s']:.0f} tokens/s, scheduler "
        f"{100 * summary['scheduler_share']:.2f}% of step time"
        + (f", {summary['preemptions']} preemptions" if preemption else "")
    )


def _load(
    trace: Path | None,
    fmt: str | None,
    block_tokens: int | None,
    workload: str | None,
    tenants: int,
    assign: str,
    duration: float,
    seed: int,
):
    from schedlab.faircache.workloads import make_workload
    from schedlab.llm.requests import assign_tenants
    from schedlab.llm.traces import read_trace

    if (trace is None) == (workload is None):
        raise BadInputError("give exactly one of --trace and --workload", field="trace")
    if workload is not None:
        return make_workload(
            workload, duration=duration, seed=seed, tenants=tenants, block_tokens=block_tokens or 16
        )
    loaded = read_trace(trace, fmt, block_tokens)
    if assign != "keep":
        import warnings

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            used = assign_tenants(loaded.requests, tenants, assign)
        for warning in caught:
            err_console.print(f"warning: {warning.message}")
        loaded.tenant_names = [f"t{i}" for i in range(tenants)]
        err_console.print(f"--assign {assign}: {used} of {tenants} tenants received requests")
    return loaded


def _parse_weights(text: str | None, names: list[str]) -> tuple[float, ...] | None:
    """'t0=2,t1=1' (unnamed tenants keep 1) or '2,1,1,1' (one per tenant, in order)."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise BadInputError("is empty", field="weights")
    weights = [1.0] * len(names)

    def number(value: str, where: str) -> float:
        try:
            w = float(value)
        except ValueError:
            raise BadInputError(f"{where}: {value!r} is not a number", field="weights") from None
        if not (w > 0 and w != float("inf")):
            raise BadInputError(f"{where}: must be a finite number > 0", field="weights")
        return w

    if all("=" in p for p in parts):
        for part in parts:
            name, _, value = part.partition("=")
            name = name.strip()
            if name not in names:
                raise BadInputError(
                    f"unknown tenant '{name}' (tenants: {', '.join(names)})", field="weights"
                )
            weights[names.index(name)] = number(value, name)
    elif any("=" in p for p in parts):
        raise BadInputError("mixes 'name=w' and bare weights", field="weights")
    else:
        if len(parts) != len(names):
            raise BadInputError(
                f"has {len(parts)} weights for {len(names)} tenants", field="weights"
            )
        weights = [number(p, f"weight {i + 1}") for i, p in enumerate(parts)]
    return tuple(weights)


@app.command()
@handle_errors
def report(
    folder: Path = typer.Argument(..., help="A folder written by simulate --out."),
    plot: Path = typer.Option(
        None,
        "--plot",
        help="Write the service difference over time on both yardsticks to this PNG.",
    ),
    window: int = typer.Option(
        10, "--window", min=1, help="Samples per window of the service-difference plot."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Per-tenant service, latency percentiles and fairness on both yardsticks."""
    from schedlab.faircache.report import build_report, load_result, plot_difference

    tenants_frame, requests, samples, summary = load_result(folder)
    doc = build_report(tenants_frame, requests, samples, summary)
    if plot is not None:
        weights = {r["tenant"]: r["weight"] for r in doc["tenants"]}
        doc["plot"] = str(plot_difference(samples, weights, plot, window))
    if json_out:
        emit_json(doc)
        return
    cols = (
        "tenant",
        "weight",
        "finished",
        "compute_service",
        "unified_service",
        "ttft_p50",
        "ttft_p99",
        "tpot_p50",
        "tpot_p99",
    )
    table = Table(*cols, title=f"per-tenant service in {folder}")
    for row in doc["tenants"]:
        table.add_row(
            *(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in cols)
        )
    out_console.print(table)
    fair = Table(
        "yardstick",
        "Jain (service/weight)",
        "max service diff",
        "avg service diff",
        "shares",
        title="fairness (VTC's service difference over backlogged pairs)",
    )
    for key, f in doc["fairness"].items():
        fair.add_row(
            key,
            f"{f['jain']:.3f}",
            f"{f['max_service_difference']:.4g}",
            f"{f['avg_service_difference']:.4g}",
            " ".join(f"{v:.3f}" for v in f["shares"]),
        )
    out_console.print(fair)
    if plot is not None:
        out_console.print(f"plot: {doc['plot']}")


@app.command()
@handle_errors
def generate(
    workload: str = typer.Argument(..., help="Workload name (see simulate --workload)."),
    out: Path = typer.Option(..., "--out", help="File to write (.jsonl Mooncake, .csv Azure)."),
    duration: float = typer.Option(60.0, "--duration"),
    tenants: int = typer.Option(4, "--tenants", min=1),
    seed: int = typer.Option(0, "--seed"),
    block_tokens: int = typer.Option(
        512, "--block-tokens", min=1, help="Tokens per hash block (Mooncake uses 512)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Write a generated workload as a Mooncake JSONL or Azure CSV trace."""
    from schedlab.faircache.workloads import make_workload
    from schedlab.llm.traces import write_azure, write_mooncake

    trace = make_workload(
        workload, duration=duration, seed=seed, tenants=tenants, block_tokens=block_tokens
    )
    if out.suffix == ".jsonl":
        write_mooncake(trace, out)
    elif out.suffix == ".csv":
        write_azure(trace, out)
    else:
        raise BadInputError("use .jsonl (Mooncake) or .csv (Azure)", path=out)
    doc = dict(
        path=str(out), requests=len(trace), tenants=trace.n_tenants, block_tokens=trace.block_tokens
    )
    emit_json(doc) if json_out else out_console.print(doc)


@app.command()
@handle_errors
def costmodel(
    model: str = typer.Option("llama-3-8b", "--model"),
    gpu: str = typer.Option("a100-80g", "--gpu"),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Show the roofline cost-model coefficients for a (model, GPU) pair."""
    from schedlab.llm.costmodel import CostModel

    cost = CostModel.from_specs(model, gpu)
    doc = dict(
        cost.describe(),
        kv_capacity_tokens=cost.kv_capacity_tokens(),
        prefill_1k_ms=cost.prefill_ms([1024]),
        decode_b32_ctx1k_ms=cost.decode_ms(32 * 1024, 32),
    )
    if json_out:
        emit_json(doc)
        return
    table = Table("coefficient", "value")
    for key, value in doc.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    out_console.print(table)
