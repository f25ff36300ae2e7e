"""``schedlab data list | fetch NAME | verify``: which public data sets are here, and right.

Every command takes ``--data DIR`` (else ``$SCHEDLAB_DATA``, the user cache dir, ../shared/data;
see :mod:`schedlab.core.data`). Imports stay light: ``schedlab --help`` builds this group.
"""

from __future__ import annotations

from pathlib import Path

import typer

from schedlab.core.clitools import emit_json, err_console, handle_errors, out_console

app = typer.Typer(help="Public data sets: list what is here, fetch one, verify checksums.",
                  no_args_is_help=True)

_DATA_OPTION = typer.Option(None, "--data", help="Data directory (default: $SCHEDLAB_DATA, "
                            "the user cache dir, then ../shared/data).")


def _root(data: Path | None, writing: bool = False) -> Path | None:
    """The directory to read or write; None when reading without ``--data``: then each file is
    looked up by the resolver (cache dir, then ../shared/data, unless $SCHEDLAB_DATA is set)."""
    from schedlab.core.data import download_dir, use_data_dir

    if data is not None:
        if writing:
            data.mkdir(parents=True, exist_ok=True)
        return use_data_dir(data)
    return download_dir() if writing else None


def _where(root: Path | None) -> str:
    from schedlab.core.data import data_dir

    return str(root if root is not None else data_dir())


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


@app.command("list")
@handle_errors
def list_data(data: Path = _DATA_OPTION,
              json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Each data set: present, partly present or missing in the data directory."""
    from rich.markup import escape
    from rich.table import Table

    from schedlab.core.datasets import load_catalogue, present

    root = _root(data)
    rows = []
    for ds in load_catalogue().values():
        found = present(ds, root)
        status = ("present" if len(found) == len(ds.files) else "missing" if not found
                  else f"partial {len(found)}/{len(ds.files)}")
        where = sorted({str(p.parent) for p in found})
        rows.append(dict(name=ds.name, status=status, where=where, folder=ds.folder,
                         files=len(ds.files), size=ds.size, licence=ds.licence,
                         upstream=ds.upstream, used_by=list(ds.used_by), title=ds.title))
    if json_out:
        emit_json(dict(data_dir=_where(root), datasets=rows))
        return
    table = Table("data set", "status", "where", "files", "size", "used by", "licence",
                  "upstream", title=f"data sets (data dir: {_where(root)})")
    for r in rows:
        style = {"present": "green", "missing": "red"}.get(r["status"], "yellow")
        table.add_row(r["name"], f"[{style}]{r['status']}[/{style}]", ", ".join(r["where"]),
                      str(r["files"]), _size(r["size"]), ", ".join(r["used_by"]),
                      escape(r["licence"]), r["upstream"])
    out_console.print(table)


@app.command()
@handle_errors
def verify(names: list[str] = typer.Argument(None, help="Data sets (default: every present one)."),
           data: Path = _DATA_OPTION,
           json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Check the sha256 of every file that is present; exit 1 on a mismatch or unreadable file."""
    from rich.table import Table

    from schedlab.core.datasets import get_dataset, load_catalogue, present
    from schedlab.core.datasets import verify as check

    root = _root(data)
    sets = ([get_dataset(n) for n in names] if names
            else [d for d in load_catalogue().values() if present(d, root)])
    checks = [c for ds in sets for c in check(ds, root)]
    bad = [c for c in checks if c.status in ("mismatch", "unreadable")
           or (names and c.status == "missing")]
    if json_out:
        emit_json(dict(data_dir=_where(root), files=[dict(c.__dict__, path=str(c.path))
                                                  for c in checks]))
    else:
        table = Table("data set", "file", "status", "detail", "path",
                      title=f"verify (data dir: {_where(root)})")
        for c in checks:
            style = {"ok": "green", "unverified": "yellow"}.get(c.status, "red")
            table.add_row(c.dataset, c.file, f"[{style}]{c.status}[/{style}]", c.detail,
                          str(c.path))
        out_console.print(table)
        ok = sum(c.status == "ok" for c in checks)
        out_console.print(f"{ok} of {len(checks)} files match the catalogue's sha256")
    if bad:
        raise typer.Exit(1)


@app.command()
@handle_errors
def fetch(
    name: str = typer.Argument(..., help="Data set name (see `schedlab data list`)."),
    data: Path = _DATA_OPTION,
    url: str = typer.Option(None, "--url", help="Download a one-file data set from this URL."),
    mirror: str = typer.Option(None, "--mirror",
                               help="Base URL serving <folder>/<file> (a copy of a data dir)."),
    sha256: str = typer.Option(None, "--sha256", help="Expected sha256 (one-file data sets)."),
    unverified: bool = typer.Option(False, "--unverified",
                                    help="Accept files whose sha256 nobody has recorded."),
) -> None:
    """Download a data set, check each file's sha256, and move it into place atomically."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from schedlab.core.datasets import fetch as download
    from schedlab.core.datasets import get_dataset

    ds = get_dataset(name)
    root = _root(data, writing=True)
    bars: dict[str, int] = {}
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), console=err_console, transient=True,
                  disable=not err_console.is_terminal) as progress:
        def advance(label: str, total: int | None, done: int) -> None:
            if label not in bars:
                bars[label] = progress.add_task(label, total=total)
            progress.update(bars[label], completed=done)

        results = download(ds, root, url=url, mirror=mirror, sha256=sha256,
                           unverified=unverified, progress=advance)
    for _file, path, how in results:
        out_console.print(f"{how}: {path}", markup=False, highlight=False)
    out_console.print(f"{ds.name}: {len(results)} files in {root / ds.folder} "
                      f"(licence: {ds.licence})", markup=False, highlight=False)
