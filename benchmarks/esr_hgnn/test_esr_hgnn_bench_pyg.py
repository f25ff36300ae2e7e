"""pytest-benchmark of our trie sampler vs PyG's MetaPath2Vec hop sampler, same seeds and
metapaths, equal output (batch x 10 walks per metapath). Issue target: ours >= 3x faster.
Run: pytest benchmarks/esr_hgnn/test_esr_hgnn_bench_pyg.py (the ratio table: compare_pyg.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch_geometric", reason="needs the pyg extra")

import torch  # noqa: E402

from schedlab.esr_hgnn.pyg import (  # noqa: E402
    MetapathSampler,
    PyGWalker,
    letters_to_metapath,
    to_heterodata,
    typed_graph,
)
from schedlab.esr_hgnn.typed import check_metapaths, sample_typed  # noqa: E402
from schedlab.esr_hgnn.workloads import generate, metapath_set, seed_batches  # noqa: E402

GRAPH = generate("dblp", 1.0, seed=0)
DATA = to_heterodata(GRAPH)
TYPED = typed_graph(DATA)
SEEDS = seed_batches(GRAPH, "A", 512, 1, seed=0)[0]


def _mps(which):
    return check_metapaths(
        TYPED, [letters_to_metapath(GRAPH, m) for m in metapath_set(GRAPH, "dblp", which)]
    )


@pytest.mark.parametrize("which", ["han", "sym6"])
@pytest.mark.parametrize("sampler", ["trie", "naive", "trie+edge_index", "pyg-hop"])
def test_bench_vs_pyg(benchmark, sampler, which):
    torch.set_num_threads(1)
    mps = _mps(which)
    rng = np.random.default_rng(0)
    seeds_t = torch.from_numpy(SEEDS)
    if sampler in ("trie", "naive"):

        def run():
            return sample_typed(TYPED, mps, SEEDS, (10,), rng, sampler).endpoints
    elif sampler == "trie+edge_index":
        ours = MetapathSampler(DATA, mps, 10)

        def run():
            return ours.sample(SEEDS)
    else:
        walker = PyGWalker(TYPED)

        def run():
            return {mp: walker.walk(mp, seeds_t, (10,)) for mp in mps}

    run()
    out = benchmark(run)
    assert len(out) == len(mps)
