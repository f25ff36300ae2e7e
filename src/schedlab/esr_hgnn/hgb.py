"""Reader for the Heterogeneous Graph Benchmark's (HGB, Lv et al. KDD'21) node-classification files.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) is evaluated on DBLP, ACM and IMDB; HGB distributes
them (github.com/THUDM/HGB, ``NC/benchmark``) as a directory of tab-separated text files, read
here offline from a local path:

* ``node.dat``: ``node_id<TAB>node_name<TAB>node_type[<TAB>attr,attr,...]``; ids start at 0 and
  every node type takes one contiguous id range, types in increasing order;
* ``link.dat``: ``src_id<TAB>dst_id<TAB>link_type<TAB>weight`` in global ids; each link type
  joins one (src type, dst type) pair;
* ``label.dat`` (and ``label.dat.test``, optional): ``node_id<TAB>name<TAB>type<TAB>label[,label]``
  (several labels per node in IMDB);
* ``meta.dat`` (optional): ``Node Type_<k>: <count>``, ``Edge Type_<r>: <count>`` lines, checked
  against the counts read.

Each link type becomes its own canonical edge type ``(src name, "link_<r>", dst name)``, so two
link types between the same node types stay apart; node type names are ``type_<k>`` unless given
(``names=["author", "paper", "term", "venue"]``). Ids are renumbered per type (global id minus
the type's first id). Every malformed line raises a BadInputError naming file, line and field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.core.io import parse_lines
from schedlab.esr_hgnn.typed import LabelledGraph, TypedGraph

_META = re.compile(r"^\s*(Node|Edge) Type_(\d+)\s*:\s*(\d+)\s*$")


def _int(text: str, line: int, field: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise BadInputError(f"{text.strip()!r} is not an integer", line=line, field=field) from None


def _read_nodes(path: Path):
    types: list[int] = []
    attrs: dict[int, list[np.ndarray]] = {}
    widths: dict[int, int] = {}

    def parse(line: str, lineno: int):
        if not line.strip():
            return None
        parts = line.split("\t")
        if len(parts) not in (3, 4):
            raise BadInputError(
                f"expected 3 or 4 tab-separated fields, got {len(parts)}",
                line=lineno,
                field="node_type",
            )
        node_id = _int(parts[0], lineno, "node_id")
        node_type = _int(parts[2], lineno, "node_type")
        if node_id != len(types):
            raise BadInputError(
                f"node_id {node_id} out of order (expected {len(types)}; ids "
                "start at 0 and are consecutive)",
                line=lineno,
                field="node_id",
            )
        if node_type < 0 or (types and node_type < types[-1]):
            raise BadInputError(
                f"node_type {node_type} after type {types[-1] if types else 0}:"
                " each type must take one contiguous id range, types ascending",
                line=lineno,
                field="node_type",
            )
        if len(parts) == 4 and parts[3].strip():
            try:
                vec = np.array([float(v) for v in parts[3].split(",")], dtype=np.float32)
            except ValueError:
                raise BadInputError(
                    "attributes must be comma-separated numbers", line=lineno, field="node_attr"
                ) from None
            if not np.isfinite(vec).all():
                raise BadInputError("attributes must be finite", line=lineno, field="node_attr")
            width = widths.setdefault(node_type, vec.size)
            if vec.size != width:
                raise BadInputError(
                    f"{vec.size} attributes, earlier nodes of type {node_type} have {width}",
                    line=lineno,
                    field="node_attr",
                )
            attrs.setdefault(node_type, []).append(vec)
        types.append(node_type)
        return True

    for _ in parse_lines(path, parse):
        pass
    if not types:
        raise BadInputError("no nodes", path=path)
    type_arr = np.asarray(types, dtype=np.int64)
    kinds = np.unique(type_arr)
    if not np.array_equal(kinds, np.arange(kinds.size)):
        raise BadInputError(
            f"node types {kinds.tolist()} are not 0..{kinds.size - 1}", path=path, field="node_type"
        )
    counts = np.bincount(type_arr)
    for k, rows in attrs.items():
        if len(rows) != counts[k]:
            raise BadInputError(
                f"{len(rows)} of {counts[k]} nodes of type {k} have attributes; give all or none",
                path=path,
                field="node_attr",
            )
    return type_arr, counts, {k: np.vstack(v) for k, v in attrs.items()}


def read_hgb(
    directory: str | Path, names: Sequence[str] | None = None, target: int | None = None
) -> LabelledGraph:
    """Read an HGB node-classification directory (node.dat, link.dat, label.dat, ...)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise BadInputError("HGB directory does not exist", path=directory)
    node_path = directory / "node.dat"
    type_arr, counts, attrs = _read_nodes(node_path)
    n_types = counts.size
    if names is None:
        names = [f"type_{k}" for k in range(n_types)]
    names = list(names)
    if len(names) != n_types or len(set(names)) != n_types or not all(names):
        raise BadInputError(
            f"{len(names)} distinct names needed for the {n_types} node types "
            f"of {node_path}, got {names}",
            field="names",
        )
    shift = np.concatenate([[0], np.cumsum(counts)])
    total = int(shift[-1])
    link_path = directory / "link.dat"
    pairs: dict[int, tuple[int, int]] = {}
    rows: dict[int, tuple[list[int], list[int]]] = {}

    def parse_link(line: str, lineno: int):
        if not line.strip():
            return None
        parts = line.split("\t")
        if len(parts) not in (3, 4):
            raise BadInputError(
                f"expected 4 tab-separated fields, got {len(parts)}", line=lineno, field="link_type"
            )
        src, dst = _int(parts[0], lineno, "src_id"), _int(parts[1], lineno, "dst_id")
        rel = _int(parts[2], lineno, "link_type")
        for value, field in ((src, "src_id"), (dst, "dst_id")):
            if not 0 <= value < total:
                raise BadInputError(
                    f"{field} {value} outside the {total} nodes of node.dat",
                    line=lineno,
                    field=field,
                )
        if rel < 0:
            raise BadInputError(f"link_type {rel} is negative", line=lineno, field="link_type")
        if len(parts) == 4:
            try:
                float(parts[3])
            except ValueError:
                raise BadInputError(
                    f"{parts[3].strip()!r} is not a number", line=lineno, field="weight"
                ) from None
        pair = (int(type_arr[src]), int(type_arr[dst]))
        known = pairs.setdefault(rel, pair)
        if known != pair:
            raise BadInputError(
                f"link_type {rel} joins types {pair}, earlier lines {known}",
                line=lineno,
                field="link_type",
            )
        entry = rows.setdefault(rel, ([], []))
        entry[0].append(src - int(shift[pair[0]]))
        entry[1].append(dst - int(shift[pair[1]]))
        return True

    for _ in parse_lines(link_path, parse_link):
        pass
    if not rows:
        raise BadInputError("no links", path=link_path)
    edges = {
        (names[pairs[r][0]], f"link_{r}", names[pairs[r][1]]): np.vstack(
            [np.asarray(s, np.int64), np.asarray(d, np.int64)]
        )
        for r, (s, d) in sorted(rows.items())
    }
    graph = TypedGraph.from_edge_index({names[k]: int(c) for k, c in enumerate(counts)}, edges)
    _check_meta(directory / "meta.dat", counts, {r: len(s) for r, (s, _) in rows.items()})
    labels, splits, label_type = _read_labels(directory, type_arr, shift, target)
    tname = names[label_type] if label_type is not None else None
    return LabelledGraph(
        graph,
        {names[k]: v for k, v in attrs.items()},
        {tname: labels} if tname is not None else {},
        splits,
        tname,
        f"HGB {directory}",
    )


