"""``schedlab hydra-mcs solve`` without Typer, Click, Rich or pydantic: the lean path.

Why: a ``solve`` call on a 20-vertex pair searches for ~15 ms, but the CLI root (Typer, Click,
Rich, and the pydantic adapter Typer loads while it parses) cost another ~0.1 s of CPU on top
of Python and NumPy. The console entry point (``schedlab.cli.main``) hands ``hydra-mcs solve``
argument lists here first; :func:`main` takes the call only when it is *certain* the result is
the same byte for byte as the Typer command's:

* every argument is one the Typer command defines, written the plain way (``--opt value`` or
  ``--opt=value``, flags without a value, at most two file arguments), with a value Click would
  accept (``--threads`` an integer ≥ 1, ``--timeout`` a float, no empty strings);
* output then goes through Rich consoles made as ``core.clitools`` makes them (colour and
  wrapping on a terminal) or, when neither stdout nor stderr is a terminal and no variable
  asks Rich for colour, as the plain lines Rich would print there (without importing Rich).

Anything else (``--help``, a typo, a bad value, ``--``) returns ``None`` and the Typer command
runs as before, so its help and usage errors are unchanged.

:func:`run_solve` is the command's body, shared by both paths.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from schedlab.core.jsonable import jsonable

_VALUED = {
    "--pairs": "pairs",
    "--format": "fmt",
    "--labels": "labels",
    "--threads": "threads",
    "--policy": "policy",
    "--heuristic": "heuristic",
    "--gpu-kernel": "gpu_kernel",
    "--timeout": "timeout",
    "--branching": "branching",
    "--prove": "prove",
}
_FLAGS = {
    "--connected": "connected",
    "--directed": "directed",
    "--big-first": "big_first",
    "--gpu": "gpu",
    "--no-mapping": "no_mapping",
    "--json": "json_out",
}
_INT = re.compile(r"^[0-9]{1,18}$")
_FLOAT = re.compile(r"^[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?$|^[0-9]+\.$")
#: variables that make Rich treat a pipe as a terminal (colour); off a terminal the CLI's
#: consoles get an explicit width (``core.clitools``), so COLUMNS does not matter there
_RICH_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def defaults() -> dict:
    """The Typer command's defaults, by parameter name."""
    return dict(
        a=None,
        b=None,
        pairs=None,
        fmt="auto",
        labels="none",
        connected=False,
        directed=False,
        threads=1,
        policy=None,
        heuristic="min_max",
        big_first=False,
        gpu=False,
        gpu_kernel="auto",
        timeout=None,
        no_mapping=False,
        json_out=False,
        branching="mcsplit",
        prove=None,
    )


def parse(argv: list[str]) -> dict | None:
    """The parameters of a plain, valid argument list; ``None`` when Typer must decide."""
    out = defaults()
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-"):
            positional.append(arg)
            continue
        name, eq, value = arg.partition("=")
        if name in _FLAGS and not eq:
            out[_FLAGS[name]] = True
            continue
        if name not in _VALUED:
            return None  # --help, --, a short option, a typo: Typer's messages
        if not eq:
            if i >= len(argv) or argv[i].startswith("-"):
                return None
            value = argv[i]
            i += 1
        key = _VALUED[name]
        if key == "threads":
            if not _INT.match(value) or int(value) < 1:
                return None
            out[key] = int(value)
        elif key == "timeout":
            if not _FLOAT.match(value):
                return None
            out[key] = float(value)
        else:
            if not value:
                return None
            out[key] = Path(value) if key in ("pairs", "prove") else value
    if len(positional) > 2 or any(not p for p in positional):
        return None
    for key, value in zip(("a", "b"), positional, strict=False):
        out[key] = Path(value)
    return out


def _plain_terminal_free() -> bool:
    if any(os.environ.get(k) for k in _RICH_ENV):
        return False
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is None or stream.isatty():
                return False
        except (AttributeError, ValueError):
            return False
    return True


def plain_writers() -> tuple[Callable[[str], None], ...]:
    """(say, error, note, interrupted) as Rich prints them off a terminal: plain lines."""

    def say(text: str) -> None:
        sys.stdout.write(text + "\n")

    def error(text: str) -> None:
        sys.stderr.write(f"error: {text}\n")
        sys.stderr.flush()

    def note(text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    return say, error, note, lambda: note("interrupted; nothing half-written was left behind")


def rich_writers(out_console=None, err_console=None) -> tuple[Callable[[str], None], ...]:
    """(say, error, note, interrupted) through Rich consoles, as the Typer command and
    ``core.clitools.handle_errors`` print them. Without consoles, two are made exactly as
    ``core.clitools`` makes its own (that module imports Typer)."""
    from rich.console import Console
    from rich.markup import escape

    if out_console is None or err_console is None:

        def width(stream):  # core.clitools._width: no width limit off a terminal
            try:
                return None if stream.isatty() else 100_000
            except (AttributeError, ValueError):
                return 100_000

        err_console = Console(stderr=True, width=width(sys.stderr))
        out_console = Console(width=width(sys.stdout))

    def error(text: str) -> None:
        err_console.print(f"[red]error:[/red] {escape(text)}", highlight=False, soft_wrap=True)

    def note(text: str) -> None:
        style = "yellow" if text.startswith("interrupted") else None
        err_console.print(text, style=style, highlight=False, markup=False)

    def interrupted() -> None:
        err_console.print("[yellow]interrupted; nothing half-written was left behind[/yellow]")

    def say(text: str) -> None:
        # soft_wrap: a result line is printed whole, never folded at the console's width (off a
        # terminal that width is 100,000: a mapping of ~7,000 pairs would otherwise be split,
        # unlike the plain writer's line)
        out_console.print(text, soft_wrap=True)

    return say, error, note, interrupted


def main(argv: list[str]) -> int | None:
    """Run ``solve`` on ``argv`` (after ``hydra-mcs solve``) and return the exit code, or
    ``None`` when the call must go to the Typer command (see the module's docstring)."""
    params = parse(argv)
    if params is None:
        return None
    from schedlab.core.errors import SchedlabError

    say, error, note, interrupted = plain_writers() if _plain_terminal_free() else rich_writers()
    try:
        try:
            code = run_solve(params, say=say, error=error, note=note)
        except SchedlabError as exc:  # what handle_errors prints
            error(str(exc))
            return 2
        except KeyboardInterrupt:
            interrupted()
            return 130
        sys.stdout.flush()
    except BrokenPipeError:
        return _closed_pipe()
    return code


def _closed_pipe() -> int:
    """A reader that went away (``| head``): exit 1 without a traceback, as Click does in
    standalone mode; later flushes at exit go to /dev/null."""
    for stream in (sys.stdout, sys.stderr):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, AttributeError, ValueError):
            pass
    return 1


