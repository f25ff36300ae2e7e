"""``schedlab dataflowdrs ...``: trace, run, analyze, predict and optimize workflows.

DataFlowDrs (paper 09). Every command is one library call; ``--json`` prints one JSON document
on stdout, progress goes to stderr, and bad input is one line naming the file/line/field.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import ConfigError

app = typer.Typer(help="DataFlowDrs: data-flow performance diagnosis for workflows.",
                  no_args_is_help=True, add_completion=False)

JSON = typer.Option(False, "--json", help="Print one JSON document on stdout.")


def _pairs(items: list[str], option: str, cast=str) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"expected GROUP=VALUE, got {item!r}", field=option)
        try:
            out[key] = cast(value)
        except ValueError as exc:
            raise ConfigError(f"bad value in {item!r}", field=option) from exc
    return out


def _show_diagnosis(summary: dict) -> None:
    from rich.table import Table

    out_console.print(f"makespan {summary['makespan_s']:.3f} s, {summary['tasks']} tasks, "
                      f"DFL compressed {summary['compression']['reduction']:.1f}x; "
                      f"input: {summary.get('input', summary.get('source', 'trace'))}")
    io = summary.get("io") or {}
    if io:
        out_console.print(f"I/O calls: {io['io_seconds']:.3f} s on the {io['scope']} = "
                          f"{io['io_share']:.1%} of the run")
        if io.get("verdict"):
            out_console.print(io["verdict"])
        aside = io.get("runtime_files")
        if aside:
            out_console.print(f"runtime files set aside (MPI shm, /proc, /dev, streams): "
                              f"{aside['files']} ({aside['seconds']:.3f} s in their calls, "
                              f"e.g. {', '.join(aside['examples'][:2])})")
    # Drishti reports insights, not times: its "saving" is an order score (drishti.py)
    unit = "order score" if summary.get("diagnoser") == "drishti" else "saving (s)"
    table = Table("#", "kind", "target", unit, "evidence", title="bottlenecks")
    for i, b in enumerate(summary["bottlenecks"], 1):
        table.add_row(str(i), b["kind"], b["target"], f"{b['saving_s']:.3f}", b["evidence"])
    if summary["bottlenecks"]:
        out_console.print(table)
    else:
        out_console.print("bottlenecks: none found")
    for r in summary["recommendations"]:
        out_console.print(f"- [bold]{r['action']}[/bold] {r['target']} -> {r['value']}: "
                          f"{r['rationale']}")
    for issue in summary["issues"]:
        err_console.print(f"[yellow]skipped:[/yellow] {issue}")


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@handle_errors
def trace(
    command: list[str] = typer.Argument(..., help="The command to trace (after --)."),
    out: Path = typer.Option(Path("dfd-trace"), "--out", help="Trace directory to write."),
    data_dir: list[Path] = typer.Option(None, "--data-dir",
                                        help="Directory whose files to trace (repeatable; "
                                             "default: the current directory)."),
    shared_dir: Path = typer.Option(None, "--shared-dir",
                                    help="Also throttle this directory like a shared FS."),
    tracer: str = typer.Option("auto", "--tracer",
                               help="auto (dftracer-stdio where dftracer is installed, else "
                                    "strace) | dftracer-stdio | dftracer | strace"),
    allow_empty: bool = typer.Option(False, "--allow-empty",
                                     help="Exit 0 even when no I/O event was traced."),
    json_out: bool = JSON,
) -> None:
    """Trace an unmodified command's file I/O with strace or dftracer (LD_PRELOAD).

    Every path is traced and the calls on files under --data-dir are kept afterwards
    (relative names resolved against the process's working directory); child processes
    are followed. A run with no I/O event under --data-dir is an error (exit 3) unless
    --allow-empty."""
    import shutil

    from schedlab.core.errors import BadInputError
    from schedlab.dataflowdrs.runner import run_command
    from schedlab.dataflowdrs.tiers import DEFAULT_TIERS, Tier, TierLayout
    from schedlab.dataflowdrs.tracer import make_tracer

    if shutil.which(command[0]) is None:  # run without a shell: a path or a name on PATH
        raise BadInputError(f"no such command (not an executable file, not on PATH): "
                            f"{command[0]}", field="command")
    dirs = [d.resolve() for d in (data_dir or [Path.cwd()])]
    roots = {f"dir{i}-{d.name or 'root'}": d for i, d in enumerate(dirs)}
    tiers = {name: Tier(name, None, 0.0) for name in roots}
    if shared_dir is not None:
        roots["shared"] = shared_dir.resolve()
        tiers["shared"] = DEFAULT_TIERS["shared"]
    state = out.resolve() / ".throttle"
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"cannot create the trace directory: {exc.strerror}",
                            path=out, field="out") from None
    layout = TierLayout(roots=roots, tiers=tiers, state_dir=state)
    chosen = make_tracer(tracer)
    record = run_command(command, chosen, out, layout,
                         name=Path(command[0]).name if command else "command")
    from schedlab.dataflowdrs.traces import read_trace

    trace = read_trace(out)
    events = trace.ops.height
    result = dict(trace_dir=str(out), seconds=record.makespan,
                  files=len([*out.glob("*.pfw"), *out.glob("strace-*")]), io_events=events,
                  processes=trace.tasks.height, returncode=trace.meta.get("returncode"),
                  tracer=chosen.name)
    emit_json(result) if json_out else err_console.print(
        f"traced with {chosen.name} in {record.makespan:.3f} s -> {out} "
        f"({result['files']} process files, "
        f"{events} I/O events on files under {', '.join(str(d) for d in dirs)} from "
        f"{trace.tasks.height} processes)")
    if events == 0:
        err_console.print(
            f"[bold red]warning:[/bold red] no I/O event on files under "
            f"{', '.join(str(d) for d in dirs)}: wrong --data-dir? (--tracer {chosen.name})"
            + ("; dftracer does not see descriptors a shell dup2()s (redirections, dd) or "
               "mmap'd reads: try --tracer strace" if chosen.name.startswith("dftracer")
               else "")
            + (f"; the command exited with {result['returncode']}"
               if result["returncode"] not in (None, 0) else ""))
        if not allow_empty:
            raise typer.Exit(3)


@app.command()
@handle_errors
def run(
    workflow: str = typer.Argument(..., help="genomes | mapreduce | dlreader"),
    out: Path = typer.Option(Path("dfd-trace"), "--out", help="Trace directory to write."),
    workdir: Path = typer.Option(Path("dfd-work"), "--workdir", help="Where tiers live."),
    scale: int = typer.Option(6, "--scale", min=1, help="Individuals / splits / shards."),
    size_kb: int = typer.Option(1024, "--size-kb", min=1, help="Input size per unit (KiB)."),
    parallelism: int = typer.Option(2, "--parallelism", min=1, help="Concurrent tasks."),
    default_tier: str = typer.Option("local", "--default-tier", help="tmpfs|local|shared"),
    tier: list[str] = typer.Option(None, "--tier", help="FILEGROUP=TIER (repeatable)."),
    block: list[str] = typer.Option(None, "--block", help="TASKGROUP=BYTES (repeatable)."),
    merge_width: int = typer.Option(1, "--merge-width", min=1, help="Parallel merge parts."),
    inject: str = typer.Option(None, "--inject", help="slow-tier|small-io|serial-task"),
    seed: int = typer.Option(0, "--seed", help="Seed for --inject's choice of group."),
    tracer: str = typer.Option("dftracer", "--tracer", help="dftracer|dftracer-stdio|untraced"),
    engine: str = typer.Option("builtin", "--engine", help="Workflow system: builtin | parsl."),
    keep_data: bool = typer.Option(False, "--keep-data",
                                   help="Keep the workflow's files on the tiers afterwards."),
    json_out: bool = JSON,
) -> None:
    """Run a built-in workflow as real processes and write its trace."""
    from schedlab.dataflowdrs.engine import Workspace, run_config
    from schedlab.dataflowdrs.workloads import WorkflowConfig, check_groups
    from schedlab.dataflowdrs.workloads import inject as plant

    cfg = WorkflowConfig(workflow=workflow, scale=scale, size_kb=size_kb,
                         parallelism=parallelism, default_tier=default_tier,
                         tiers=_pairs(tier, "tier"), blocks=_pairs(block, "block", int),
                         merge_width=merge_width)
    truth = None
    if inject:
        cfg, truth = plant(cfg, inject, seed)
    space = Workspace.create(workdir)
    try:
        check_groups(cfg, space.layout)
        record = run_config(cfg, space, tracer=tracer, out_dir=out, engine=engine)
    finally:
        if not keep_data:
            space.close()
    result = dict(trace_dir=str(out), makespan_s=record.makespan, tasks=len(record.events),
                  injected=truth.__dict__ if truth else None)
    emit_json(result) if json_out else out_console.print(
        f"{workflow}: {len(record.events)} tasks in {record.makespan:.3f} s -> {out}"
        + (f" (injected {truth.kind} in {truth.target})" if truth else ""))


@app.command()
@handle_errors
def analyze(
    trace_dir: Path = typer.Argument(..., help="A trace directory, a .darshan log or a "
                                               "folder of them."),
    out: Path = typer.Option(None, "--out", help="Report directory (default TRACE_DIR/report; "
                                                 "for a .darshan file ./<name>-report)."),
    diagnoser: str = typer.Option("dataflowdrs", "--diagnoser",
                                  help="dataflowdrs | io-volume | io-time | task-time | drishti"),
    sankey: bool = typer.Option(True, "--sankey/--no-sankey", help="Write the Sankey diagram."),
    png: bool = typer.Option(True, "--png/--no-png", help="Also export the Sankey as PNG."),
    json_out: bool = JSON,
) -> None:
    """Report: DFL Sankey, timeline, ranked bottlenecks and recommendations."""
    from schedlab.dataflowdrs.engine import diagnose, write_report

    diagnosis = diagnose(trace_dir, diagnoser)
    # a log file's report goes to ./<log>-report (never next to a shared data set)
    default = trace_dir / "report" if trace_dir.is_dir() else Path(f"{trace_dir.stem}-report")
    summary = write_report(diagnosis, out or default, sankey=sankey, png=png)
    events = diagnosis.analysis.trace.ops.height if diagnosis.analysis.trace else 1
    if events == 0:
        err_console.print(f"[bold red]warning:[/bold red] {trace_dir} holds no I/O event: "
                          "nothing to diagnose (was the right --data-dir traced?)")
    elif not summary["bottlenecks"]:
        err_console.print(f"[yellow]note:[/yellow] {events} I/O events, no bottleneck found "
                          f"by {diagnoser}")
    if json_out:
        emit_json(summary)
        return
    _show_diagnosis(summary)
    err_console.print(f"report written to {summary.get('report_dir', out)}")


@app.command()
@handle_errors
def predict(
    trace_dirs: list[Path] = typer.Argument(..., help="Runs at different scales."),
    scale: float = typer.Option(..., "--scale", help="The scale to predict."),
    scales: str = typer.Option(None, "--scales",
                               help="Comma-separated scales of TRACE_DIRS (default: from "
                                    "each run's meta.json)."),
    out: Path = typer.Option(None, "--out", help="Write predictions (.csv/.parquet)."),
    json_out: bool = JSON,
) -> None:
    """Fit interpretable scaling models per DFL edge and task group; predict at --scale."""
    from schedlab.core.io import write_frame
    from schedlab.dataflowdrs.engine import predict as run_predict

    parsed = None
    if scales:
        try:
            parsed = [float(s) for s in scales.split(",")]
        except ValueError as exc:
            raise ConfigError(f"not a list of numbers: {scales!r}", field="scales") from exc
    frame = run_predict(trace_dirs, scale, parsed)
    if out is not None:
        write_frame(frame, out)
    if json_out:
        emit_json(frame.to_dicts())
        return
    from rich.table import Table

    table = Table("quantity", "name", "model", "formula", "cv error", "predicted")
    for r in frame.iter_rows(named=True):
        table.add_row(r["quantity"], r["name"], r["model"], r["formula"],
                      f"{r['cv_error']:.3f}", f"{r['predicted']:.4g}")
    out_console.print(table)


@app.command()
@handle_errors
def optimize(
    workflow: str = typer.Argument(..., help="genomes | mapreduce | dlreader"),
    inject: str = typer.Option(None, "--inject", help="Plant a bottleneck first."),
    seed: int = typer.Option(0, "--seed"),
    scale: int = typer.Option(5, "--scale", min=1),
    steps: int = typer.Option(2, "--steps", min=1, help="Diagnose/apply/re-run rounds."),
    diagnoser: str = typer.Option("dataflowdrs", "--diagnoser"),
    json_out: bool = JSON,
) -> None:
    """Diagnose, apply the top recommendation, re-run and measure; repeat --steps times."""
    from schedlab.dataflowdrs.optimize import optimize_loop
    from schedlab.dataflowdrs.workloads import WorkflowConfig
    from schedlab.dataflowdrs.workloads import inject as plant

    cfg = WorkflowConfig(workflow=workflow, scale=scale)
    if inject:
        cfg, _ = plant(cfg, inject, seed)
    history = optimize_loop(cfg, steps, diagnoser)
    if json_out:
        emit_json(history)
        return
    for h in history:
        out_console.print(f"step {h['step']}: {h['makespan_s']:.3f} s"
                          + (f"  then {h['action']} {h['target']} -> {h['value']}"
                             if h.get("action") else ""))


@app.command("diagnosers")
@handle_errors
def list_diagnosers(json_out: bool = JSON) -> None:
    """List the diagnosers (the paper's method and the baselines)."""
    from schedlab.dataflowdrs.policies import DIAGNOSERS

    rows = [dict(name=n, doc=(cls.__doc__ or "").strip().splitlines()[0])
            for n, cls in DIAGNOSERS.items()]
    emit_json(rows) if json_out else [out_console.print(f"{r['name']:12s} {r['doc']}")
                                      for r in rows]
