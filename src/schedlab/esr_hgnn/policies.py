"""Metapath samplers behind one protocol: naive per-metapath sampling and ESR-HGNN's trie sampler.

Paper: ESR-HGNN, redundancy-aware metapath sampling for HGNN inference
(../shared/papers/05-esr_hgnn.md).

* ``naive`` is what DGL/PyG metapath samplers do: every metapath is walked on its own, hop by
  hop, for the whole seed batch, so a prefix shared by several metapaths is walked once per
  metapath.
* ``trie`` walks the edges of the metapath trie once per seed batch and fans each shared
  frontier out to every branch below it.

Both run every hop through the same Numba kernel (:func:`kernels.expand`), so their difference is
only the traversal order and reuse. Per metapath the two draw from the same distribution; the trie
sampler's metapaths are *correlated* through their shared prefix (they see the same first hops),
which is the point of the paradigm and harmless for HGNN inference, which aggregates each
metapath separately.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.core.registry import lookup
from schedlab.esr_hgnn.graph import WORD_BYTES, HeteroGraph, address_layout
from schedlab.esr_hgnn.kernels import expand, expand_untraced
from schedlab.esr_hgnn.trie import MetapathTrie

_NO_TRACE = np.empty(0, dtype=np.int64)

#: largest total output (int64 entries over all metapaths of one request, 400 MB) a sampler
#: returns; beyond it the request is refused before any work
MAX_FRONTIER_ENTRIES = 50_000_000
MAX_OUTPUT_BYTES = MAX_FRONTIER_ENTRIES * 8


def fanout_at(fanouts: Sequence[int], hop: int) -> int:
    """Fanout of hop ``hop`` (0-based); hops past the list take 1, i.e. continue the walk."""
    return int(fanouts[hop]) if hop < len(fanouts) else 1


@dataclass
class SampleBatch:
    """What one sampler call returns for one seed batch.

    ``endpoints[mp]`` has shape (batch, instances): the metapath-based neighbours of each seed,
    -1 where a walk died at a node without neighbours. ``frontier_entries`` lists the frontier
    size produced by each hop (what an on-chip trie buffer must hold). ``trace`` holds the byte
    address of every read, in order, when tracing was asked for.
    """

    seeds: np.ndarray
    endpoints: dict[str, np.ndarray]
    reads: int = 0
    hops: int = 0
    frontier_entries: list[int] = field(default_factory=list)
    trace: np.ndarray | None = None


class _HopRunner:
    """Runs one hop through the kernel and keeps the counters; shared by every sampler."""

    def __init__(self, graph: HeteroGraph, fanouts: Sequence[int], rng: np.random.Generator,
                 trace: bool) -> None:
        self.graph, self.fanouts, self.rng, self.tracing = graph, tuple(fanouts), rng, trace
        self.layout = address_layout(graph)
        self.reads = 0
        self.hops = 0
        self.frontier_entries: list[int] = []
        self.trace_parts: list[np.ndarray] = []

    def hop(self, prefix: str, frontier: np.ndarray) -> np.ndarray:
        """Walk the last hop of ``prefix`` from ``frontier`` (nodes of type ``prefix[-2]``)."""
        rel = self.graph.relation(prefix[-2], prefix[-1])
        return self._expand(rel.indptr, rel.indices, self.layout[rel.name], len(prefix) - 2,
                            frontier)

    def _expand(self, indptr: np.ndarray, indices: np.ndarray, bases: tuple[int, int],
                depth: int, frontier: np.ndarray) -> np.ndarray:
        """One hop of ``frontier`` over a CSR at byte ``bases`` (indptr, indices); counts it."""
        fanout = fanout_at(self.fanouts, depth)
        uniforms = self.rng.random(frontier.size * fanout)
        if self.tracing:
            buffer = np.empty(frontier.size * (1 + fanout), np.int64)
            ptr_base, idx_base = bases
            out, reads, used = expand(indptr, indices, frontier, fanout, uniforms,
                                      ptr_base, idx_base, WORD_BYTES, buffer)
            self.trace_parts.append(buffer[:used])
        else:
            out, reads = expand_untraced(indptr, indices, frontier, fanout, uniforms)
        self.reads += int(reads)
        self.hops += 1
        self.frontier_entries.append(int(out.size))
        return out

    def finish(self, seeds: np.ndarray, endpoints: dict[str, np.ndarray]) -> SampleBatch:
        trace = np.concatenate(self.trace_parts) if self.tracing and self.trace_parts else (
            _NO_TRACE.copy() if self.tracing else None)
        shaped = {mp: e.reshape(seeds.size, -1) for mp, e in endpoints.items()}
        return SampleBatch(seeds, shaped, self.reads, self.hops, self.frontier_entries, trace)


class Sampler(Protocol):
    """Draws metapath-based neighbours of a batch of seed nodes."""

    name: str

    def sample(self, graph: HeteroGraph, metapaths: Sequence[str], seeds: np.ndarray,
               fanouts: Sequence[int], rng: np.random.Generator,
               trace: bool = False) -> SampleBatch:
        """Sample ``fanouts[h]`` neighbours per frontier node at hop ``h`` of every metapath."""
        ...


class NaiveSampler:
    """Each metapath walked independently (DGL/PyG): shared prefixes are walked again."""

    name = "naive"

    def sample(self, graph: HeteroGraph, metapaths: Sequence[str], seeds: np.ndarray,
               fanouts: Sequence[int], rng: np.random.Generator,
               trace: bool = False) -> SampleBatch:
        seeds = _check_seeds(graph, metapaths, seeds, fanouts)
        runner = _HopRunner(graph, fanouts, rng, trace)
        endpoints = {}
        for mp in metapaths:
            frontier = seeds
            for depth in range(1, len(mp)):
                frontier = runner.hop(mp[: depth + 1], frontier)
            endpoints[mp] = frontier
        return runner.finish(seeds, endpoints)


class TrieSampler:
    """ESR-HGNN: walk each trie edge once per batch; children reuse the parent's frontier."""

    name = "trie"

    def sample(self, graph: HeteroGraph, metapaths: Sequence[str], seeds: np.ndarray,
               fanouts: Sequence[int], rng: np.random.Generator,
               trace: bool = False) -> SampleBatch:
        seeds = _check_seeds(graph, metapaths, seeds, fanouts)
        trie = MetapathTrie(metapaths)
        runner = _HopRunner(graph, fanouts, rng, trace)
        frontiers: dict[int, np.ndarray] = {0: seeds}
        pending = {i: len(node.children) for i, node in enumerate(trie.nodes)}
        endpoints = {}
        for index in range(1, len(trie.nodes)):  # parents precede children in trie.nodes
            node = trie.nodes[index]
            frontiers[index] = runner.hop(node.prefix, frontiers[node.parent])
            pending[node.parent] -= 1
            if pending[node.parent] == 0 and not trie.nodes[node.parent].terminal:
                del frontiers[node.parent]  # the on-chip buffer frees a finished prefix
        for mp in trie.metapaths:
            endpoints[mp] = frontiers[trie.node_of(mp)]
        return runner.finish(seeds, {mp: endpoints[mp] for mp in metapaths})


