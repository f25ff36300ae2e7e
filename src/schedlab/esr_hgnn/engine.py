"""The measurement engine: runs any sampler over seed batches, per channel or whole.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) is judged by memory reads and time per mini-batch.
This engine takes a sampler object and never looks at which one it is: naive and trie sampling
are timed by the same loop, and grouped (multi-channel) sampling is simply the sampler run once
per channel on that channel's metapaths.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schedlab.esr_hgnn.graph import HeteroGraph
from schedlab.esr_hgnn.policies import SampleBatch, Sampler


@dataclass(frozen=True)
class SamplerMeasure:
    """Means per mini-batch over the measured batches."""

    sampler: str
    reads: float
    hops: float
    seconds: float  # median CPU time of one batch (best of ``repeats`` per batch)
    frontier_entries: float


def warm_up(graph: HeteroGraph, sampler: Sampler, metapaths: Sequence[str],
            fanouts: Sequence[int]) -> None:
    """Compile the Numba kernels (and touch the arrays) so JIT time is not measured."""
    seeds = np.zeros(1, dtype=np.int64)
    sampler.sample(graph, metapaths, seeds, fanouts, np.random.default_rng(0))
    sampler.sample(graph, metapaths, seeds, fanouts, np.random.default_rng(0), trace=True)


def measure_sampler(graph: HeteroGraph, sampler: Sampler, metapaths: Sequence[str],
                    batches: Sequence[np.ndarray], fanouts: Sequence[int], seed: int,
                    repeats: int = 3) -> SamplerMeasure:
    """CPU time of ``sampler`` per batch, best of ``repeats`` (see :func:`measure_samplers`)."""
    return measure_samplers(graph, [sampler], metapaths, batches, fanouts, seed, repeats)[0]


def measure_samplers(graph: HeteroGraph, samplers: Sequence[Sampler], metapaths: Sequence[str],
                     batches: Sequence[np.ndarray], fanouts: Sequence[int], seed: int,
                     repeats: int = 3) -> list[SamplerMeasure]:
    """CPU time of each sampler per batch, best of ``repeats``, the samplers interleaved.

    Samplers are single-threaded, so the calling thread's CPU time (``time.thread_time``) is their
    cost; unlike wall time it does not grow when other processes share the cores. Interleaving the
    samplers run by run (alternating which goes first) exposes them to the same cache and
    frequency conditions, and the best of a few repeats removes the remaining one-sided noise.
    """
    for sampler in samplers:
        warm_up(graph, sampler, metapaths, fanouts)
    best = np.full((len(samplers), len(batches)), np.inf)
    for index, seeds in enumerate(batches):
        for r in range(repeats):
            order = range(len(samplers)) if r % 2 == 0 else reversed(range(len(samplers)))
            for k in order:  # the second of two runs finds warmer caches: alternate who goes first
                sampler = samplers[k]
                rng = np.random.default_rng([seed, index, r])
                start = time.thread_time()
                sampler.sample(graph, metapaths, seeds, fanouts, rng)
                best[k, index] = min(best[k, index], time.thread_time() - start)
    out = []
    for k, sampler in enumerate(samplers):
        measured = [sampler.sample(graph, metapaths, seeds, fanouts,
                                   np.random.default_rng([seed, i, 0]))
                    for i, seeds in enumerate(batches)]  # counts, outside the timing
        out.append(SamplerMeasure(
            sampler.name, float(np.mean([b.reads for b in measured])),
            float(np.mean([b.hops for b in measured])), float(np.median(best[k])),
            float(np.mean([sum(b.frontier_entries) for b in measured]))))
    return out


def sample_channels(graph: HeteroGraph, sampler: Sampler, grouping: Sequence[Sequence[str]],
                    seeds: np.ndarray, fanouts: Sequence[int], seed: int,
                    trace: bool = True) -> list[SampleBatch]:
    """Run ``sampler`` once per non-empty channel group: what K hardware channels would fetch."""
    out = []
    for channel, group in enumerate(grouping):
        if group:
            rng = np.random.default_rng([seed, 0xC4A, channel])
            out.append(sampler.sample(graph, list(group), seeds, fanouts, rng, trace=trace))
    return out
