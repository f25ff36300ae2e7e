"""Speed of the hot paths: naive vs trie sampling (issue goal: trie >= 3x on DBLP-like),
the DRAM replay, grouping and a HAN forward pass. Run: pytest benchmarks/esr_hgnn."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.esr_hgnn.grouping import fanout_hop_cost, make_grouper
from schedlab.esr_hgnn.kernels import replay_dram
from schedlab.esr_hgnn.policies import make_sampler
from schedlab.esr_hgnn.workloads import generate, metapath_set, seed_batches

GRAPH = generate("dblp", 1.0, seed=0)
SEEDS = seed_batches(GRAPH, "A", 256, 1, seed=0)[0]


@pytest.mark.parametrize("which", ["han", "sym6"])
@pytest.mark.parametrize("sampler", ["naive", "trie"])
def test_bench_dblp_sampling(benchmark, sampler, which):
    mps = metapath_set(GRAPH, "dblp", which)
    chosen = make_sampler(sampler)
    rng = np.random.default_rng(0)
    chosen.sample(GRAPH, mps, SEEDS, (10,), rng)  # compile outside the timing
    batch = benchmark(chosen.sample, GRAPH, mps, SEEDS, (10,), rng)
    benchmark.extra_info["reads"] = batch.reads


def test_bench_dram_replay(benchmark):
    mps = metapath_set(GRAPH, "dblp", "sym6")
    trace = make_sampler("trie").sample(GRAPH, mps, SEEDS, (10,), np.random.default_rng(0),
                                        trace=True).trace
    args = (trace, 1024, 16, 14, 14, 14, 2, 2, 32)
    replay_dram(*args)
    benchmark(replay_dram, *args)
    benchmark.extra_info["reads"] = int(trace.size)


def test_bench_optimal_grouping(benchmark):
    mps = metapath_set(GRAPH, "dblp", "sym6")
    benchmark(make_grouper("optimal").group, mps, 4, fanout_hop_cost((10,)))


def test_bench_han_forward(benchmark):
    torch = pytest.importorskip("torch")
    from schedlab.esr_hgnn.han import make_model

    torch.set_num_threads(1)
    mps = metapath_set(GRAPH, "dblp", "sym6")
    batch = make_sampler("trie").sample(GRAPH, mps, SEEDS, (10,), np.random.default_rng(0))
    model, features = make_model(mps, GRAPH.node_counts["A"])
    with torch.inference_mode():
        benchmark(model, features, batch)
