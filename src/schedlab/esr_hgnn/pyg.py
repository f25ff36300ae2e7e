"""PyTorch Geometric adapter: ESR-HGNN's trie sampler on a ``HeteroData``, as a PyG loader.

Paper: ESR-HGNN (../shared/papers/05-esr_hgnn.md). Needs the ``pyg`` extra
(``pip install 'schedlab[pyg]'``); everything is imported lazily so the rest of the package works
without it.

* :func:`typed_graph` turns a ``HeteroData`` into a :class:`typed.TypedGraph`, keeping every
  canonical edge type ``(src, rel, dst)``: two relations between the same node types stay two
  relations, and node types keep their names.
* :class:`MetapathSampler` samples a seed batch along metapaths given as edge-type sequences (as
  ``MetaPath2Vec``/``AddMetaPaths`` take them) and returns ``{metapath: edge_index}`` tensors or a
  ``HeteroData`` subgraph whose metapath edge types are named ``metapath_0``, ``metapath_1`` ...
  exactly as ``AddMetaPaths`` names them, so a ``HANConv`` built for ``AddMetaPaths`` metadata
  runs on it unchanged.
* :class:`MetapathLoader` iterates seed batches the way ``NeighborLoader`` does: each batch is a
  ``HeteroData`` whose first ``batch_size`` nodes of the seed type are the seeds, with ``n_id``
  (global ids) per node type and ``input_id``.

Edge direction follows PyG's ``source_to_target`` flow: ``edge_index[0]`` is the metapath
neighbour (message source) and ``edge_index[1]`` the seed (target). With fan-out ``k`` every seed
gets ``k`` walks per metapath, drawn with replacement; a walk that reaches a node without
out-edges is dropped (PyG's ``MetaPath2Vec`` maps it to a dummy node instead).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.esr_hgnn.kernels import edge_pairs, relabel
from schedlab.esr_hgnn.policies import check_frontier
from schedlab.esr_hgnn.pygcheck import require_pyg
from schedlab.esr_hgnn.typed import (
    EdgeType,
    Metapath,
    TypedGraph,
    check_metapaths,
    metapath_name,
    sample_typed,
)


def typed_graph(data) -> TypedGraph:
    """A ``HeteroData`` (anything with ``node_types``/``edge_types``/``[key]``) as a TypedGraph.

    Every edge type is kept with its relation name; no reverse is added (use PyG's
    ``ToUndirected`` or :meth:`TypedGraph.add_reverse` to walk relations backwards).
    """
    node_types = list(getattr(data, "node_types", []) or [])
    if not node_types:
        raise BadInputError("HeteroData has no node types", field="node_types")
    counts = {}
    for t in node_types:
        n = getattr(data[t], "num_nodes", None)
        if n is None:
            raise BadInputError(
                f"node type {t!r} has no num_nodes (set data[{t!r}].num_nodes or .x)",
                field="num_nodes",
            )
        counts[t] = int(n)
    edges = {}
    for et in getattr(data, "edge_types", []):
        store = data[et]
        index = getattr(store, "edge_index", None)
        if index is None:
            raise BadInputError(f"edge type {et} has no edge_index", field="edge_index")
        edges[tuple(et)] = _numpy(index)
    if not edges:
        raise BadInputError("HeteroData has no edge types", field="edge_types")
    return TypedGraph.from_edge_index(counts, edges)


def _numpy(tensor) -> np.ndarray:
    if hasattr(tensor, "detach"):
        return tensor.detach().cpu().numpy()
    return np.asarray(tensor)


def _fanouts(num_neighbors) -> tuple[int, ...]:
    values = (
        (num_neighbors,) if isinstance(num_neighbors, (int, np.integer)) else tuple(num_neighbors)
    )
    if not values or any(not isinstance(v, (int, np.integer)) or v < 1 for v in values):
        raise BadInputError(
            f"num_neighbors {num_neighbors!r} must be positive integers", field="num_neighbors"
        )
    return tuple(int(v) for v in values)


#: ``auto`` (the trie where it is predicted to save >= 10 % of the reads, else naive; the
#: default), ``trie`` (ESR-HGNN), ``naive`` (each metapath on its own, same kernel),
#: ``pyg-walk`` (PyG's own ``MetaPath2Vec`` hop sampler, the library baseline)
METHODS = ("auto", "trie", "naive", "pyg-walk")


class PyGWalker:
    """Metapath walks drawn by PyG's own sampler (``torch_geometric.nn.models.metapath2vec``).

    Builds rowptr/col per edge type the way ``MetaPath2Vec.__init__`` does (``sort_edge_index``,
    ``index2ptr``) and calls its ``sample`` hop function; fan-out ``k`` at hop ``h`` is
    ``num_neighbors=k`` there. Dead walks (PyG's dummy node) come back as -1. PyG's sampler
    draws from torch's global generator, so building a walker calls ``torch.manual_seed(seed)``
    (it reseeds the caller's global torch RNG).
    """

    def __init__(self, graph: TypedGraph, seed: int = 0, device: str = "cpu") -> None:
        require_pyg()
        import torch
        from torch_geometric.index import index2ptr
        from torch_geometric.utils import sort_edge_index

        self.rowptr, self.col, self.rowcount = {}, {}, {}
        for et in graph.csr:
            index = torch.from_numpy(graph.edge_index(et))
            n_src, n_dst = graph.num_nodes[et[0]], graph.num_nodes[et[2]]
            row, col = sort_edge_index(index, num_nodes=max(n_src, n_dst))
            self.rowptr[et] = index2ptr(row, size=n_src)
            self.col[et] = col
            self.rowcount[et] = self.rowptr[et][1:] - self.rowptr[et][:-1]
            for table in (self.rowptr, self.col, self.rowcount):
                table[et] = table[et].to(device)
        self.dummy = max(graph.num_nodes.values())
        self.generator_seed = seed
        torch.manual_seed(seed)

    def walk(self, mp: Metapath, seeds, fanouts: Sequence[int]):
        """One metapath's endpoints as a torch tensor (len(seeds) * prod(fanouts)), dummy kept."""
        from torch_geometric.nn.models.metapath2vec import sample

        batch = seeds
        for h, et in enumerate(mp):
            k = int(fanouts[h]) if h < len(fanouts) else 1
            batch = sample(
                self.rowptr[et],
                self.col[et],
                self.rowcount[et],
                batch,
                num_neighbors=k,
                dummy_idx=self.dummy,
            ).view(-1)
        return batch

    def endpoints(
        self, metapaths: Sequence[Metapath], seeds: np.ndarray, fanouts: Sequence[int]
    ) -> dict[Metapath, np.ndarray]:
        import torch

        t = torch.from_numpy(seeds).to(self.col[metapaths[0][0]].device)
        out = {}
        for mp in metapaths:
            e = self.walk(mp, t, fanouts).cpu().numpy().astype(np.int64)
            e[e >= self.dummy] = -1
            out[mp] = e.reshape(seeds.size, -1)
        return out


class MetapathSampler:
    """Metapath sampling on a ``HeteroData``; ``method`` is one of :data:`METHODS`.

    ``metapaths`` are sequences of canonical edge types; ``num_neighbors`` is the fan-out of the
    first hop (an int) or per hop (a list; hops past it draw 1, i.e. walks).
    """

    def __init__(
        self,
        data,
        metapaths: Sequence[Sequence[EdgeType]],
        num_neighbors=10,
        method: str = "auto",
        seed: int = 0,
    ) -> None:
        if method not in METHODS:
            raise BadInputError(
                f"unknown method {method!r}; valid: {', '.join(METHODS)}", field="method"
            )
        self.data = data
        self.graph = typed_graph(data)
        self.metapaths: list[Metapath] = check_metapaths(self.graph, metapaths)
        self.fanouts = _fanouts(num_neighbors)
        self.method = method
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._tables: dict[str, np.ndarray] = {}
        self.input_type = self.metapaths[0][0][0]
        self.last_reads = 0
        self._pyg = PyGWalker(self.graph, seed) if method == "pyg-walk" else None

    @property
    def metapath_edge_types(self) -> list[EdgeType]:
        """``(start, "metapath_i", end)`` per metapath, AddMetaPaths' naming."""
        return [(mp[0][0], f"metapath_{i}", mp[-1][2]) for i, mp in enumerate(self.metapaths)]

    def sample_numpy(self, seeds) -> dict[Metapath, np.ndarray]:
        """Raw endpoints per metapath: (len(seeds), walks), -1 for a walk that died."""
        if self._pyg is not None:
            return self._pyg.endpoints(
                self.metapaths, np.asarray(_numpy(seeds), np.int64), self.fanouts
            )
        batch = sample_typed(
            self.graph, self.metapaths, _numpy(seeds), self.fanouts, self.rng, self.method
        )
        self.last_reads = batch.reads
        return batch.endpoints

    def _guard(self, n_seeds: int, bytes_per_entry: int) -> None:
        check_frontier(
            [len(mp) for mp in self.metapaths],
            n_seeds,
            self.fanouts,
            bytes_per_entry=bytes_per_entry,
            holds="sampled endpoints (ids + edge_index)",
        )

    def sample(self, seeds) -> dict[Metapath, object]:
        """``{metapath: edge_index}`` (torch.long [2, E]) in global ids: row 0 neighbour, row 1
        seed; dead walks dropped, repeated draws kept (their multiplicity is the walk count)."""
        import torch

        seeds_np = np.ascontiguousarray(_numpy(seeds), dtype=np.int64)
        self._guard(seeds_np.size, _BYTES_WITH_EDGE_INDEX)
        out = {}
        for mp, ends in self.sample_numpy(seeds_np).items():
            out[mp] = torch.from_numpy(edge_pairs(ends.ravel(), ends.shape[1], seeds_np))
        return out

    def subgraph(self, seeds):
        """A ``HeteroData`` batch: seeds first in their node type, metapath edges local.

        Node types are the seed type and the end types of the metapaths; local ids follow first
        appearance (seeds first, duplicates kept, as ``NeighborLoader`` numbers them). Every
        node store gets ``n_id`` (global ids) and the rows of every tensor attribute of the full
        graph's store (``x``, ``y``, masks). The seed store gets ``batch_size`` and
        ``input_id``. Relabelling and edge building are one linear Numba pass per node type
        (:func:`kernels.relabel`, :func:`kernels.edge_pairs`).
        """
        require_pyg()
        import torch
        from torch_geometric.data import HeteroData

        seeds_np = np.ascontiguousarray(_numpy(seeds), dtype=np.int64)
        self._guard(seeds_np.size, _BYTES_WITH_EDGE_INDEX)
        ends = self.sample_numpy(seeds_np)
        by_type: dict[str, list[Metapath]] = {self.input_type: []}
        for mp in self.metapaths:
            by_type.setdefault(mp[-1][2], []).append(mp)
        local_of: dict[Metapath, np.ndarray] = {}
        node_ids: dict[str, np.ndarray] = {}
        empty = np.empty(0, np.int64)
        for t, mps in by_type.items():
            flat = [ends[mp].ravel() for mp in mps]
            values = flat[0] if len(flat) == 1 else np.concatenate(flat) if flat else empty
            first = seeds_np if t == self.input_type else empty
            ids, local = relabel(first, values, self._scratch(t))
            node_ids[t] = ids
            start = 0
            for mp, part in zip(mps, flat, strict=True):
                local_of[mp] = local[start : start + part.size]
                start += part.size
        out = HeteroData()
        for t, ids in node_ids.items():
            store = self.data[t]
            n_id = torch.from_numpy(ids)
            out[t].n_id = n_id
            out[t].num_nodes = int(ids.size)
            n = self.graph.num_nodes[t]
            for key, value in store.items():
                if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.size(0) == n:
                    out[t][key] = value.index_select(0, n_id)
        out[self.input_type].batch_size = int(seeds_np.size)
        out[self.input_type].input_id = torch.from_numpy(seeds_np)
        targets = np.arange(seeds_np.size, dtype=np.int64)
        for et, mp in zip(self.metapath_edge_types, self.metapaths, strict=True):
            walks = ends[mp].shape[1]
            out[et].edge_index = torch.from_numpy(edge_pairs(local_of[mp], walks, targets))
        return out

    def _scratch(self, node_type: str) -> np.ndarray:
        """The -1-filled global->local table of ``node_type`` (kept between batches)."""
        table = self._tables.get(node_type)
        if table is None:
            table = np.full(self.graph.num_nodes[node_type], -1, dtype=np.int64)
            self._tables[node_type] = table
        return table

    def reseed(self, *entropy: int) -> None:
        """A fresh random stream (a loader's worker process calls it with its worker seed)."""
        self.rng = np.random.default_rng([self.seed, *entropy])


#: bytes a sampled endpoint costs once the PyG adapter holds it: the int64 id and its two
#: int64 edge_index entries
_BYTES_WITH_EDGE_INDEX = 24

#: NeighborLoader arguments a metapath loader cannot honour unless they keep their default
#: value (or one of the listed ones): name -> (accepted values, why)
_NEIGHBOR_ONLY = {
    "input_time": ((None,), "temporal sampling is not implemented"),
    "replace": ((True,), "metapath walks are drawn with replacement (MetaPath2Vec semantics); "
                "pass replace=True or leave it out"),
    "subgraph_type": (("directional",), "batches hold metapath edges seed <- neighbour only"),
    "disjoint": ((False,), "per-seed disjoint subgraphs are not implemented"),
    "temporal_strategy": (("uniform",), "temporal sampling is not implemented"),
    "time_attr": ((None,), "temporal sampling is not implemented"),
    "weight_attr": ((None,), "weighted sampling is not implemented (walks are uniform)"),
    "transform_sampler_output": ((None,), "there is no SamplerOutput to transform"),
    "neighbor_sampler": ((None,), "the sampler is MetapathSampler (pass method=)"),
    "directed": ((True,), "directed=False is deprecated in PyG and not implemented"),
    "custom_cls": ((None,), "batches are HeteroData"),
    "input_id": ((None,), "input_id is the position in input_nodes"),
    "collate_fn": ((None,), "the loader's own collate builds the batch; use transform="),
    "dataset": ((None,), "the dataset is input_nodes"),
}
#: accepted and ignored (documented): they change nothing for an in-memory metapath sampler
_NEIGHBOR_IGNORED = ("is_sorted", "filter_per_worker")


def _data_loader_arguments() -> set[str]:
    import inspect

    from torch.utils.data import DataLoader

    names = set(inspect.signature(DataLoader.__init__).parameters) - {"self", "dataset"}
    return names - {"collate_fn"}


class _Collate:
    """Picklable collate: positions in ``input_nodes`` -> one ``HeteroData`` batch."""

    def __init__(self, sampler: MetapathSampler, input_ids: np.ndarray, transform) -> None:
        self.sampler, self.input_ids, self.transform = sampler, input_ids, transform
        self.worker_seed: int | None = None

    def __call__(self, positions):
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is not None and info.seed != self.worker_seed:
            # a forked worker inherits the parent's generator: give it a stream of its own
            self.worker_seed = info.seed
            self.sampler.reseed(info.id, info.seed % 2**63)
        pos = np.asarray(positions, dtype=np.int64)
        batch = self.sampler.subgraph(self.input_ids[pos])
        batch[self.sampler.input_type].input_id = torch.from_numpy(pos)
        return self.transform(batch) if self.transform is not None else batch


def _same_setting(value, allowed) -> bool:
    """``value`` is the accepted setting ``allowed`` (None, a bool, or a name/enum value)."""
    if allowed is None:
        return value is None
    if isinstance(allowed, bool):
        return isinstance(value, (bool, np.bool_)) and bool(value) is allowed
    return value == allowed or getattr(value, "value", None) == allowed


def _check_loader_arguments(kwargs: dict, num_neighbors) -> dict:
    """NeighborLoader's arguments: accepted, ignored or refused by name; returns DataLoader's."""
    for name, value in kwargs.items():
        if name in _NEIGHBOR_ONLY:
            allowed, why = _NEIGHBOR_ONLY[name]
            if not any(_same_setting(value, a) for a in allowed):
                shown = repr(value) if isinstance(value, (str, bool, int, type(None))) else (
                    f"<{type(value).__name__}>")
                raise BadInputError(
                    f"{name}={shown} is not supported by MetapathLoader: {why}", field=name
                )
        elif name not in _NEIGHBOR_IGNORED and name not in _data_loader_arguments():
            raise BadInputError(
                f"MetapathLoader got an unknown argument {name!r} (NeighborLoader's and "
                "DataLoader's arguments are accepted)",
                field=name,
            )
    if isinstance(num_neighbors, dict):
        raise BadInputError(
            "num_neighbors per edge type (a dict) is not supported: metapath fan-outs are per "
            "hop depth, e.g. [10] or [10, 2]",
            field="num_neighbors",
        )
    dropped = set(_NEIGHBOR_ONLY) | set(_NEIGHBOR_IGNORED)
    return {k: v for k, v in kwargs.items() if k not in dropped}


_LOADER_CLASS = None


def _loader_class():
    """``MetapathLoader``, a ``torch.utils.data.DataLoader`` subclass, built on first use so this
    module imports without torch."""
    global _LOADER_CLASS
    if _LOADER_CLASS is not None:
        return _LOADER_CLASS
    require_pyg()
    import torch
    from torch.utils.data import DataLoader

    class MetapathLoader(DataLoader):
        """Iterate ``HeteroData`` batches of seeds like ``NeighborLoader`` does.

        A ``torch.utils.data.DataLoader`` over ``input_nodes`` (the seed node type or ``(type,
        ids_or_bool_mask)``), so every DataLoader argument works as in ``NeighborLoader``:
        ``batch_size`` (larger than the seed set gives one short batch), ``shuffle``,
        ``drop_last``, ``num_workers`` (each worker reseeds its sampler from its worker seed),
        ``pin_memory``, ``persistent_workers``, ``prefetch_factor``, ``generator`` ...
        NeighborLoader's own arguments are accepted where they mean the same here
        (``replace=True``, ``subgraph_type="directional"``, ``disjoint=False``,
        ``directed=True``, ``transform``; ``is_sorted`` and ``filter_per_worker`` change
        nothing) and refused by name otherwise. Each batch's seed store has ``batch_size``,
        ``n_id[:batch_size]`` (the seeds) and ``input_id`` (their positions in ``input_nodes``,
        as PyG). ``shuffle`` without a ``generator`` draws from one seeded from ``seed``, so
        runs repeat. ``method`` and ``seed`` are :class:`MetapathSampler`'s.
        """

        def __init__(
            self,
            data,
            metapaths: Sequence[Sequence[EdgeType]],
            num_neighbors=10,
            input_nodes=None,
            batch_size: int = 1,
            shuffle: bool = False,
            method: str = "auto",
            seed: int = 0,
            transform=None,
            **kwargs,
        ) -> None:
            passed = _check_loader_arguments(kwargs, num_neighbors)
            sampler = MetapathSampler(data, metapaths, num_neighbors, method, seed)
            ids = _input_ids(sampler, input_nodes)
            if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
                raise BadInputError(
                    f"batch_size {batch_size!r} must be a positive integer", field="batch_size"
                )
            sampler._guard(min(int(batch_size), ids.size), _BYTES_WITH_EDGE_INDEX)
            if shuffle and passed.get("generator") is None and "sampler" not in passed:
                passed["generator"] = torch.Generator().manual_seed(seed)
            super().__init__(
                range(ids.size),
                batch_size=int(batch_size),
                shuffle=shuffle,
                collate_fn=_Collate(sampler, ids, transform),
                **passed,
            )
            self.metapath_sampler = sampler
            self.input_ids = ids

    _LOADER_CLASS = MetapathLoader
    return MetapathLoader


def __getattr__(name: str):
    if name == "MetapathLoader":
        return _loader_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _input_ids(sampler: MetapathSampler, input_nodes) -> np.ndarray:
    start = sampler.input_type
    if input_nodes is None:
        input_nodes = start
    if isinstance(input_nodes, str):
        node_type, ids = input_nodes, None
    else:
        node_type, ids = input_nodes
    if node_type != start:
        raise BadInputError(
            f"input_nodes are of type {node_type!r} but the metapaths start at {start!r}",
            field="input_nodes",
        )
    n = sampler.graph.num_nodes[start]
    if ids is None:
        ids = np.arange(n, dtype=np.int64)
    else:
        ids = np.asarray(_numpy(ids))
        if ids.dtype == bool:
            if ids.size != n:
                raise BadInputError(
                    f"mask of {ids.size} entries for {n} {start!r} nodes", field="input_nodes"
                )
            ids = np.flatnonzero(ids)
        ids = ids.astype(np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise BadInputError(f"input node ids must be in [0, {n})", field="input_nodes")
    if ids.size == 0:
        raise BadInputError("no input nodes", field="input_nodes")
    return ids


def relation_edge_type(graph, src: str, dst: str) -> EdgeType:
    """The edge type :func:`to_heterodata` gives the letter-coded relation ``src -> dst``."""
    names = graph.type_names
    return (names.get(src, src), f"{src}{dst}".lower(), names.get(dst, dst))


def to_heterodata(graph):
    """A letter-coded :class:`graph.HeteroGraph` (e.g. a generated DBLP) as a ``HeteroData``.

    Every directed relation ``XY`` becomes the edge type ``(name X, "xy", name Y)``, so both
    directions are explicit and :func:`letters_to_metapath` translates ``"APCPA"``.
    """
    require_pyg()
    import torch
    from torch_geometric.data import HeteroData

    data = HeteroData()
    for code, n in graph.node_counts.items():
        data[graph.type_names.get(code, code)].num_nodes = int(n)
    for rel in graph.relations.values():
        src = np.repeat(np.arange(rel.indptr.size - 1, dtype=np.int64), rel.degrees())
        data[relation_edge_type(graph, rel.src, rel.dst)].edge_index = torch.from_numpy(
            np.vstack([src, rel.indices])
        )
    return data


def letters_to_metapath(graph, metapath: str) -> list[EdgeType]:
    """``"APCPA"`` on a letter-coded graph as the edge-type sequence of :func:`to_heterodata`."""
    return [relation_edge_type(graph, a, b) for a, b in zip(metapath, metapath[1:], strict=False)]


def compare_with_pyg(
    data,
    metapaths: Sequence[Sequence[EdgeType]],
    seeds,
    walks: int = 400,
    method: str = "auto",
    repeats: int = 5,
    seed: int = 0,
) -> list[dict]:
    """Per metapath: does our sampler draw what PyG's ``MetaPath2Vec`` sampler draws, and how
    fast is each at equal output?

    Both draw ``walks`` walks per seed; a stratified chi-squared homogeneity test (per seed,
    dead walks as one category, sparse categories pooled, :func:`stats.homogeneity_pvalue`)
    gives the p-value. Times are the best of ``repeats`` CPU times of one whole batch (all
    metapaths), ours through :meth:`MetapathSampler.sample_numpy`, PyG's through its hop
    function, torch on one thread.
    """
    import time

    import torch

    from schedlab.esr_hgnn.stats import homogeneity_pvalue

    ours = MetapathSampler(data, metapaths, walks, method=method, seed=seed)
    theirs = MetapathSampler(data, metapaths, walks, method="pyg-walk", seed=seed + 1)
    seeds_np = np.asarray(_numpy(seeds), dtype=np.int64)
    a, b = ours.sample_numpy(seeds_np), theirs.sample_numpy(seeds_np)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        best = {}
        for name, sampler in (("ours", ours), ("pyg", theirs)):
            sampler.sample_numpy(seeds_np)
            t = float("inf")
            for _ in range(repeats):
                t0 = time.process_time()
                sampler.sample_numpy(seeds_np)
                t = min(t, time.process_time() - t0)
            best[name] = t
    finally:
        torch.set_num_threads(threads)
    rows = []
    for mp in ours.metapaths:
        n_end = ours.graph.num_nodes[mp[-1][2]] + 1

        def counts(ends, n_end=n_end):
            return np.stack([np.bincount(row + 1, minlength=n_end) for row in ends])

        rows.append(
            dict(
                metapath=metapath_name(mp),
                pvalue=homogeneity_pvalue(counts(a[mp]), counts(b[mp])),
                ours_cpu_s=best["ours"],
                pyg_cpu_s=best["pyg"],
                speedup=best["pyg"] / best["ours"] if best["ours"] > 0 else float("inf"),
            )
        )
    return rows
