"""Reader for MAGNN's preprocessed DBLP / IMDB / ACM directories (Fu et al., WWW'20).

ESR-HGNN (../shared/papers/05-esr_hgnn.md) is evaluated on DBLP, ACM and IMDB; MAGNN's
repository (github.com/cynricfu/MAGNN, ``utils/data.py``) ships them preprocessed as NumPy/SciPy
files, read here offline from a local path:

* ``adjM.npz``: one SciPy sparse N x N adjacency over *global* node ids, all relations merged;
* ``node_types.npy``: the type (0, 1, ...) of every global id (MAGNN's ``type_mask``);
* ``labels.npy``: a label per node of type 0 (the target: author in DBLP, movie in IMDB, paper
  in ACM);
* ``train_val_test_idx.npz``: ``train_idx``, ``val_idx``, ``test_idx`` (ids of type 0);
* ``features_<k>.npz`` (SciPy sparse) or ``features_<k>.npy`` (dense), optional per type.

Every non-empty block ``adjM[type i, type j]`` becomes the edge type ``(name i, "to", name j)``
(MAGNN has one relation per type pair, both directions stored); ids are renumbered per type.
Names default to MAGNN's (``dataset="dblp"``: author, paper, term, venue; ``imdb``: movie,
director, actor; ``acm``: paper, author, subject) or ``type_<k>``.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.esr_hgnn.typed import LabelledGraph, TypedGraph

NAMES = {
    "dblp": ["author", "paper", "term", "venue"],
    "imdb": ["movie", "director", "actor"],
    "acm": ["paper", "author", "subject"],
}


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise BadInputError("no such file", path=path) from None
    except (ValueError, OSError, EOFError) as exc:
        raise BadInputError(
            f"not a NumPy array file: {str(exc).splitlines()[0]}", path=path
        ) from None


def _load_sparse(path: Path):
    import scipy.sparse

    if not path.is_file():
        raise BadInputError("no such file", path=path)
    try:
        return scipy.sparse.load_npz(path).tocsr()
    except (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise BadInputError(
            f"not a SciPy sparse .npz: {str(exc).splitlines()[0]}", path=path
        ) from None


def read_magnn(
    directory: str | Path, dataset: str | None = None, names: Sequence[str] | None = None
) -> LabelledGraph:
    """Read a MAGNN ``*_processed`` directory (adjM.npz, node_types.npy, labels.npy, ...)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise BadInputError("MAGNN directory does not exist", path=directory)
    types_path = directory / "node_types.npy"
    type_mask = _load_npy(types_path)
    if type_mask.ndim != 1 or type_mask.size == 0 or not np.issubdtype(type_mask.dtype, np.integer):
        raise BadInputError(
            f"expected a non-empty 1-D integer array, got {type_mask.dtype} {type_mask.shape}",
            path=types_path,
            field="node_types",
        )
    kinds = np.unique(type_mask)
    if not np.array_equal(kinds, np.arange(kinds.size)):
        raise BadInputError(
            f"node types {kinds.tolist()[:10]} are not 0..{kinds.size - 1}",
            path=types_path,
            field="node_types",
        )
    n_types = kinds.size
    if names is None:
        key = (dataset or "").lower()
        if dataset is not None and key not in NAMES:
            raise BadInputError(
                f"unknown dataset {dataset!r}; known: {', '.join(NAMES)}", field="dataset"
            )
        names = NAMES[key] if key in NAMES else [f"type_{k}" for k in range(n_types)]
    names = list(names)
    if len(names) != n_types or len(set(names)) != n_types:
        raise BadInputError(
            f"{n_types} distinct names needed for the node types of {types_path}, got {names}",
            field="names",
        )
    adj_path = directory / "adjM.npz"
    adj = _load_sparse(adj_path)
    n = type_mask.size
    if adj.shape != (n, n):
        raise BadInputError(
            f"shape {adj.shape} but node_types.npy has {n} nodes", path=adj_path, field="adjM"
        )
    local = np.zeros(n, dtype=np.int64)
    counts = np.bincount(type_mask, minlength=n_types)
    for k in range(n_types):
        local[type_mask == k] = np.arange(counts[k])
    coo = adj.tocoo()
    src, dst = coo.row.astype(np.int64), coo.col.astype(np.int64)
    st, dt = type_mask[src], type_mask[dst]
    edges = {}
    for i in range(n_types):
        for j in range(n_types):
            sel = (st == i) & (dt == j)
            if sel.any():
                edges[(names[i], "to", names[j])] = np.vstack([local[src[sel]], local[dst[sel]]])
    if not edges:
        raise BadInputError("adjacency has no edges", path=adj_path)
    graph = TypedGraph.from_edge_index({names[k]: int(c) for k, c in enumerate(counts)}, edges)
    target = names[0]
    labels: dict[str, np.ndarray] = {}
    label_path = directory / "labels.npy"
    if label_path.is_file():
        y = _load_npy(label_path)
        if y.ndim != 1 or y.size != counts[0] or not np.issubdtype(y.dtype, np.integer):
            raise BadInputError(
                f"expected {counts[0]} integer labels (one per {target}), got {y.dtype} {y.shape}",
                path=label_path,
                field="labels",
            )
        labels[target] = y.astype(np.int64)
    splits: dict[str, np.ndarray] = {}
    split_path = directory / "train_val_test_idx.npz"
    if split_path.is_file():
        try:
            with np.load(split_path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise BadInputError(
                f"not a NumPy .npz: {str(exc).splitlines()[0]}", path=split_path
            ) from None
        for key in ("train_idx", "val_idx", "test_idx"):
            if key not in arrays:
                raise BadInputError(
                    f"missing array {key!r} (has {sorted(arrays)})", path=split_path, field=key
                )
            ids = arrays[key].astype(np.int64).ravel()
            if ids.size and (ids.min() < 0 or ids.max() >= counts[0]):
                raise BadInputError(
                    f"{key} holds ids outside [0, {counts[0]})", path=split_path, field=key
                )
            splits[key[:-4]] = ids
    features = {}
    for k in range(n_types):
        for suffix in (".npz", ".npy"):
            path = directory / f"features_{k}{suffix}"
            if not path.is_file():
                continue
            x = _load_sparse(path).toarray() if suffix == ".npz" else _load_npy(path)
            if x.ndim != 2 or x.shape[0] != counts[k]:
                raise BadInputError(
                    f"shape {x.shape}, expected ({counts[k]}, F) for {names[k]}",
                    path=path,
                    field=f"features_{k}",
                )
            features[names[k]] = np.asarray(x, dtype=np.float32)
            break
    return LabelledGraph(graph, features, labels, splits, target, f"MAGNN {directory}")
