"""``schedlab xbucket ...``: replay traces, run real commands, compare with the reference.

X-Bucket (../shared/papers/15-xbucket.md). Every command is one library call; ``--json``
prints exactly one JSON document on stdout.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console
from schedlab.core.errors import BadInputError

app = typer.Typer(help="X-Bucket: online bucketing resource allocation for dynamic workflows.",
                  no_args_is_help=True, add_completion=False)


def _table(rows: list[dict], columns: list[str]) -> None:
    from rich.table import Table

    table = Table(*columns)
    for row in rows:
        table.add_row(*(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])
                        for c in columns))
    out_console.print(table)


@app.command()
@handle_errors
def replay(
    trace: Path = typer.Option(..., "--trace", help="Reports (' -- ' text, CSV, Parquet)."),
    algorithm: str = typer.Option("all", "--algorithm", "-a", help="An allocator name or 'all'."),
    workers: int = typer.Option(1, "--workers", min=1, help="Workers in the pool."),
    slots: int = typer.Option(1, "--slots", min=0, help="Tasks at once per worker (0 = packed)."),
    semantics: str = typer.Option("peak", "--semantics",
                                  help="What a failure reports: 'peak' or 'allocation'."),
    kill_fraction: float = typer.Option(1.0, "--kill-fraction",
                                        help="Share of wall time a failed attempt ran."),
    seed: int = typer.Option(0, "--seed", help="Seed of the probabilistic allocators."),
    per_resource: bool = typer.Option(False, "--per-resource",
                                      help="Replay each resource alone (as cctools' harness)."),
    blind: bool = typer.Option(False, "--category-blind",
                               help="Merge every task category into one."),
    whole_machine: str = typer.Option("trace-max", "--whole-machine",
                                      help="Worker: trace-max, covering or CORES,MEM_MB,DISK_MB."),
    out: Path | None = typer.Option(None, "--out", help="Also write the table (.csv/.parquet)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Replay a trace under one allocator or all of them: waste, efficiency, retries, makespan.

    Default: the joint replay (a task short of any type fails on all three), per category,
    Whole Machine = the trace's largest value of each type."""
    from schedlab.core.io import write_frame
    from schedlab.xbucket.compare import algorithms_for, compare
    from schedlab.xbucket.simulator import ReplayConfig
    from schedlab.xbucket.types import Machine
    from schedlab.xbucket.workloads import read_reports

    names = algorithms_for([], algorithm) if algorithm != "all" else None  # bad name: exit 2
    tasks = read_reports(trace)
    machine = Machine.parse(whole_machine, tasks)
    config = ReplayConfig(workers=workers, slots=slots or None, semantics=semantics,  # type: ignore[arg-type]
                          kill_fraction=kill_fraction, machine=machine)
    names = names or algorithms_for(tasks, algorithm)
    err_console.print(f"replaying {len(tasks)} tasks under {len(names)} allocator(s), "
                      f"{'per resource' if per_resource else 'jointly'}, worker {machine}")
    frame = compare(tasks, names, config, seed=seed, labels=dict(trace=trace.name),
                    per_resource=per_resource, blind=blind)
    if out is not None:
        write_frame(frame, out)
    rows = frame.to_dicts()
    if json_out:
        emit_json(rows)
        return
    _table(rows, ["algorithm", "mode", "waste_cores", "waste_memory", "waste_disk",
                  "efficiency_cores", "efficiency_memory", "efficiency_disk", "retries",
                  "makespan"])


