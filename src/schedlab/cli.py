"""The ``schedlab`` command: ``list``, ``reproduce``, ``doctor`` and one group per system.

Each system's group lives in ``schedlab/<system>/cli.py`` as a Typer app named ``app`` and is
mounted here under its hyphenated name (``hydra-mcs``), with the underscore spelling as a
hidden alias. Groups are mounted *lazily* (Click's lazy-group pattern): ``schedlab --help``
lists them from the catalogue without importing them, and ``schedlab xbucket ...`` imports only
X-Bucket's CLI, so no command pays for another system's heavy dependencies (torch, ray, redis,
xDSL, numba, scipy.stats).
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
import typer
from typer.core import TyperGroup

from schedlab import __version__
from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console, progress_bar
from schedlab.core.errors import ConfigError
from schedlab.core.systems import SYSTEMS, SystemInfo, normalise_system

if TYPE_CHECKING:
    import polars as pl

#: command name -> catalogue entry; the underscore spelling is a hidden alias
_LAZY: dict[str, SystemInfo] = {}
for _info in SYSTEMS:
    _LAZY[_info.name.replace("_", "-")] = _info
    _LAZY[_info.name] = _info


class LazySystemsGroup(TyperGroup):
    """The root group: own commands eagerly, each system's group on first use."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = super().list_commands(ctx)
        return [*own, *(n for n, i in _LAZY.items() if n == i.name.replace("_", "-")
                        and n not in own and _has_cli(i))]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in _LAZY:
            return command
        info = _LAZY[cmd_name]
        if not _has_cli(info):
            return None
        if self._listing:  # help text from the catalogue; nothing imported
            return click.Group(cmd_name, help=info.topic)
        command = typer.main.get_command(_system_app(info))
        command.name = cmd_name
        command.help = command.help or info.topic
        self.commands[cmd_name] = command
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def _has_cli(info: SystemInfo) -> bool:
    """Whether the system ships a CLI, by file: importing its package could be heavy."""
    return (Path(__file__).parent / info.name / "cli.py").is_file()


