"""The ``schedlab`` command: ``list``, ``reproduce`` and one sub-command group per system.

Each system's group lives in ``schedlab/<system>/cli.py`` as a Typer app named ``app`` and is
mounted here under its hyphenated name (``hydra-mcs``), with the underscore spelling as a
hidden alias. System CLIs import heavy libraries (torch, ray) inside commands, not at the top,
so ``schedlab --help`` stays fast.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path

import typer
from rich.table import Table

from schedlab import __version__
from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console, progress_bar
from schedlab.core.errors import ConfigError
from schedlab.core.executors import make_executor
from schedlab.core.experiment import (
    experiments,
    implemented_systems,
    module_exists,
    run_sweep,
)
from schedlab.core.io import ensure_directory
from schedlab.core.report import format_figure, write_report
from schedlab.core.systems import SYSTEMS, normalise_system

app = typer.Typer(
    name="schedlab",
    help="Scheduling and resource-management papers as measured, reusable software.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"schedlab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """schedlab: sixteen systems papers, one CLI."""


@app.command("list")
@handle_errors
def list_systems(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the sixteen systems and whether each is implemented."""
    done = implemented_systems()
    rows = [dict(system=s.name, title=s.title, topic=s.topic,
                 status="implemented" if s.name in done else "planned") for s in SYSTEMS]
    if json_out:
        emit_json(rows)
        return
    table = Table("system", "title", "topic", "status")
    for row in rows:
        style = "green" if row["status"] == "implemented" else "dim"
        table.add_row(row["system"], row["title"], row["topic"],
                      f"[{style}]{row['status']}[/{style}]")
    out_console.print(table)


@app.command()
@handle_errors
def reproduce(
    systems: list[str] = typer.Argument(None, help="Systems to run (default: all implemented)."),
    quick: bool = typer.Option(False, "--quick", help="Small scale: minutes on 2 cores."),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds per experiment (0..N-1)."),
    out: Path = typer.Option(Path("report"), "--out", help="Report directory."),
    executor: str = typer.Option("local", "--executor", help="local or ray."),
    jobs: int = typer.Option(None, "--jobs", min=1, help="Parallel workers (default: cores)."),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster to connect to."),
    json_out: bool = typer.Option(False, "--json", help="Print the claims table as JSON."),
) -> None:
    """Run the headline experiments, write a report, and exit 1 if a required claim fails."""
    names = [normalise_system(s) for s in systems] if systems else None
    ensure_directory(out)  # fail before running anything if --out is a file
    if executor not in ("local", "ray"):
        raise ConfigError(f"unknown executor '{executor}'; valid: local, ray", field="executor")
    selected = experiments(names)
    if not selected:
        raise ConfigError(f"no experiments registered for {', '.join(names or ['any system'])}")
    scale = "quick" if quick else "full"
    seed_list = list(range(seeds))
    pool = make_executor(executor, jobs, ray_address)
    try:
        with progress_bar() as progress:
            bars = {e.key: progress.add_task(e.key, total=len(seed_list)) for e in selected}
            sweep = run_sweep(selected, seed_list, scale, pool,
                              on_done=lambda job, _: progress.advance(bars[job.key]))
    finally:
        pool.close()
    command = "schedlab reproduce " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else ""
    claims = write_report(sweep, out, command=command.strip() or "schedlab reproduce")
    failed_required = claims.filter(claims["required"] & ~claims["holds"]).height
    if json_out:
        emit_json(dict(claims=claims.to_dicts(), failures=[f.__dict__ for f in sweep.failures],
                       out=str(out)))
    else:
        _print_summary(claims, sweep, out)
    if failed_required or sweep.failures:
        raise typer.Exit(1)


def _print_summary(claims, sweep, out: Path) -> None:
    table = Table("system", "claim", "target", "ours", "holds", title="Claims")
    for row in claims.iter_rows(named=True):
        holds = "[green]yes[/green]" if row["holds"] else "[red]no[/red]"
        table.add_row(row["system"], row["claim"],
                      f"{row['comparison']} {format_figure(row['target'])}",
                      format_figure(row["measured"], row["measured_ci95"]), holds)
    out_console.print(table)
    for failure in sweep.failures:
        err_console.print(f"[red]failed:[/red] {failure.system}.{failure.experiment} "
                          f"seed {failure.seed}: {failure.error}")
    out_console.print(f"report: {out / 'index.html'}")


def _system_app(info) -> typer.Typer:
    """The system's Typer app, or a stand-in that explains which extra to install."""
    try:
        return importlib.import_module(f"schedlab.{info.name}.cli").app
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.startswith("schedlab"):
            raise
        missing = exc.name
    stand_in = typer.Typer(help=f"{info.topic} (needs the package '{missing}')")

    @stand_in.callback(invoke_without_command=True)
    def _explain() -> None:
        err_console.print(f"error: schedlab {info.name} needs the package '{missing}' "
                          "(pip install -e '.[all]')", markup=False)
        raise typer.Exit(2)

    return stand_in


def mount_system_apps() -> typer.Typer:
    """Mount every system's command group on ``app`` (once per process) and return ``app``."""
    if _mounted:
        return app
    for info in SYSTEMS:
        if not module_exists(f"schedlab.{info.name}.cli"):
            continue
        sub_app = _system_app(info)
        hyphenated = info.name.replace("_", "-")
        app.add_typer(sub_app, name=hyphenated, help=info.topic)
        if hyphenated != info.name:
            app.add_typer(sub_app, name=info.name, hidden=True)
    _mounted.append(True)
    return app


_mounted: list[bool] = []
_mount_system_apps_once = mount_system_apps  # the name older tests use


def main() -> None:
    """Console-script entry point."""
    mount_system_apps()
    app()


if __name__ == "__main__":
    main()
