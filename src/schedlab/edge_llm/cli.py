"""``schedlab edge-llm ...``: replay requests through a router, analyse kernel residency.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.io import ensure_directory, write_frame, write_text

app = typer.Typer(
    help="Edge-cloud LLM scheduler: latency-aware routing across device, edge and cloud.",
    no_args_is_help=True,
    add_completion=False,
)

SUMMARY_KEYS = (
    "policy",
    "requests",
    "refused",
    "truncated",
    "dropped",
    "mean_e2e",
    "p95_e2e",
    "mean_ttft",
    "mean_tpot",
    "slo",
    "goodput",
    "n_cloud",
    "n_split",
    "n_mix",
    "n_disagg",
    "padding_waste",
)


@app.command()
@handle_errors
def simulate(
    policy: list[str] = typer.Option(
        ["online"],
        "--policy",
        help="online|online-paper|online-nosm|cloud|split|mix|disagg|distserve|splitwise "
        "(repeat for several); NAME+admit adds deadline-aware admission (a request predicted "
        "to miss its deadline is refused: counted in 'dropped' and as an SLO miss).",
    ),
    requests_csv: Path = typer.Option(
        None,
        "--requests",
        help="CSV/Parquet: arrival,input_len,output_len[,snr_up_db,snr_down_db,ttft_slo,tpot_slo].",
    ),
    trace: Path = typer.Option(
        None,
        "--trace",
        help="A schedlab.llm trace (Mooncake/Azure/"
        "BurstGPT) or a Mooncake CSV (timestamp_ms,input_length,output_length, as vendored); "
        "SNRs are drawn and SLOs set to 2 s / 80 ms.",
    ),
    trace_format: str = typer.Option(
        "auto", "--format", help="auto|mooncake|mooncake-csv|azure|burstgpt (for --trace)."
    ),
    n: int = typer.Option(1000, "--n", help="Generated requests (no --requests/--trace)."),
    rate: float = typer.Option(1.5, "--rate", help="Generated arrival rate, req/s."),
    snr_min: float = typer.Option(5.0, "--snr-min", help="Generated SNR range, dB."),
    snr_max: float = typer.Option(25.0, "--snr-max"),
    model: str = typer.Option("llama-3-8b", "--model"),
    cloud_gpu: str = typer.Option("a800", "--cloud-gpu"),
    edge_gpu: str = typer.Option("a6000", "--edge-gpu"),
    uplink_mhz: float = typer.Option(20.0, "--uplink-mhz"),
    backhaul_gbps: float = typer.Option(10.0, "--backhaul-gbps"),
    edge_sm_budget: float = typer.Option(1.0, "--edge-sm-budget"),
    cloud_sm_budget: float = typer.Option(
        1.0, "--cloud-sm-budget", help="Share of the cloud GPU's SMs (congestion)."
    ),
    wan_ms: float = typer.Option(30.0, "--wan-ms", help="One-way edge<->cloud latency."),
    alibaba: Path = typer.Option(
        None,
        "--alibaba",
        help="Arrivals from the Alibaba GenAI "
        "trace CSV (real), rescaled to --rate; lengths generated.",
    ),
    window_ms: float = typer.Option(20.0, "--window-ms"),
    context: str = typer.Option(
        "refuse", "--context",
        help="refuse|truncate requests beyond the model's context (refused: not served, counted).",
    ),
    seed: int = typer.Option(0, "--seed"),
    out: Path = typer.Option(
        None, "--out", help="Write requests_<policy>.parquet and summary.json here."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Replay a request stream through one or more routers and print a summary table."""
    from schedlab.edge_llm.config import EdgeConfig
    from schedlab.edge_llm.context import fit_to_context
    from schedlab.edge_llm.routers import make_router
    from schedlab.edge_llm.simulator import simulate as run
    from schedlab.llm.costmodel import get_model

    for name in policy:  # every name checked before anything is replayed
        make_router(name)

    if alibaba is not None:
        from schedlab.edge_llm.alibaba import replay

        if requests_csv is not None or trace is not None:
            from schedlab.core.errors import BadInputError

            raise BadInputError("give one of --requests, --trace, --alibaba", field="alibaba")
        reqs = replay(n, rate, seed, alibaba)
    else:
        reqs = _load(requests_csv, trace, n, rate, (snr_min, snr_max), seed, trace_format)
    cfg = (
        EdgeConfig(
            model=model,
            cloud_gpu=cloud_gpu,
            edge_gpu=edge_gpu,
            edge_sm_budget=edge_sm_budget,
            cloud_sm_budget=cloud_sm_budget,
            window_ms=window_ms,
            context=context,
        )
        .with_(uplink_mhz=uplink_mhz, backhaul_gbps=backhaul_gbps, wan_ms=wan_ms)
        .validate()
    )
    summaries = []
    fit = fit_to_context(reqs, get_model(model).max_context, context)
    if fit.refused or fit.truncated:
        err_console.print(fit.message(model, get_model(model).max_context, len(reqs)))
    for name in policy:
        err_console.print(f"replaying {len(fit.requests)} requests through {name} ...")
        result = run(reqs, name, cfg)
        summaries.append(result.summary)
        if out is not None:
            ensure_directory(out)
            write_frame(result.requests, out / f"requests_{name}.parquet")
    if out is not None:
        write_text(out / "summary.json", json.dumps(summaries, indent=2, default=str))
    if json_out:
        emit_json(
            dict(
                config=dict(model=model, cloud_gpu=cloud_gpu, edge_gpu=edge_gpu),
                summaries=summaries,
            )
        )
        return
    table = Table(*SUMMARY_KEYS, title=f"{model} on {cloud_gpu} (cloud) + {edge_gpu} (edge)")
    for s in summaries:
        table.add_row(
            *(f"{s[k]:.3g}" if isinstance(s[k], float) else str(s[k]) for k in SUMMARY_KEYS)
        )
    out_console.print(table)