app = typer.Typer(
    name="schedlab",
    cls=LazySystemsGroup,
    help="Scheduling and resource-management papers as measured, reusable software.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _mount_data() -> None:
    from schedlab.core.datacli import app as data_app

    app.add_typer(data_app, name="data")


_mount_data()


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
    """List the sixteen systems, whether each is implemented, and its headline experiments."""
    from rich.table import Table

    from schedlab.core.catalogue import static_catalogue

    catalogue = static_catalogue()  # generated from the registry: no system is imported
    rows = [dict(system=s.name, title=s.title, topic=s.topic,
                 status="implemented" if catalogue.get(s.name) else "planned",
                 experiments=[e["name"] for e in catalogue.get(s.name, [])]) for s in SYSTEMS]
    if json_out:
        emit_json(rows)
        return
    table = Table("system", "title", "topic", "status", "experiments")
    for row in rows:
        style = "green" if row["status"] == "implemented" else "dim"
        table.add_row(row["system"], row["title"], row["topic"],
                      f"[{style}]{row['status']}[/{style}]", str(len(row["experiments"])))
    out_console.print(table)


@app.command()
@handle_errors
def doctor(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every optional part: present or not, version, what it enables, how to install it."""
    from rich.markup import escape
    from rich.table import Table

    from schedlab.core.doctor import APT_LINE, examine

    findings = examine()
    if json_out:
        emit_json(dict(parts=[f.as_dict() for f in findings], apt=APT_LINE))
        return
    table = Table("kind", "part", "here", "version / detail", "enables", "install",
                  title="schedlab doctor")
    for f in findings:
        here = "[green]yes[/green]" if f.present else "[red]no[/red]"
        table.add_row(f.kind, f.name, here, escape(f.version), escape(f.enables),
                      escape(f.install if not f.present else ""))
    out_console.print(table)
    missing = sum(not f.present for f in findings)
    out_console.print(f"{len(findings) - missing} of {len(findings)} optional parts present. "
                      "The main job needs the extras (pip install -e '.[all]') and a C/C++ "
                      "compiler; for every full-fidelity path: "
                      f"{APT_LINE}", markup=False)


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
    data: Path = typer.Option(None, "--data", help="Directory of public data sets (default: "
                              "$SCHEDLAB_DATA, the user cache dir, then ../shared/data)."),
) -> None:
    """Run the headline experiments, write a report, and exit 1 if a required claim fails."""
    if data is not None:  # before any experiment module is imported; workers inherit the env
        from schedlab.core.data import use_data_dir

        use_data_dir(data)
    from schedlab.core.executors import make_executor
    from schedlab.core.experiment import Failure, experiments, run_sweep, runs_of
    from schedlab.core.io import ensure_directory
    from schedlab.core.report import write_report

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
    total = len(selected) * len(seed_list)
    finished = 0

    def done(job, outcome, progress) -> None:
        nonlocal finished
        progress.advance(bars[job.key])
        finished += 1
        if not err_console.is_terminal:  # a log file gets one line per finished run instead
            how = (f"FAILED: {outcome.error}" if isinstance(outcome, Failure)
                   else f"{outcome.seconds:.1f} s")
            err_console.print(f"[{finished}/{total}] {job.key} seed {job.seed}: {how}",
                              markup=False, highlight=False)

    try:
        with progress_bar() as progress:
            bars = {e.key: progress.add_task(e.key, total=len(seed_list)) for e in selected}
            sweep = run_sweep(selected, seed_list, scale, pool,
                              on_done=lambda job, outcome: done(job, outcome, progress))
    finally:
        pool.close()
    command = "schedlab reproduce " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 else ""
    runs = runs_of(sweep, selected)
    claims = write_report(sweep, out, command=command.strip() or "schedlab reproduce", runs=runs)
    failed_required = claims.filter(claims["required"] & ~claims["holds"]).height
    if json_out:
        from schedlab.core.experiment import count_claims

        emit_json(dict(runs=[dict(r.__dict__, what_ran=r.sentence) for r in runs],
                       counts=count_claims(claims).__dict__, claims=claims.to_dicts(),
                       failures=[f.__dict__ for f in sweep.failures], out=str(out)))
    else:
        _print_summary(claims, sweep, runs, out)
    if failed_required or any(r.status != "ran" for r in runs):
        raise typer.Exit(1)


def _print_summary(claims: pl.DataFrame, sweep, runs, out: Path) -> None:
    from rich.markup import escape
    from rich.table import Table

    from schedlab.core.experiment import count_claims
    from schedlab.core.report import format_figure

    ran = Table("experiment", "seeds", "data", "what ran", title="What ran")
    for run in runs:
        style = "green" if run.status == "ran" else "red"
        data = (f"[bold yellow]{run.data_label}[/bold yellow]" if run.data == "stand-in"
                else run.data_label)
        ran.add_row(f"{run.system}.{run.experiment}", str(run.seeds), data,
                    f"[{style}]{escape(run.sentence)}[/{style}]")
    out_console.print(ran)
    table = Table("system", "kind", "claim", "baseline", "target", "ours", "seeds", "holds",
                  title="Claims")
    for row in claims.iter_rows(named=True):
        holds = "[green]yes[/green]" if row["holds"] else "[red]no[/red]"
        table.add_row(row["system"], row["kind"], escape(row["claim"]), escape(row["baseline"]),
                      f"{row['comparison']} {format_figure(row['target'])}",
                      format_figure(row["measured"], row["measured_ci95"]),
                      f"{row['seeds_holding']}/{row['seeds']}", holds)
    out_console.print(table)
    out_console.print(f"{count_claims(claims).sentence}; "
                      f"{sum(r.status == 'ran' for r in runs)} of {len(runs)} experiments ran",
                      markup=False)
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
    """Return ``app``; kept for callers of the eager API (groups now mount on first use)."""
    return app


_mount_system_apps_once = mount_system_apps  # the name older tests use


def main() -> None:
    """Typer's entry point (the console script is ``schedlab.entry.main``, which tries
    ``hydra-mcs solve``'s lean path first; so does this, for callers of the old name)."""
    if sys.argv[1:3] in (["hydra-mcs", "solve"], ["hydra_mcs", "solve"]):
        from schedlab.hydra_mcs.fastcli import main as solve

        code = solve(sys.argv[3:])
        if code is not None:
            sys.exit(code)
    app()


if __name__ == "__main__":
    main()