def check_frontier(hops: Sequence[int], n_seeds: int, fanouts: Sequence[int],
                   limit: int = MAX_FRONTIER_ENTRIES, bytes_per_entry: int = 8,
                   holds: str = "sampled endpoints") -> None:
    """Refuse a request whose whole output would exceed ``limit`` int64 entries (400 MB).

    ``hops`` are the hop counts of the metapaths. Metapath ``m`` returns ``n_seeds * fanouts[0]
    * ... * fanouts[len(m) - 1]`` endpoints (with replacement, dead walks kept), so the total
    over all metapaths is known before any work; it bounds every frontier too (fan-outs are
    >= 1). ``bytes_per_entry`` counts what a caller keeps per endpoint beyond the 8-byte id
    (the PyG adapter's ``edge_index`` adds 16); the error names the fan-outs, the number of
    metapaths and the total.
    """
    budget = limit * 8
    total = 0
    for h in hops:
        size = n_seeds
        for hop in range(h):
            size *= fanout_at(fanouts, hop)
        total += size
    if total * bytes_per_entry > budget:
        shown = ",".join(str(int(f)) for f in fanouts)
        raise BadInputError(
            f"fanouts {shown} with {n_seeds} seeds over {len(hops)} metapaths make "
            f"{total:.3g} {holds} in all ({total * bytes_per_entry / 1e6:.0f} MB at "
            f"{bytes_per_entry} B each; limit {budget / 1e6:.0f} MB); lower the fan-outs, the "
            "batch or the number of metapaths", field="fanouts")


def _check_seeds(graph: HeteroGraph, metapaths: Sequence[str], seeds: np.ndarray,
                 fanouts: Sequence[int] = ()) -> np.ndarray:
    if not metapaths:
        raise BadInputError("no metapaths given", field="metapaths")
    if len({mp[0] for mp in metapaths}) != 1 or min(len(mp) for mp in metapaths) < 2:
        raise BadInputError("metapaths must share their start type and have at least one hop",
                            field="metapaths")
    seeds = np.ascontiguousarray(seeds, dtype=np.int64)
    start = metapaths[0][0]
    n = graph.node_counts.get(start, 0)
    if seeds.ndim != 1 or seeds.size == 0:
        raise BadInputError("seeds must be a non-empty 1-D array", field="seeds")
    if seeds.min() < 0 or seeds.max() >= n:
        raise BadInputError(f"seed ids must be in [0, {n}) for type {start}", field="seeds")
    check_frontier([len(mp) - 1 for mp in metapaths], seeds.size, fanouts)
    return seeds


SAMPLERS: dict[str, Callable[[], Sampler]] = {
    "naive": NaiveSampler,
    "trie": TrieSampler,
}


def make_sampler(name: str) -> Sampler:
    return lookup(SAMPLERS, "sampler", name)()