def _load(
    requests_csv: Path | None,
    trace: Path | None,
    n: int,
    rate: float,
    snr: tuple[float, float],
    seed: int,
    fmt: str = "auto",
):
    from schedlab.core.errors import BadInputError
    from schedlab.edge_llm.workloads import from_trace, generate, mooncake, read_requests

    if requests_csv is not None and trace is not None:
        raise BadInputError("give --requests or --trace, not both", field="requests")
    if requests_csv is not None:
        return read_requests(requests_csv, seed)
    if trace is not None:
        from schedlab.llm.traces import READERS, read_trace

        valid = ("auto", "mooncake-csv", *READERS)
        if fmt not in valid:
            raise BadInputError(f"unknown trace format {fmt!r}; valid: {', '.join(valid)}",
                                field="format")
        if fmt == "mooncake-csv" or (fmt == "auto" and _is_mooncake_csv(trace)):
            return mooncake(1.0, seed, snr, path=trace)
        return from_trace(read_trace(trace, None if fmt == "auto" else fmt), seed, snr)
    return generate(n, rate, seed, snr)


def _is_mooncake_csv(path: Path) -> bool:
    """A CSV whose header names Mooncake's fields (the form of the vendored slice)."""
    if path.suffix.lower() != ".csv" or not path.is_file():
        return False
    with open(path, encoding="utf-8", errors="replace") as handle:
        header = {h.strip() for h in handle.readline().split(",")}
    return {"timestamp_ms", "input_length", "output_length"} <= header


