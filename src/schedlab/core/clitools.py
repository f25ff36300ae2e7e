"""What every system's Typer sub-app shares: error reporting, ``--json`` output, progress.

Convention: a command that prints results takes ``--json`` and then prints exactly one JSON
document on stdout; progress bars and logs always go to stderr so a pipe stays clean.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from schedlab.core.errors import SchedlabError
from schedlab.core.io import jsonable

F = TypeVar("F", bound=Callable[..., Any])

#: a pipe or a file has no width: tables sent there are printed whole, never cut to 80 columns
#: with ellipses (Rich's default off a terminal)
UNLIMITED_WIDTH = 100_000


def _width(stream: Any) -> int | None:
    try:
        return None if stream.isatty() else UNLIMITED_WIDTH
    except (AttributeError, ValueError):  # a closed or replaced stream
        return UNLIMITED_WIDTH


#: progress, logs and errors: never stdout
err_console = Console(stderr=True, width=_width(sys.stderr))
out_console = Console(width=_width(sys.stdout))


def handle_errors(command: F) -> F:
    """Turn a SchedlabError into one red line on stderr and exit code 2; Ctrl-C into exit 130."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SchedlabError as exc:
            err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("[yellow]interrupted; nothing half-written was left behind[/yellow]")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def emit_json(document: Any) -> None:
    """Print exactly one JSON document on stdout."""
    sys.stdout.write(json.dumps(jsonable(document), indent=2, default=str) + "\n")
    sys.stdout.flush()


def progress_bar(transient: bool = False) -> Progress:
    """A Rich progress bar on stderr (shown only on a terminal)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=transient,
    )
