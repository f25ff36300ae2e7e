"""Graph file readers: ARG/MIVIA binary, LAD, DIMACS and plain edge lists.

Each follows the reference McSplit reader's meaning (graph.c in james-cpp) but fails with a
:class:`BadInputError` naming the file, the line (text) or byte offset (binary) and the field,
instead of exiting or reading garbage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.hydra_mcs.graph import Graph, GraphBuilder, from_edge_arrays

FORMATS = ("auto", "arg", "lad", "dimacs", "edges")


def _arg_label_shift(n: int) -> int:
    """McSplit's ARG label reduction: keep the top k1 bits so ~33% of n labels remain."""
    m = n * 33 // 100
    p, k1, k2 = 1, 0, 0
    while p < m and k1 < 16:
        p *= 2
        k1 = k2
        k2 += 1
    return 16 - k1


def read_arg(
    path: str | Path, directed: bool = False, vertex_labels: bool = False, edge_labels: bool = False
) -> Graph:
    """ARG/MIVIA binary: little-endian uint16 words: n, n labels, then per vertex its edge
    count and (target, label) pairs."""
    path = Path(path)
    data = _read_bytes(path)
    if len(data) % 2:
        raise BadInputError(
            "odd number of bytes: the file is not a sequence of 16-bit words",
            path=path,
            line=None,
            field=f"byte {len(data) - 1}",
        )
    words = np.frombuffer(data, dtype="<u2").astype(np.int64)
    fast = _arg_fast(words, directed, vertex_labels, edge_labels, path.name)
    if fast is not None:
        return fast
    pos = 0

    def take(what: str) -> int:
        nonlocal pos
        if pos >= words.size:
            raise BadInputError(
                f"file ends where {what} was expected", path=path, field=f"byte {2 * pos}"
            )
        pos += 1
        return int(words[pos - 1])

    n = take("the vertex count")
    shift = _arg_label_shift(n)
    builder = GraphBuilder(n, directed)
    for v in range(n):
        label = take(f"the label of vertex {v}") >> shift
        if vertex_labels:
            builder.set_label(v, label)
    for v in range(n):
        for _ in range(take(f"the edge count of vertex {v}")):
            at = 2 * pos
            target = take(f"an edge target of vertex {v}")
            label = (take(f"an edge label of vertex {v}") >> shift) + 1
            if target >= n:
                raise BadInputError(
                    f"edge target {target} is not a vertex (n = {n})", path=path, field=f"byte {at}"
                )
            builder.add_edge(v, target, label if edge_labels else 1)
    if pos != words.size:
        raise BadInputError(
            f"{2 * (words.size - pos)} unexpected trailing bytes",
            path=path,
            field=f"byte {2 * pos}",
        )
    return builder.build(path.name)


def _segments(flat: list[int], n: int, pos: int, stride: int):
    """Walk ``n`` length-prefixed runs (count, then count*stride values) from ``pos``.

    Returns (start of each run's values, counts, end position), or None when the data ends
    inside a run (the slow reader then names the place)."""
    starts = [0] * n
    counts = [0] * n
    size = len(flat)
    for v in range(n):
        if pos >= size:
            return None
        c = flat[pos]
        starts[v] = pos + 1
        counts[v] = c
        pos += 1 + stride * c
    if pos > size:
        return None
    return np.array(starts, np.int64), np.array(counts, np.int64), pos


def _run_index(starts: np.ndarray, counts: np.ndarray, stride: int) -> np.ndarray:
    """Positions of every run's items: starts[v] + stride*j for j < counts[v], in order."""
    total = int(counts.sum())
    before = np.cumsum(counts) - counts
    return np.repeat(starts, counts) + stride * (np.arange(total) - np.repeat(before, counts))