def _check_meta(path: Path, counts: np.ndarray, link_counts: dict[int, int]) -> None:
    if not path.is_file():
        return

    def parse(line: str, lineno: int):
        m = _META.match(line)
        if m is None:
            return None  # "Node Total", label lines and the like are not cross-checked
        kind, k, n = m.group(1), int(m.group(2)), int(m.group(3))
        have = (
            (int(counts[k]) if k < counts.size else 0)
            if kind == "Node"
            else (link_counts.get(k, 0))
        )
        if have != n:
            raise BadInputError(
                f"{kind} Type_{k}: {n} here but {have} read from "
                f"{'node.dat' if kind == 'Node' else 'link.dat'}",
                line=lineno,
                field=f"{kind} Type_{k}",
            )
        return True

    for _ in parse_lines(path, parse):
        pass


def _read_labels(directory: Path, type_arr: np.ndarray, shift: np.ndarray, target: int | None):
    found: dict[str, dict[int, list[int]]] = {}
    label_type: list[int] = [] if target is None else [target]
    for name in ("label.dat", "label.dat.test"):
        path = directory / name
        if not path.is_file():
            continue
        got: dict[int, list[int]] = {}

        def parse(line: str, lineno: int, got=got):
            if not line.strip():
                return None
            parts = line.split("\t")
            if len(parts) != 4:
                raise BadInputError(
                    f"expected 4 tab-separated fields, got {len(parts)}", line=lineno, field="label"
                )
            node = _int(parts[0], lineno, "node_id")
            if not 0 <= node < type_arr.size:
                raise BadInputError(
                    f"node_id {node} is not in node.dat", line=lineno, field="node_id"
                )
            ntype = _int(parts[2], lineno, "node_type")
            if ntype != type_arr[node]:
                raise BadInputError(
                    f"node_type {ntype} but node.dat says {type_arr[node]}",
                    line=lineno,
                    field="node_type",
                )
            if not label_type:
                label_type.append(ntype)
            if ntype != label_type[0]:
                raise BadInputError(
                    f"labels of node type {ntype} and {label_type[0]}; one target type expected",
                    line=lineno,
                    field="node_type",
                )
            values = [_int(v, lineno, "label") for v in parts[3].split(",")]
            if min(values) < 0:
                raise BadInputError("labels must be non-negative", line=lineno, field="label")
            if node in got:
                raise BadInputError(f"node_id {node} labelled twice", line=lineno, field="node_id")
            got[node] = values
            return True

        for _ in parse_lines(path, parse):
            pass
        found[name] = got
    if not found or not label_type:
        return np.empty(0, np.int64), {}, None
    k = label_type[0]
    n = int(shift[k + 1] - shift[k])
    every = {node: v for got in found.values() for node, v in got.items()}
    multi = any(len(v) > 1 for v in every.values())
    n_classes = 1 + max(max(v) for v in every.values())
    if multi:
        labels = np.zeros((n, n_classes), dtype=np.int64)
        for node, v in every.items():
            labels[node - shift[k], v] = 1
    else:
        labels = np.full(n, -1, dtype=np.int64)
        for node, v in every.items():
            labels[node - shift[k]] = v[0]
    splits = {
        "train" if name == "label.dat" else "test": np.asarray(sorted(got), dtype=np.int64)
        - int(shift[k])
        for name, got in found.items()
    }
    return labels, splits, k
