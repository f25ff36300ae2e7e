"""``schedlab redpanda ...``: compile MLIR kernels for a dataflow CGRA and evaluate flows.

RedPanda (../shared/papers/08-redpanda.md). Every command is one library call; ``--json``
prints exactly one JSON document on stdout; malformed MLIR is reported with xDSL's diagnostic
(file, line, column), never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console

app = typer.Typer(help="RedPanda: one compiler (shared dataflow IR) for dataflow CGRAs and DHLS.",
                  no_args_is_help=True, add_completion=False)


def _print_table(rows: list[dict], columns: list[str], title: str = "") -> None:
    from rich.table import Table

    table = Table(*columns, title=title or None)
    for row in rows:
        table.add_row(*(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])
                        for c in columns))
    out_console.print(table)


@app.command()
@handle_errors
def compile(  # noqa: A001 - the command is called compile
    kernel: Path = typer.Argument(..., help="A kernel: C (.c) or MLIR (.mlir: func/scf/"
                                  "arith/memref, affine lowered)."),
    target: str = typer.Option("cgra", "--target", help="Back end: cgra or dhls."),
    rows: int | None = typer.Option(None, "--rows", min=1, help="Mesh rows (default 4; with "
                                    "neither --rows, --cols nor --arch a spatial kernel that "
                                    "does not fit or route on 4x4 gets the smallest square "
                                    "mesh it routes on, up to 8x8, else --temporal 4x4: the "
                                    "output says which)."),
    cols: int | None = typer.Option(None, "--cols", min=2, help="Mesh columns (default 4)."),
    temporal: bool = typer.Option(False, "--temporal", help="Time-multiplex PEs (contexts)."),
    contexts: int = typer.Option(16, "--contexts", min=1, help="Instruction slots per PE."),
    flow: str = typer.Option("redpanda", "--flow", help="redpanda or a baseline flow."),
    mapper: str = typer.Option("pnr", "--mapper", help="cgra: pnr = place and route on --arch "
                               "or on a --rows x --cols mesh (--contexts, --link-capacity; "
                               "memory PEs on both border columns, 2 ports per array), "
                               "emitting and executing the per-cycle configuration; "
                               "schedule-only (list scheduler) or milp (HiGHS): the old "
                               "schedule-only mappers, NOT routed (links unlimited, no "
                               "configuration)."),
    link_capacity: int = typer.Option(1, "--link-capacity", min=1, max=64, help="cgra pnr "
                                      "without --arch: words per directed link per cycle."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs simulated."),
    emit_ir: Path | None = typer.Option(None, "--emit-ir", help="Write the RedPanda IR here."),
    out: Path | None = typer.Option(None, "--out", help="dhls: directory for Verilog + tb; "
                                    "cgra: directory for the configuration JSON."),
    synth: bool = typer.Option(True, "--synth/--no-synth", help="dhls: run Yosys."),
    index_bits: int = typer.Option(32, "--index-bits", help="dhls: width of index values."),
    mem_ports: str = typer.Option("2", "--mem-ports", help="dhls: ports per array (2 = "
                                  "dual-port BRAM; 0 = one per access; '2,A=1' per array)."),
    arch: str | None = typer.Option(None, "--arch", help="cgra: architecture JSON file or "
                                    "shipped name (mesh4x4, hycube4x4, torus4x4, mesh8x8): "
                                    "place and route + per-cycle configuration."),
    config_out: Path | None = typer.Option(None, "--config-out", help="cgra pnr: write the "
                                           "configuration JSON here (default: "
                                           "<kernel>.cgra.json in --out, else next to the "
                                           "kernel)."),
    router: str = typer.Option("pathfinder", "--router", help="cgra pnr: pathfinder "
                               "(negotiated congestion) or exact (HiGHS; small arrays)."),
    inputs: Path | None = typer.Option(None, "--inputs", help="Input data: .npz or .json "
                                       "(arrays/scalars by argument name); missing names get "
                                       "seeded random values."),
    simulate: bool = typer.Option(True, "--simulate/--no-simulate", help="Check the compiled "
                                  "kernel on inputs (interpreter + simulator)."),
    max_cycles: int = typer.Option(1_000_000, "--max-cycles", min=1, help="Simulator cycle "
                                   "limit."),
    max_steps: int = typer.Option(2_000_000, "--max-steps", min=1, help="Interpreter limit on "
                                  "loop iterations."),
    time_limit: float = typer.Option(30.0, "--time-limit", min=0.1, help="Seconds each check "
                                     "(interpreter, simulator) may run."),
    function: str | None = typer.Option(None, "--function", help="C: the kernel function "
                                        "(default: the only one, or the file's stem)."),
    define: list[str] = typer.Option([], "--define", "-D", help="C: NAME=VALUE overriding a "
                                     "#define (e.g. -D N=16); repeatable."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Compile KERNEL for a CGRA (placed, routed, configuration executed) or DHLS (Verilog)."""
    from schedlab.core.errors import UnknownNameError
    from schedlab.core.io import write_text
    from schedlab.redpanda.api import Limits, compile_file

    common = dict(inputs=inputs, simulate_run=simulate, function=function,
                  defines=_defines(define),
                  limits=Limits(max_cycles=max_cycles, max_steps=max_steps,
                                time_limit=time_limit))
    if inputs is not None and not inputs.is_file():
        from schedlab.core.errors import BadInputError

        raise BadInputError("no such inputs file", path=inputs, field="--inputs")
    if target == "dhls":
        _compile_dhls(kernel, out, flow, seed, synth, index_bits, emit_ir, json_out,
                      dict(common, mem_ports=mem_ports))
        return
    if target != "cgra":
        raise UnknownNameError("target", target, ["cgra", "dhls"])
    if mapper == "pnr" and config_out is None:
        name = f"{kernel.stem}.cgra.json"
        config_out = out / name if out is not None else kernel.with_name(name)
    report = compile_file(kernel, flow=flow, rows=rows, cols=cols, contexts=contexts,
                          mode="temporal" if temporal else "spatial", mapper=mapper, seed=seed,
                          arch=arch, link_capacity=link_capacity, router=router,
                          config_out=config_out, **common)
    ir = report.pop("ir")
    if emit_ir is not None:
        write_text(emit_ir, ir)
    if json_out:
        emit_json(report)
        return
    where = report["metrics"].get("arch", f"{rows or 4}x{cols or 4}")
    _print_table(report["schedule"], ["node", "op", "pe", "cycle", "slot"],
                 title=f"{report['kernel']} on {where} ({report['mode']})")
    metrics = dict(report["metrics"])
    kinds = metrics.pop("instruction_kinds")
    _print_table([dict(metric=k, value=v) for k, v in metrics.items()], ["metric", "value"])
    out_console.print("instructions by kind: " + ", ".join(f"{k}={v}" for k, v in kinds.items()))
    for path in report.get("files", {}).values():
        out_console.print(f"wrote {path}")
    if mapper != "pnr":
        err_console.print(f"--mapper {mapper}: a schedule only (no routes, no configuration, "
                          "links unlimited); the default --mapper pnr places and routes")
    if report.get("fabric_note"):
        err_console.print(report["fabric_note"])
    if report.get("simulation_note"):
        err_console.print(report["simulation_note"])