def _commands_from(path: Path | None, command: list[str] | None, repeat: int) -> list[tuple]:
    """(category, argv) pairs from a file (``[category] command ...`` per line) or argv."""
    pairs: list[tuple[str, list[str]]] = []
    if path is not None:
        from schedlab.core.io import parse_lines

        def parse(line: str, lineno: int) -> tuple[str, list[str]] | None:
            text = line.strip()
            if not text or text.startswith("#"):
                return None
            category = "default"
            if text.startswith("["):
                category, _, text = text[1:].partition("]")
            argv = shlex.split(text)
            if not argv:
                raise BadInputError("has no command", field="command")
            return category.strip() or "default", argv

        pairs.extend(parse_lines(path, parse))
    if command:
        pairs.extend(("default", list(command)) for _ in range(repeat))
    if not pairs:
        raise BadInputError("give a command after -- or --commands FILE", field="command")
    return pairs


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@handle_errors
def run(
    ctx: typer.Context,
    algorithm: str = typer.Option("pg-bucket", "--algorithm", "-a", help="Allocator name."),
    commands: Path | None = typer.Option(None, "--commands",
                                         help="File: one command per line, '[category] cmd'."),
    repeat: int = typer.Option(1, "--repeat", min=1, help="Run the command after -- N times."),
    parallel: int = typer.Option(1, "--parallel", min=1, help="Attempts at once."),
    first_memory: float = typer.Option(1000.0, "--first-memory", help="Sampling-phase MB."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run real commands under predicted allocations, killing and retrying those that exceed."""
    from schedlab.xbucket.executor import LocalExecutor, TaskSpec
    from schedlab.xbucket.policies import make_allocator
    from schedlab.xbucket.types import Defaults, Resources

    if not first_memory > 0 or first_memory == float("inf"):
        raise BadInputError(f"must be a finite number > 0, got {first_memory}",
                            field="first_memory")
    pairs = _commands_from(commands, ctx.args, repeat)
    defaults = Defaults(first=Resources(1.0, first_memory, 1000.0))
    executor = LocalExecutor(make_allocator(algorithm, defaults=defaults), parallel=parallel)
    err_console.print(f"running {len(pairs)} task(s); memory enforced by "
                      f"{executor.memory_enforcement}")
    specs = [TaskSpec(f"task{i}", category, command=argv) for i, (category, argv) in
             enumerate(pairs)]
    rows = []
    for record in executor.run(specs):
        last = record.attempts[-1]
        rows.append(dict(task=record.task_id, returncode=record.returncode,
                         attempts=len(record.attempts), memory_mb=last.usage.memory,
                         allocated_mb=last.allocation.memory, disk_mb=last.usage.disk,
                         cores_used=last.usage.cores, wall_s=last.wall_time,
                         error=str(record.exception or "")))
    if json_out:
        emit_json(rows)
        return
    _table(rows, list(rows[0]))


@app.command()
@handle_errors
def generate(
    workflow: str = typer.Option("bimodal", "--workflow", help="A synthetic workflow name."),
    tasks: int = typer.Option(2000, "--tasks", min=1),
    seed: int = typer.Option(0, "--seed"),
    out: Path = typer.Option(..., "--out", help="Where to write it (.csv or .parquet)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Write a seeded synthetic workflow as a trace that ``replay --trace`` reads."""
    import polars as pl

    from schedlab.core.io import write_frame
    from schedlab.xbucket.workloads import synthetic

    rows = [dict(task_id=t.task_id, core=t.peak.cores, memory=t.peak.memory,
                 virtual_memory=0.0, disk=t.peak.disk, time=t.wall_time, average_cores=0.0,
                 tag=t.category) for t in synthetic(workflow, tasks, seed)]
    write_frame(pl.DataFrame(rows), out)
    document = dict(workflow=workflow, tasks=tasks, seed=seed, out=str(out))
    if json_out:
        emit_json(document)
    else:
        out_console.print(f"wrote {tasks} tasks of {workflow} to {out}")


@app.command()
@handle_errors
def reference(
    cctools: Path = typer.Option(..., "--cctools", help="A cctools tree with libdttools.a built."),
    trace: list[Path] = typer.Option(..., "--trace", help="Trace(s) to replay (repeatable)."),
    algorithm: list[str] = typer.Option(["pe-bucket", "de-bucket"], "--algorithm", "-a"),
    limit: int = typer.Option(0, "--limit", min=0, help="Only the first N tasks (0 = all)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Replay traces through the reference C implementation and ours, side by side."""
    import polars as pl

    from schedlab.xbucket.reference import MODES, build_driver, side_by_side
    from schedlab.xbucket.workloads import read_reports

    for name in algorithm:
        if name not in MODES:
            raise BadInputError(f"'{name}' has no reference mode; valid: {', '.join(MODES)}",
                                field="algorithm")
    driver = build_driver(cctools)
    frames = []
    for path in trace:
        tasks = read_reports(path)
        tasks = tasks[:limit] if limit else tasks
        err_console.print(f"{path.name}: {len(tasks)} tasks")
        frames.append(side_by_side(driver, tasks, path.stem, tuple(algorithm)))
    rows = pl.concat(frames).to_dicts()
    if json_out:
        emit_json(rows)
        return
    _table(rows, ["workflow", "algorithm", "semantics", "ours_efficiency_mean",
                  "ref_efficiency_mean", "ours_retries", "ref_retries", "ref_predict_p99_us"])