def emit_json(document) -> None:
    """``core.clitools.emit_json`` (that module imports Typer and Rich)."""
    import json

    sys.stdout.write(json.dumps(jsonable(document), indent=2, default=str) + "\n")
    sys.stdout.flush()


def run_solve(
    p: dict,
    *,
    say: Callable[[str], None],
    error: Callable[[str], None],
    note: Callable[[str], None],
) -> int:
    """The body of ``schedlab hydra-mcs solve``: returns the exit code; a bad option raises a
    :class:`~schedlab.core.errors.SchedlabError` (the caller prints it as one line)."""
    if "numpy" not in sys.modules:
        # the search uses no BLAS: OpenBLAS's pool of spinning threads, started when NumPy is
        # imported, cost ~0.05 s of CPU per call (of ~0.27 s on a 20-vertex pair)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from schedlab.core.errors import ConfigError
    from schedlab.hydra_mcs.api import solve_files

    gpu, threads = p["gpu"], p["threads"]
    chosen = p["policy"] or ("hydra-gpu" if gpu else "mcsplit" if threads == 1 else "hydra-cpu")
    kwargs = dict(
        fmt=p["fmt"],
        labels=p["labels"],
        directed=p["directed"],
        connected=p["connected"],
        threads=threads,
        policy=chosen,
        heuristic=p["heuristic"],
        big_first=p["big_first"],
        gpu=gpu,
        gpu_kernel=p["gpu_kernel"],
        timeout=p["timeout"],
        branching=p["branching"],
    )
    a, b, pairs = p["a"], p["b"], p["pairs"]
    if p["prove"] is not None:
        if pairs is not None:
            raise ConfigError(
                "--prove writes one certificate: give two graph files, not --pairs", field="prove"
            )
        kwargs["prove"] = p["prove"]
    if pairs is not None:
        if a is not None or b is not None:
            raise ConfigError("give either two graph files or --pairs, not both", field="pairs")
        return batch(pairs, kwargs, p["json_out"], not p["no_mapping"], error=error, note=note)
    if a is None or b is None:
        raise ConfigError(
            "two graph files are needed (or --pairs FILE|DIR)", field="b" if a is not None else "a"
        )
    result = solve_files(a, b, **kwargs)
    if p["json_out"]:
        doc = result.as_dict()
        if p["no_mapping"]:
            doc.pop("mapping")
        emit_json(doc)
        return 0
    say(
        f"size {result.size}  nodes {result.nodes}  time {result.seconds:.3f}s  "
        f"{'optimal' if result.optimal else 'NOT proven optimal (stopped)'}"
    )
    if not p["no_mapping"]:
        say(" ".join(f"({v} -> {w})" for v, w in sorted(result.mapping.items())))
    return 0


def batch(
    pairs: Path,
    kwargs: dict,
    json_out: bool,
    with_mapping: bool,
    *,
    error: Callable[[str], None],
    note: Callable[[str], None],
) -> int:
    """Solve every pair of a list/directory, one output line each as it finishes; exit code."""
    import json

    from schedlab.hydra_mcs.api import check_options, solve_files
    from schedlab.hydra_mcs.batch import read_pairs, run_pairs

    check_options(**kwargs)  # a bad flag is one error before any pair runs
    specs = read_pairs(pairs)
    failed = 0
    out = sys.stdout
    if not json_out:
        out.write(f"{'pattern':>24} {'target':>24} {'size':>5} {'nodes':>13} {'cpu_s':>9} status\n")
        out.flush()
    stop = [False]
    done = 0
    for row in run_pairs(specs, lambda p, t: solve_files(p, t, **kwargs).as_dict(), stop):
        done += 1
        if row.error is not None:
            failed += 1
            error(row.error)
        if json_out:
            out.write(json.dumps(row.as_dict(with_mapping)) + "\n")
        else:
            r = row.result or {}
            status = "error" if row.error else "optimal" if r.get("optimal") else "stopped"
            out.write(
                f"{row.spec.pattern.name:>24} {row.spec.target.name:>24} "
                f"{r.get('size', '-'):>5} {r.get('nodes', '-'):>13} {row.cpu_s:>9.3f} "
                f"{status}\n"
            )
            if with_mapping and r.get("mapping"):
                out.write(
                    "    " + " ".join(f"({v} -> {w})" for v, w in r["mapping"].items()) + "\n"
                )
        out.flush()
    if failed:
        note(f"{failed} of {len(specs)} pairs failed")
    if stop[0]:
        note(
            f"interrupted: {done} of {len(specs)} pairs written (the last one not proven "
            f"optimal if its search was cut)"
        )
        return 130
    return 1 if failed else 0