def _defines(items: list[str]) -> dict[str, int] | None:
    """``-D NAME=VALUE`` options (integers) -> a dict; one-line error naming a bad item."""
    from schedlab.core.errors import BadInputError

    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise BadInputError(f"expected NAME=VALUE, got '{item}'", field="--define")
        try:
            out[name.strip()] = int(value, 0)
        except ValueError:
            raise BadInputError(f"{name}: value '{value}' is not an integer",
                                field="--define") from None
    return out or None


def _compile_dhls(kernel: Path, out: Path | None, flow: str, seed: int, synth: bool,
                  index_bits: int, emit_ir: Path | None, json_out: bool, common: dict) -> None:
    from schedlab.core.io import write_text
    from schedlab.redpanda.api import compile_dhls_file

    out = out if out is not None else kernel.with_name(f"{kernel.stem}_dhls")
    report = compile_dhls_file(kernel, out, flow=flow, seed=seed, synthesize=synth,
                               index_bits=index_bits, **common)
    ir = report.pop("ir")
    if emit_ir is not None:
        write_text(emit_ir, ir)
    if json_out:
        emit_json(report)
        return
    metrics = {k: v for k, v in report["metrics"].items() if k != "loop_ii"}
    _print_table([dict(metric=k, value=v) for k, v in metrics.items()], ["metric", "value"],
                 title=f"{report['kernel']} as a DHLS circuit ({flow})")
    out_console.print("loop IIs (buffer MILP): " + str(report["metrics"]["loop_ii"]))
    out_console.print("wrote " + ", ".join(report["files"].values()))
    for note in report["notes"]:
        err_console.print(note)


