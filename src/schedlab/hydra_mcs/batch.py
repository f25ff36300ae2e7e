"""Batch mode: many pattern/target pairs in one process (``solve --pairs FILE|DIR``).

Why: a ``solve`` process spends ~0.3 s of CPU on the interpreter, NumPy and the CLI before a
search that takes 10-30 ms on a 20-vertex pair; benchmark users run hundreds of pairs, so one
process that loads everything once and then solves pair after pair amortises that start-up.

A pair list is a text or CSV file, one pair a line::

    # comment lines and blank lines are skipped
    s20.A00 s20.B00              # whitespace-separated ...
    graphs/p1.lad,graphs/t1.lad  # ... or comma-separated (CSV)
    pattern,target               # a header naming the columns is skipped (first line only)

Relative paths are resolved against the list file's folder (not the working directory), so a
list travels with its graphs. A directory is paired by name: ``NAME.A<k>`` with ``NAME.B<k>``
(the ARG/MIVIA convention, e.g. ``s20.A00``/``s20.B00``), and each sub-folder holding files
named ``pattern`` and ``target`` (the LAD benchmark convention).

The whole list is checked before any search starts (a malformed line or a missing file is one
error naming the list file and line); a graph that fails to *read* becomes an error row for that
pair and the batch goes on. Results are written one line per pair as each finishes.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from schedlab.core.errors import BadInputError, SchedlabError

_HEADER = {
    "pattern",
    "target",
    "a",
    "b",
    "first",
    "second",
    "g0",
    "g1",
    "graph1",
    "graph2",
    "left",
    "right",
    "query",
    "host",
}
_MIVIA = re.compile(r"^(?P<stem>.+)\.A(?P<tail>[^./]*)$")


@dataclass(frozen=True)
class PairSpec:
    """One pair to solve: where it came from (list file + line, or a directory) and its paths."""

    pattern: Path
    target: Path
    source: Path
    line: int | None = None  # the list file's line (1-based); None for a directory's pairs

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else str(self.source)

    @property
    def name(self) -> str:
        return f"{self.pattern.name}/{self.target.name}"


def read_pairs(path: str | Path) -> list[PairSpec]:
    """The pairs of a list file or a directory (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        return pairs_of_directory(path)
    if not path.exists():
        raise BadInputError("no such pair list (file or directory)", path=path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BadInputError(
            f"not a UTF-8 text list of pairs (byte {exc.start})", path=path
        ) from None
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror}", path=path) from None
    return parse_pairs(text, path)


def parse_pairs(text: str, source: Path) -> list[PairSpec]:
    """Parse the text of a pair list; relative paths are taken from ``source``'s folder."""
    folder = source.resolve().parent
    out: list[PairSpec] = []
    first = True
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).strip()
        if not line:
            continue
        fields = _fields(line, source, number)
        if (
            first
            and len(fields) == 2
            and all(f.lower() in _HEADER for f in fields)
            and not any((folder / f).exists() for f in fields)
        ):
            first = False
            continue
        first = False
        if len(fields) != 2:
            raise BadInputError(
                f"expected 2 paths (pattern, target), got {len(fields)}: {line[:80]!r}",
                path=source,
                line=number,
            )
        pair = []
        for role, field in zip(("pattern", "target"), fields, strict=True):
            p = Path(field).expanduser()
            p = Path(os.path.normpath(p if p.is_absolute() else folder / p))  # no a/../b rows
            if not p.is_file():
                why = "is a directory" if p.is_dir() else "no such file"
                raise BadInputError(f"{why}: {field}", path=source, line=number, field=role)
            pair.append(p)
        out.append(PairSpec(pair[0], pair[1], source, number))
    if not out:
        raise BadInputError("the pair list holds no pairs", path=source)
    return out


def _strip_comment(line: str) -> str:
    """Drop a ``#`` comment that starts the line or follows whitespace (``a#b`` is a name)."""
    if line.lstrip().startswith("#"):
        return ""
    m = re.search(r"\s#", line)
    return line[: m.start()] if m else line


def _fields(line: str, source: Path, number: int) -> list[str]:
    if "," in line or '"' in line:
        try:
            rows = list(csv.reader(io.StringIO(line), skipinitialspace=True))
        except csv.Error as exc:
            raise BadInputError(f"bad CSV: {exc}", path=source, line=number) from None
        fields = [f.strip() for f in rows[0]] if rows else []
        if any(not f for f in fields):
            raise BadInputError("empty path field", path=source, line=number)
        return fields
    return line.split()


def pairs_of_directory(folder: Path) -> list[PairSpec]:
    """Pair a directory's graphs by name (``X.A<k>`` with ``X.B<k>``; ``pattern``/``target``)."""
    out: list[PairSpec] = []
    unpaired: list[str] = []
    for p in sorted(folder.iterdir()):
        m = _MIVIA.match(p.name)
        if p.is_file() and m:
            partner = p.with_name(f"{m['stem']}.B{m['tail']}")
            if partner.is_file():
                out.append(PairSpec(p, partner, folder))
            else:
                unpaired.append(p.name)
        elif p.is_dir() and (p / "pattern").is_file() and (p / "target").is_file():
            out.append(PairSpec(p / "pattern", p / "target", folder))
    if unpaired:
        raise BadInputError(
            f"no .B partner for {', '.join(unpaired[:5])}{' ...' if len(unpaired) > 5 else ''}",
            path=folder,
        )
    if not out:
        raise BadInputError(
            "no pairs found: expected NAME.A<k> + NAME.B<k> files or "
            "sub-folders holding 'pattern' and 'target'",
            path=folder,
        )
    return out


@dataclass
class Row:
    """The outcome of one pair: a result (as a dict) or the one-line error that stopped it."""

    spec: PairSpec
    result: dict | None = None
    error: str | None = None
    cpu_s: float = 0.0

    def as_dict(self, with_mapping: bool = True) -> dict:
        out: dict = {"pattern": str(self.spec.pattern), "target": str(self.spec.target)}
        if self.spec.line is not None:
            out["line"] = self.spec.line
        if self.error is not None:
            out["error"] = self.error
            return out
        res = dict(self.result or {})
        if not with_mapping:
            res.pop("mapping", None)
        out.update(res)
        out["cpu_s"] = round(self.cpu_s, 6)
        return out


def run_pairs(
    specs: list[PairSpec], solve_pair: Callable[[Path, Path], dict], stop: list[bool] | None = None
) -> Iterator[Row]:
    """Solve each pair in turn, yielding its row as soon as it is done.

    ``solve_pair(pattern, target)`` returns the result dict; a :class:`SchedlabError` it raises
    (an unreadable graph, a bad combination of labels) becomes that pair's error row.

    Ctrl-C (SIGINT) stops the *batch*: the search under way returns its best mapping so far
    (``optimal`` false, as a single ``solve`` does), that row is yielded, no further pair is
    started, and ``stop[0]`` is set so the caller can exit 130. (Without this, each Ctrl-C
    would only end the current pair's search and the batch would go on.)
    """
    import signal
    import threading

    stop = stop if stop is not None else [False]
    previous = None
    if threading.current_thread() is threading.main_thread():

        def on_sigint(signum, frame):
            stop[0] = True
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        for spec in specs:
            if stop[0]:
                return
            start = time.process_time()
            try:
                result = solve_pair(spec.pattern, spec.target)
            except SchedlabError as exc:
                yield Row(spec, error=str(exc), cpu_s=time.process_time() - start)
                continue
            except KeyboardInterrupt:  # between two searches (reading, setting up)
                stop[0] = True
                return
            yield Row(spec, result=result, cpu_s=time.process_time() - start)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