def _arg_fast(words, directed, vertex_labels, edge_labels, name) -> Graph | None:
    """The whole ARG file in NumPy; None on any anomaly (the checking reader reports it)."""
    if words.size == 0:
        return None
    n = int(words[0])
    if words.size < 1 + n:
        return None
    shift = _arg_label_shift(n)
    found = _segments(words.tolist(), n, 1 + n, 2)
    if found is None or found[2] != words.size:
        return None
    starts, counts, _ = found
    at = _run_index(starts, counts, 2)
    targets = words[at]
    if targets.size and int(targets.max()) >= n:
        return None
    values = (words[at + 1] >> shift) + 1 if edge_labels else None
    labels = (words[1 : 1 + n] >> shift).astype(np.uint32) if vertex_labels else None
    return from_edge_arrays(
        n,
        np.repeat(np.arange(n, dtype=np.int64), counts),
        targets,
        values,
        directed=directed,
        labels=labels,
        name=name,
    )


def _tokens(path: Path) -> list[tuple[int, str]]:
    """(line number, token) for every whitespace-separated token of a text file."""
    text = _read_text(path)
    return [(i, tok) for i, line in enumerate(text.splitlines(), start=1) for tok in line.split()]


def _int(tok: tuple[int, str], path: Path, field: str, lo: int = 0, hi: int | None = None) -> int:
    line, text = tok
    try:
        value = int(text)
    except ValueError:
        raise BadInputError(
            f"{text!r} is not an integer", path=path, line=line, field=field
        ) from None
    if value < lo or (hi is not None and value > hi):
        bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise BadInputError(f"{value} is out of range {bound}", path=path, line=line, field=field)
    return value


def read_lad(path: str | Path, directed: bool = False, vertex_labels: bool = False) -> Graph:
    """LAD: n, then per vertex its degree and neighbours (no labels, as in McSplit)."""
    path = Path(path)
    fast = _lad_fast(_read_text(path), directed, path.name)
    if fast is not None:
        return fast
    toks = _tokens(path)
    if not toks:
        raise BadInputError("empty file: expected the vertex count", path=path, line=1, field="n")
    n = _int(toks[0], path, "n", 0, 65535)
    builder = GraphBuilder(n, directed)
    pos = 1
    for v in range(n):
        if pos >= len(toks):
            raise BadInputError(
                f"file ends before vertex {v}'s degree", path=path, line=toks[-1][0], field="degree"
            )
        degree = _int(toks[pos], path, "degree")
        pos += 1
        for _ in range(degree):
            if pos >= len(toks):
                raise BadInputError(
                    f"file ends inside vertex {v}'s neighbour list",
                    path=path,
                    line=toks[-1][0],
                    field="neighbour",
                )
            builder.add_edge(v, _int(toks[pos], path, "neighbour", 0, n - 1))
            pos += 1
    if pos != len(toks):
        raise BadInputError("unexpected trailing values", path=path, line=toks[pos][0])
    return builder.build(path.name)


def _lad_fast(text: str, directed: bool, name: str) -> Graph | None:
    """LAD in NumPy; None on any anomaly (the checking reader then names file/line/field)."""
    try:
        flat = [int(t) for t in text.split()]
    except ValueError:
        return None
    if not flat or not 0 <= flat[0] <= 65535:
        return None
    n = flat[0]
    found = _segments(flat, n, 1, 1)
    if found is None or found[2] != len(flat):
        return None
    starts, counts, _ = found
    if counts.size and int(counts.min()) < 0:
        return None
    arr = np.array(flat, np.int64)
    targets = arr[_run_index(starts, counts, 1)]
    if targets.size and (int(targets.min()) < 0 or int(targets.max()) >= n):
        return None
    src = np.repeat(np.arange(n, dtype=np.int64), counts)
    return from_edge_arrays(n, src, targets, directed=directed, name=name)


