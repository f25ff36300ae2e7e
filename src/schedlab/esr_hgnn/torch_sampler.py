"""Naive and trie metapath sampling as PyTorch tensor ops, to *measure* GPU sampling.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) compares its unit with CPU and GPU sampling. This
machine has no GPU, so experiments model the GPU (:mod:`hwmodel`); this module is the prepared
measurement for a machine that has one (``schedlab esr-hgnn gpu-bench --device cuda``). Given the
same uniforms it returns exactly what the Numba kernel returns (tested on CPU), so a GPU run
measures the same work.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from schedlab.esr_hgnn.graph import HeteroGraph
from schedlab.esr_hgnn.policies import check_frontier, fanout_at
from schedlab.esr_hgnn.trie import MetapathTrie


def torch_expand(indptr: torch.Tensor, indices: torch.Tensor, frontier: torch.Tensor,
                 fanout: int, uniforms: torch.Tensor) -> torch.Tensor:
    """One hop for a whole frontier: the vectorised twin of :func:`kernels.expand`."""
    alive = frontier >= 0
    v = frontier.clamp(min=0)
    lo = indptr[v]
    deg = indptr[v + 1] - lo
    lo = lo.repeat_interleave(fanout)
    deg = deg.repeat_interleave(fanout)
    ok = alive.repeat_interleave(fanout) & (deg > 0)
    offset = torch.minimum((uniforms * deg).long(), (deg - 1).clamp(min=0))
    k = (lo + offset).clamp(max=max(indices.numel() - 1, 0))
    picked = indices[k] if indices.numel() else torch.zeros_like(k)
    return torch.where(ok, picked, torch.full_like(picked, -1))


class TorchSampling:
    """The graph's CSR on ``device`` plus naive and trie traversals in tensor ops."""

    def __init__(self, graph: HeteroGraph, device: str = "cpu") -> None:
        self.device = torch.device(device)
        self.csr = {name: (torch.as_tensor(r.indptr, device=self.device),
                           torch.as_tensor(r.indices, device=self.device))
                    for name, r in graph.relations.items()}

    def _hop(self, prefix: str, frontier: torch.Tensor, fanouts: Sequence[int],
             gen: torch.Generator) -> torch.Tensor:
        indptr, indices = self.csr[prefix[-2:]]
        fanout = fanout_at(fanouts, len(prefix) - 2)
        uniforms = torch.rand(frontier.numel() * fanout, device=self.device, generator=gen)
        return torch_expand(indptr, indices, frontier, fanout, uniforms)

    def naive(self, metapaths: Sequence[str], seeds: torch.Tensor, fanouts: Sequence[int],
              gen: torch.Generator) -> dict[str, torch.Tensor]:
        out = {}
        for mp in metapaths:
            frontier = seeds
            for depth in range(1, len(mp)):
                frontier = self._hop(mp[: depth + 1], frontier, fanouts, gen)
            out[mp] = frontier
        return out

    def trie(self, metapaths: Sequence[str], seeds: torch.Tensor, fanouts: Sequence[int],
             gen: torch.Generator) -> dict[str, torch.Tensor]:
        trie = MetapathTrie(metapaths)
        frontiers = {0: seeds}
        for index in range(1, len(trie.nodes)):
            node = trie.nodes[index]
            frontiers[index] = self._hop(node.prefix, frontiers[node.parent], fanouts, gen)
        return {mp: frontiers[trie.node_of(mp)] for mp in metapaths}


def benchmark(graph: HeteroGraph, metapaths: Sequence[str], batches: Sequence[np.ndarray],
              fanouts: Sequence[int], device: str = "cpu", repeats: int = 5) -> list[dict]:
    """Median seconds per batch of naive and trie sampling on ``device`` (synchronised)."""
    for seeds in batches:  # refuse a frontier that cannot fit before touching the device
        check_frontier([len(mp) - 1 for mp in metapaths], len(seeds), fanouts)
    sampling = TorchSampling(graph, device)
    sync = torch.cuda.synchronize if sampling.device.type == "cuda" else (lambda: None)
    gen = torch.Generator(device=sampling.device).manual_seed(0)
    rows = []
    for name in ("naive", "trie"):
        run = getattr(sampling, name)
        run(metapaths, torch.as_tensor(batches[0], device=sampling.device), fanouts, gen)  # warm
        times = []
        for seeds in batches:
            seeds_t = torch.as_tensor(seeds, device=sampling.device)
            best = float("inf")
            for _ in range(repeats):
                sync()
                start = time.perf_counter()
                run(metapaths, seeds_t, fanouts, gen)
                sync()
                best = min(best, time.perf_counter() - start)
            times.append(best)
        rows.append(dict(sampler=name, device=str(sampling.device), kind="measured",
                         seconds=float(np.median(times))))
    rows += _pyg_rows(graph, metapaths, batches, fanouts, sampling.device, sync, repeats)
    return rows


def _pyg_rows(graph, metapaths, batches, fanouts, device, sync, repeats) -> list[dict]:
    """PyG's own MetaPath2Vec hop sampler on ``device``, the library baseline (pyg extra)."""
    from schedlab.core.errors import MissingServiceError
    from schedlab.esr_hgnn.pyg import PyGWalker, letters_to_metapath, to_heterodata, typed_graph

    try:
        data = to_heterodata(graph)
    except MissingServiceError:  # torch_geometric not installed: no library row
        return []
    walker = PyGWalker(typed_graph(data), device=str(device))
    mps = [tuple(letters_to_metapath(graph, mp)) for mp in metapaths]
    times = []
    for seeds in batches:
        seeds_t = torch.as_tensor(seeds, device=device)
        for mp in mps:  # warm
            walker.walk(mp, seeds_t, fanouts)
        best = float("inf")
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            for mp in mps:
                walker.walk(mp, seeds_t, fanouts)
            sync()
            best = min(best, time.perf_counter() - start)
        times.append(best)
    return [dict(sampler="pyg-metapath2vec-hop", device=str(device), kind="measured",
                 seconds=float(np.median(times)))]
