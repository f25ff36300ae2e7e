"""Heterogeneous graphs in per-relation CSR, metapath parsing, and readers that name file/line.

ESR-HGNN (paper: ../shared/papers/05-esr_hgnn.md) samples along metapaths such as ``APCPA``:
a sequence of node types where every consecutive pair is a relation of the schema. We store one
CSR (``indptr``, ``indices``) per directed relation, because a metapath hop ``X -> Y`` is exactly a
random read of ``indices[indptr[v] : indptr[v + 1]]`` of relation ``XY``; that read is the memory
access the paper counts and the hardware model replays.

Node types are single upper-case letters (``A`` author, ``P`` paper, ...) so a metapath is a plain
string; each type also carries a long name for display.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.core.io import atomic_write, ensure_directory, parse_lines

#: bytes per CSR word; int32 CSR is what DGL/PyG store and what the hardware model fetches
WORD_BYTES = 4


@dataclass(frozen=True)
class Relation:
    """One directed relation ``src -> dst`` in CSR form (rows are ``src`` nodes)."""

    src: str
    dst: str
    indptr: np.ndarray  # int64, len n_src + 1
    indices: np.ndarray  # int64, len n_edges, values in [0, n_dst)

    @property
    def name(self) -> str:
        return self.src + self.dst

    @property
    def n_edges(self) -> int:
        return int(self.indices.size)

    def degrees(self) -> np.ndarray:
        return np.diff(self.indptr)


def csr_from_pairs(src: np.ndarray, dst: np.ndarray, n_src: int) -> tuple[np.ndarray, np.ndarray]:
    """Sort (src, dst) pairs and build CSR; sorting keeps neighbour order deterministic."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    order = np.lexsort((dst, src))
    counts = np.bincount(src, minlength=n_src)
    indptr = np.zeros(n_src + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, dst[order].copy()


@dataclass
class HeteroGraph:
    """Typed nodes and directed relations; reverse relations are added for every edge type."""

    node_counts: dict[str, int]
    relations: dict[str, Relation]
    type_names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_edges(
        cls,
        node_counts: Mapping[str, int],
        edges: Mapping[tuple[str, str], tuple[np.ndarray, np.ndarray]],
        type_names: Mapping[str, str] | None = None,
    ) -> HeteroGraph:
        """Build both directions of every ``(src_type, dst_type) -> (src, dst)`` edge set."""
        counts = {t: int(n) for t, n in node_counts.items()}
        for t in counts:
            _check_type_code(t)
        pairs: dict[tuple[str, str], tuple[list, list]] = {}
        for (s, d), (src, dst) in edges.items():
            for t in (s, d):
                if t not in counts:
                    raise UnknownNameError("node type", t, sorted(counts))
            src = np.asarray(src, dtype=np.int64)
            dst = np.asarray(dst, dtype=np.int64)
            _check_ids(src, counts[s], f"{s}{d}.src")
            _check_ids(dst, counts[d], f"{s}{d}.dst")
            pairs.setdefault((s, d), ([], []))[0].append(src)
            pairs[(s, d)][1].append(dst)
            if s != d:  # the reverse direction: a metapath may walk the relation either way
                pairs.setdefault((d, s), ([], []))[0].append(dst)
                pairs[(d, s)][1].append(src)
        relations = {}
        for (s, d), (srcs, dsts) in pairs.items():
            indptr, indices = csr_from_pairs(np.concatenate(srcs), np.concatenate(dsts), counts[s])
            relations[s + d] = Relation(s, d, indptr, indices)
        return cls(counts, relations, dict(type_names or {}))

    @property
    def n_edges(self) -> int:
        return sum(r.n_edges for r in self.relations.values())

    def relation(self, src: str, dst: str) -> Relation:
        key = src + dst
        if key not in self.relations:
            raise BadInputError(
                f"relation {src}->{dst} does not exist in the schema; "
                f"relations: {', '.join(sorted(self.relations))}",
                field="metapaths",
            )
        return self.relations[key]

    def summary(self) -> dict:
        """Node and edge counts and mean degree per relation (what the docs quote)."""
        return dict(
            nodes=dict(self.node_counts),
            relations={k: dict(edges=r.n_edges,
                               mean_degree=round(r.n_edges / max(1, r.indptr.size - 1), 3))
                       for k, r in sorted(self.relations.items())},
        )


def _check_type_code(code: str) -> None:
    if len(code) != 1 or not code.isalpha() or not code.isupper():
        raise BadInputError(f"node type code {code!r} must be one upper-case letter", field="type")


def _check_ids(ids: np.ndarray, n: int, what: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        bad = int(ids[(ids < 0) | (ids >= n)][0])
        raise BadInputError(f"node id {bad} outside [0, {n})", field=what)


def parse_metapaths(text: str | Iterable[str], graph: HeteroGraph) -> list[str]:
    """Split ``"APA,APCPA"`` and check every type and every hop exists; duplicates are dropped."""
    items = text.split(",") if isinstance(text, str) else list(text)
    metapaths: list[str] = []
    for raw in items:
        mp = raw.strip().upper()
        if not mp:
            continue
        if len(mp) < 2:
            raise BadInputError(f"metapath {mp!r} needs at least one hop", field="metapaths")
        for t in mp:
            if t not in graph.node_counts:
                raise BadInputError(
                    f"metapath {mp}: node type {t!r} is not in the schema "
                    f"({', '.join(sorted(graph.node_counts))})", field="metapaths")
        for a, b in zip(mp, mp[1:], strict=False):
            if a + b not in graph.relations:
                raise BadInputError(
                    f"metapath {mp}: relation {a}->{b} does not exist in the schema; "
                    f"relations: {', '.join(sorted(graph.relations))}", field="metapaths")
        if mp not in metapaths:
            metapaths.append(mp)
    if not metapaths:
        raise BadInputError("no metapaths given", field="metapaths")
    starts = {mp[0] for mp in metapaths}
    if len(starts) != 1:
        raise BadInputError(f"metapaths start at different node types {sorted(starts)}; a batch "
                            "of seeds has one type", field="metapaths")
    return metapaths


# ---------------------------------------------------------------- edge-list directories

def read_graph_dir(directory: str | Path) -> HeteroGraph:
    """Read ``nodes.txt`` (``<code> <count> [name]`` lines) and one ``<S>-<D>.edges`` per relation.

    Each edges line is ``src dst`` (whitespace or comma separated); ``#`` starts a comment. The
    reverse direction of every relation is added automatically.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise BadInputError("graph directory does not exist", path=directory)
    nodes_path = directory / "nodes.txt"
    counts: dict[str, int] = {}
    names: dict[str, str] = {}
    for code, count, name in parse_lines(nodes_path, _parse_node_line):
        if code in counts:
            raise BadInputError(f"node type {code} listed twice", path=nodes_path, field="type")
        counts[code], names[code] = count, name
    if not counts:
        raise BadInputError("no node types listed", path=nodes_path)
    edge_files = sorted(directory.glob("*.edges"))
    if not edge_files:
        raise BadInputError("no <S>-<D>.edges files", path=directory)
    edges: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    for path in edge_files:
        s, d = _relation_from_name(path, counts)
        if (s, d) in edges or (d, s) in edges:
            raise BadInputError(f"relation {s}-{d} given twice", path=path)
        edges[(s, d)] = _read_edge_file(path, counts[s], counts[d])
    return HeteroGraph.from_edges(counts, edges, names)


def _parse_node_line(line: str, lineno: int) -> tuple[str, int, str] | None:
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    parts = text.replace(",", " ").split()
    if len(parts) < 2:
        raise BadInputError("expected '<type code> <count> [name]'", line=lineno, field="count")
    code = parts[0]
    try:
        _check_type_code(code)
    except BadInputError as exc:
        raise BadInputError(exc.message, line=lineno, field="type") from None
    count = _parse_int(parts[1], lineno, "count")
    if count <= 0:
        raise BadInputError(f"count {count} must be positive", line=lineno, field="count")
    return code, count, " ".join(parts[2:]) or code


def _parse_int(text: str, lineno: int, field_name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadInputError(f"{text!r} is not an integer", line=lineno, field=field_name) from None


def _relation_from_name(path: Path, counts: Mapping[str, int]) -> tuple[str, str]:
    parts = path.stem.split("-")
    if len(parts) != 2 or not all(parts):
        raise BadInputError("edge files are named <S>-<D>.edges, e.g. A-P.edges", path=path)
    for t in parts:
        if t not in counts:
            raise BadInputError(f"node type {t!r} is not in nodes.txt", path=path, field="type")
    return parts[0], parts[1]


def _read_edge_file(path: Path, n_src: int, n_dst: int) -> tuple[np.ndarray, np.ndarray]:
    def parse(line: str, lineno: int) -> tuple[int, int] | None:
        text = line.split("#", 1)[0].strip()
        if not text:
            return None
        parts = text.replace(",", " ").split()
        if len(parts) != 2:
            raise BadInputError(f"expected 'src dst', got {len(parts)} fields", line=lineno,
                                field="src" if not parts else "dst")
        src, dst = _parse_int(parts[0], lineno, "src"), _parse_int(parts[1], lineno, "dst")
        if not 0 <= src < n_src:
            raise BadInputError(f"src {src} outside [0, {n_src})", line=lineno, field="src")
        if not 0 <= dst < n_dst:
            raise BadInputError(f"dst {dst} outside [0, {n_dst})", line=lineno, field="dst")
        return src, dst

    pairs = list(parse_lines(path, parse))
    array = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return array[:, 0], array[:, 1]


def write_graph_dir(graph: HeteroGraph, directory: str | Path) -> Path:
    """Write what :func:`read_graph_dir` reads (one file per undirected relation), atomically."""
    directory = ensure_directory(directory)
    with atomic_write(directory / "nodes.txt") as handle:
        handle.write("# <type code> <count> <name>\n")
        for code, count in graph.node_counts.items():
            handle.write(f"{code} {count} {graph.type_names.get(code, code)}\n")
    done: set[frozenset] = set()
    for rel in graph.relations.values():
        key = frozenset((rel.src, rel.dst))
        if key in done:
            continue
        done.add(key)
        src = np.repeat(np.arange(rel.indptr.size - 1), rel.degrees())
        with atomic_write(directory / f"{rel.src}-{rel.dst}.edges") as handle:
            handle.write("# src dst\n")
            np.savetxt(handle, np.column_stack([src, rel.indices]), fmt="%d")
    return directory


# ---------------------------------------------------------------- PyG HeteroData

def from_heterodata(data, type_codes: Mapping[str, str] | None = None) -> HeteroGraph:
    """Convert a PyG ``HeteroData`` (or anything with ``node_types``/``edge_types``/``[key]``).

    Duck-typed so torch_geometric is not a dependency: each edge type ``(src, rel, dst)`` needs an
    ``edge_index`` of shape ``[2, E]`` and each node type a ``num_nodes``. Type codes default to
    the upper-cased first letter of each type name and must be unique. A letter-coded graph holds
    one undirected relation per pair of node types, so this conversion is lossless or refused:
    an edge type ``(B, r, A)`` is accepted only as the exact reverse of ``(A, r', B)`` (what
    ``ToUndirected`` adds), and a second relation between the same node types (``writes`` and
    ``reviews``) is refused in one line naming both. :func:`schedlab.esr_hgnn.pyg.typed_graph`
    keeps every edge type.
    """
    node_types = list(getattr(data, "node_types", []))
    if not node_types:
        raise BadInputError("HeteroData has no node types", field="node_types")
    codes = dict(type_codes or {t: t[0].upper() for t in node_types})
    if len(set(codes.values())) != len(codes) or set(codes) != set(node_types):
        raise BadInputError(f"type codes {codes} must map each node type to a unique letter",
                            field="type_codes")
    counts = {codes[t]: int(data[t].num_nodes) for t in node_types}
    edges: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    owner: dict[frozenset, tuple[str, str, str]] = {}
    keep = "; use schedlab.esr_hgnn.pyg.typed_graph(data), which keeps every edge type"
    for edge_type in data.edge_types:
        src_t, rel, dst_t = edge_type
        s, d = codes[src_t], codes[dst_t]
        index = np.asarray(_to_numpy(data[edge_type].edge_index))
        if index.ndim != 2 or index.shape[0] != 2:
            raise BadInputError(f"edge_index of {edge_type} has shape {index.shape}, "
                                "expected [2, E]", field="edge_index")
        index = index.astype(np.int64, copy=False)
        pair = frozenset((s, d))
        if pair not in owner:
            owner[pair] = tuple(edge_type)
            edges[(s, d)] = (index[0], index[1])
            continue
        first = owner[pair]
        fs, fd = codes[first[0]], codes[first[2]]
        if (fs, fd) == (s, d) or s == d:
            raise BadInputError(
                f"edge types {first} and {tuple(edge_type)} are two relations between the same "
                f"node types; a letter-coded graph would merge them into one{keep}",
                field="edge_types")
        forward = edges[(fs, fd)]
        if not _same_pairs(forward[0], forward[1], index[1], index[0]):
            raise BadInputError(
                f"edge type {tuple(edge_type)} is not the reverse of {first}; a letter-coded "
                f"graph adds that reverse itself and would drop {tuple(edge_type)}{keep}",
                field="edge_types")
    return HeteroGraph.from_edges(counts, edges, {codes[t]: t for t in node_types})


def _same_pairs(src_a, dst_a, src_b, dst_b) -> bool:
    """Do two edge lists hold the same set of (src, dst) pairs?"""
    a = np.unique(np.column_stack([src_a, dst_a]), axis=0)
    b = np.unique(np.column_stack([src_b, dst_b]), axis=0)
    return a.shape == b.shape and bool((a == b).all())


def _to_numpy(tensor) -> np.ndarray:
    if hasattr(tensor, "detach"):
        return tensor.detach().cpu().numpy()
    return np.asarray(tensor)


def address_layout(graph: HeteroGraph, align: int = 4096) -> dict[str, tuple[int, int]]:
    """Byte base addresses of every relation's ``indptr`` and ``indices`` in one flat memory.

    The hardware model needs real addresses to decide row-buffer hits: arrays are laid out one
    after another (sorted by relation name, page-aligned), as a CSR store in DRAM would be.
    """
    layout: dict[str, tuple[int, int]] = {}
    cursor = 0
    for name in sorted(graph.relations):
        rel = graph.relations[name]
        ptr_base = cursor
        cursor += _round_up(rel.indptr.size * WORD_BYTES, align)
        idx_base = cursor
        cursor += _round_up(max(1, rel.indices.size) * WORD_BYTES, align)
        layout[name] = (ptr_base, idx_base)
    return layout


def _round_up(value: int, align: int) -> int:
    return -(-value // align) * align