@app.command()
@handle_errors
def evaluate(
    kernels: str = typer.Option("all", "--kernels", help="Comma-separated suite kernels."),
    size: int = typer.Option(4, "--size", min=2, help="Problem size N."),
    flows: str = typer.Option("all", "--flows", help="Comma-separated flows."),
    seed: int = typer.Option(0, "--seed"),
    language: str = typer.Option("c", "--language", help="c (the C suite, as the experiments) "
                                 "or mlir."),
    out: Path | None = typer.Option(None, "--out", help="Also write the table (.csv/.parquet)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run suite kernels under flows on spatial and temporal CGRAs (checked vs xDSL)."""
    from schedlab.core.errors import UnknownNameError
    from schedlab.core.io import write_frame
    from schedlab.redpanda.experiment import run_suite
    from schedlab.redpanda.policies import FLOWS
    from schedlab.redpanda.workloads import C_KERNELS, KERNELS

    if language not in ("c", "mlir"):
        raise UnknownNameError("language", language, ["c", "mlir"])
    suite = C_KERNELS if language == "c" else KERNELS
    names = list(suite) if kernels == "all" else [k.strip() for k in kernels.split(",")]
    for name in names:
        if name not in suite:
            raise UnknownNameError("kernel", name, suite)
    chosen = list(FLOWS) if flows == "all" else [f.strip() for f in flows.split(",")]
    for name in chosen:
        if name not in FLOWS:
            raise UnknownNameError("flow", name, list(FLOWS))
    err_console.print(f"evaluating {len(names)} kernel(s) x {len(chosen)} flow(s)")
    frame = run_suite(names, size, seed, chosen, source=language)
    if out is not None:
        write_frame(frame, out)
    rows = frame.drop("branch_modes").to_dicts()
    if json_out:
        emit_json(rows)
        return
    _print_table(rows, ["kernel", "flow", "mode", "instructions", "cycles", "ii", "min_ii",
                        "pes_used", "efficiency"])


@app.command()
@handle_errors
def kernels(
    emit: Path | None = typer.Option(None, "--emit", help="Write the suite here."),
    size: int = typer.Option(4, "--size", min=2, help="Problem size N."),
    language: str = typer.Option("mlir", "--language", help="mlir or c (the C suite)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List the kernel suite, or write it (sizes substituted) as plain MLIR or C files."""
    from schedlab.core.errors import UnknownNameError
    from schedlab.core.io import write_text
    from schedlab.redpanda.workloads import (
        C_KERNELS,
        IRREGULAR,
        KERNELS,
        c_kernel_text,
        kernel_text,
    )

    if language not in ("mlir", "c"):
        raise UnknownNameError("language", language, ["mlir", "c"])
    names = KERNELS if language == "mlir" else C_KERNELS
    rows = [dict(kernel=k, irregular=k in IRREGULAR) for k in names]
    if emit is not None:
        for k in names:
            text = kernel_text(k, size) if language == "mlir" else c_kernel_text(k, size)
            write_text(emit / f"{k}.{language}", text)
    if json_out:
        emit_json(rows)
    else:
        _print_table(rows, ["kernel", "irregular"])


@app.command()
@handle_errors
def flows(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the compilation flows (RedPanda and its baselines)."""
    from schedlab.redpanda.policies import FLOWS

    rows = [dict(flow=name, **{k: getattr(f(), k) for k in ("pipelined", "fuse", "size_buffers",
                                                            "precise_memory", "branch_choice",
                                                            "dependence_analysis",
                                                            "steer_all")})
            for name, f in FLOWS.items()]
    if json_out:
        emit_json(rows)
    else:
        _print_table(rows, list(rows[0]))