def read_dimacs(path: str | Path, directed: bool = False, vertex_labels: bool = False) -> Graph:
    """DIMACS: ``p edge N M``, ``e u v`` (1-based), ``n v label``; ``c`` lines are comments."""
    path = Path(path)
    builder: GraphBuilder | None = None
    expected = edges = 0
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0] == "c":
            continue
        toks = [(lineno, t) for t in parts]
        kind = parts[0]
        if kind == "p":
            if len(parts) != 4 or parts[1] != "edge":
                raise BadInputError("expected 'p edge N M'", path=path, line=lineno, field="p")
            builder = GraphBuilder(_int(toks[2], path, "N", 0, 65535), directed)
            expected = _int(toks[3], path, "M")
            continue
        if kind not in ("e", "n"):
            raise BadInputError(
                f"unknown line type {kind!r} (expected p, e, n or c)",
                path=path,
                line=lineno,
                field="type",
            )
        if builder is None:
            raise BadInputError(
                "an 'e'/'n' line comes before the 'p edge' line", path=path, line=lineno, field=kind
            )
        if len(parts) != 3:
            raise BadInputError(f"expected '{kind} A B'", path=path, line=lineno, field=kind)
        a = _int(toks[1], path, "vertex", 1, builder.n)
        if kind == "e":
            builder.add_edge(a - 1, _int(toks[2], path, "vertex", 1, builder.n) - 1)
            edges += 1
        elif vertex_labels:
            builder.set_label(a - 1, _int(toks[2], path, "label", 0, (1 << 31) - 1))
    if builder is None:
        raise BadInputError("no 'p edge N M' line", path=path, field="p")
    if expected > 0 and edges != expected:
        raise BadInputError(
            f"the p line promises {expected} edges, the file has {edges}", path=path, field="M"
        )
    return builder.build(path.name)


def read_edges(path: str | Path, directed: bool = False, vertex_labels: bool = False) -> Graph:
    """Edge list: one ``u v`` (0-based) per line; '#' comments; vertices = max id + 1."""
    path = Path(path)
    pairs = []
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        body = line.split("#", 1)[0].split()
        if not body:
            continue
        if len(body) != 2:
            raise BadInputError(
                f"expected two vertex ids, found {len(body)} values",
                path=path,
                line=lineno,
                field="edge",
            )
        pairs.append(
            (
                _int((lineno, body[0]), path, "u", 0, 65534),
                _int((lineno, body[1]), path, "v", 0, 65534),
            )
        )
    if not pairs:
        raise BadInputError(
            "holds no edges (an edge list needs at least one 'u v' line)", path=path, field="edge"
        )
    n = 1 + max(max(p) for p in pairs)
    builder = GraphBuilder(n, directed)
    for u, v in pairs:
        builder.add_edge(u, v)
    return builder.build(path.name)


def detect_format(path: Path) -> str:
    """Guess the format from the first bytes: binary -> arg, 'p edge' -> dimacs, etc."""
    head = _read_bytes(path)[:512]
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return "arg"
    if any(ch not in "0123456789 \t\r\n#-pecnedgabcdefghijklmnopqrstuvwxyz" for ch in text.lower()):
        return "arg"
    first = next((ln.split() for ln in text.splitlines() if ln.strip()), [])
    if first and first[0] in ("p", "c", "e", "n"):
        return "dimacs"
    if len(first) == 1:
        return "lad"
    return "edges"


def read_graph(
    path: str | Path,
    fmt: str = "auto",
    *,
    directed: bool = False,
    vertex_labels: bool = False,
    edge_labels: bool = False,
) -> Graph:
    """Read a graph in any supported format (``auto`` sniffs it)."""
    path = Path(path)
    if fmt not in FORMATS:
        raise UnknownNameError("format", fmt, FORMATS)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "arg":
        return read_arg(path, directed, vertex_labels, edge_labels)
    reader = {"lad": read_lad, "dimacs": read_dimacs, "edges": read_edges}[fmt]
    return reader(path, directed, vertex_labels)


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise BadInputError("no such file", path=path)
    return path.read_bytes()


def _read_text(path: Path) -> str:
    try:
        return _read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        line = _read_bytes(path)[: exc.start].count(b"\n") + 1
        raise BadInputError("is not valid UTF-8 text", path=path, line=line) from None