@app.command()
@handle_errors
def residency(
    model: str = typer.Option("llama-3-8b", "--model"),
    gpu: str = typer.Option("a800", "--gpu"),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Joint-residency of the prefill/decode kernel pair for every operator shape of a model."""
    from schedlab.edge_llm.residency import analyse, summary

    rows = analyse(model, gpu)
    stats = summary(rows)
    if json_out:
        emit_json(dict(model=model, gpu=gpu, summary=stats, shapes=[r.__dict__ for r in rows]))
        return
    table = Table(
        "op",
        "tokens",
        "prefill kernel",
        "decode kernel",
        "fits",
        "wall",
        "guarded alternative",
        title=f"{model} on {gpu}",
    )
    for r in rows:
        table.add_row(
            r.op,
            str(r.tokens),
            r.prefill_kernel,
            r.decode_kernel,
            "yes" if r.dominant_fits else "no",
            r.wall,
            r.alternative or "-",
        )
    out_console.print(table)
    out_console.print(
        f"dominant pair fails on {stats['dominant_fail_share']:.1%} of "
        f"{stats['shapes']} shapes; guarded alternatives cover "
        f"{stats['guarded_weight_share']:.1%} of FLOP weight"
    )


@app.command()
@handle_errors
def generate(
    out: Path = typer.Argument(..., help="CSV to write."),
    n: int = typer.Option(1000, "--n"),
    rate: float = typer.Option(1.5, "--rate"),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Write a seeded heterogeneous request stream in the --requests CSV format."""
    from schedlab.edge_llm.workloads import generate as gen
    from schedlab.edge_llm.workloads import write_requests

    path = write_requests(gen(n, rate, seed), out)
    if json_out:
        emit_json(dict(path=str(path), requests=n))
    else:
        out_console.print(f"wrote {n} requests to {path}")


@app.command()
@handle_errors
def harness(
    n: int = typer.Option(30, "--n", help="Requests in the stream."),
    rate: float = typer.Option(4.0, "--rate", help="Arrival rate, req/s."),
    backhaul_mbps: float = typer.Option(20.0, "--backhaul-mbps"),
    backhaul_ms: float = typer.Option(5.0, "--backhaul-ms", help="One-way site<->site delay."),
    wan_ms: float = typer.Option(40.0, "--wan-ms", help="One-way device<->cloud delay."),
    shaping: str = typer.Option("auto", "--shaping", help="auto|tc|paced"),
    policy: list[str] = typer.Option(["cloud", "split", "mix", "disagg", "online"], "--policy"),
    repeats: int = typer.Option(
        3, "--repeats", help="Repeats (seeds 0..R-1, policy order rotated); mean and 95% CI."
    ),
    pin: bool = typer.Option(
        True, "--pin/--no-pin", help="Pin the cloud and edge processes to their own cores."
    ),
    nice: int = typer.Option(
        0, "--nice", help="Nice value of the sites and the client (negative: root; takes the "
        "cores from other jobs, so the sites run as the simulator assumes)."
    ),
    out: Path = typer.Option(
        None, "--out", help="Write harness_runs.parquet and harness_summary.json here."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Real split serving: cloud and edge processes (random-init Llama on CPU, each pinned to
    its own core), KV over a shaped TCP link; every mode and the router on the same streams,
    repeated, measured vs predicted per mode."""
    import polars as pl

    from schedlab.core.errors import BadInputError
    from schedlab.edge_llm.harness import MODES, LinkSpec, repeated

    for name in policy:
        if name != "online" and name not in MODES:
            raise BadInputError(
                f"unknown policy {name!r}; valid: online, {', '.join(MODES)}", field="policy"
            )
    link = LinkSpec(backhaul_mbps, backhaul_ms, wan_ms, shaping).validate()
    if out is not None:
        ensure_directory(out)
    err_console.print("starting the cloud and edge processes, profiling, replaying ...")
    result = repeated(repeats, n, rate, link, policies=tuple(policy), pin=pin, nice=nice)
    if out is not None:
        write_frame(pl.DataFrame(result["runs"]), out / "harness_runs.parquet")
        write_text(out / "harness_summary.json", json.dumps(result, indent=2))
    if json_out:
        emit_json(dict(link=link.__dict__, **result))
        return

    def ci(pair: tuple[float, float], unit: str = "") -> str:
        return f"{pair[0]:.3g} ± {pair[1]:.2g}{unit}"

    table = Table(
        "policy", "mean E2E (s)", "mean-E2E pred. error (%)", "E2E MAPE (%)", "TTFT MAPE (%)",
        "TPOT MAPE (%)", "site CPU share", "step MAPE, CPU time (%)", "modes (last repeat)",
        title=f"harness, {repeats} repeats ({result['shaping']} shaping, {backhaul_mbps:g} "
        f"Mbit/s backhaul, {wan_ms:g} ms WAN, pinned {result['pinned'] or 'no'}, nice {nice})",
    )
    for name, stats in result["per_mode"].items():
        last = [r for r in result["runs"] if r["policy"] == name][-1]
        modes = " ".join(f"{m}:{last[f'n_{m}']}" for m in MODES if last[f"n_{m}"])
        table.add_row(name, ci(stats["mean_e2e"]), ci(stats["mean_e2e_err"]),
                      ci(stats["e2e_mape"]), ci(stats["ttft_mape"]), ci(stats["tpot_mape"]),
                      ci(stats["cpu_share"]),
                      "/".join(ci(stats[k]) for k in ("prefill_cpu_mape", "decode_cpu_mape")
                               if k in stats) or "-", modes)
    out_console.print(table)
    if "online" in result:
        gains = ", ".join(f"{g:+.1f}%" for g in result["online"]["gain_vs_best_fixed"])
        out_console.print(f"online vs the best fixed mode per repeat: {gains} "
                          f"({result['online']['wins']} of {repeats} no worse)")
