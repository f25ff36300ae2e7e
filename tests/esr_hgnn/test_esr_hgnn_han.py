"""The HAN model consumes sampled neighbours correctly (attention is order-invariant)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from schedlab.esr_hgnn.han import make_model, time_inference  # noqa: E402
from schedlab.esr_hgnn.policies import SampleBatch, make_sampler  # noqa: E402
from schedlab.esr_hgnn.workloads import generate, metapath_set  # noqa: E402


def _batch(endpoints):
    return SampleBatch(np.arange(len(next(iter(endpoints.values())))), endpoints)


def test_han_output_shape_and_finite():
    g = generate("imdb", 0.05, 0)
    mps = metapath_set(g, "imdb", "sym4")
    batch = make_sampler("trie").sample(g, mps, np.arange(16), (5,), np.random.default_rng(0))
    model, features = make_model(mps, g.node_counts["M"])
    with torch.inference_mode():
        out = model(features, batch)
    assert out.shape == (16, 4) and torch.isfinite(out).all()
    assert time_inference(model, features, batch, repeats=1).seconds > 0


def test_neighbour_order_does_not_matter_and_dead_walks_are_ignored():
    model, features = make_model(["MAM", "MDM"], 20, seed=1)
    ends = {"MAM": np.array([[3, 4, 5], [6, 7, -1]]), "MDM": np.array([[1, -1, 2], [8, 9, 9]])}
    shuffled = {"MAM": np.array([[5, 3, 4], [-1, 7, 6]]), "MDM": np.array([[2, 1, -1], [9, 8, 9]])}
    with torch.inference_mode():
        a = model(features, _batch(ends))
        b = model(features, _batch(shuffled))
    assert torch.allclose(a, b, atol=1e-5)


def test_seed_with_no_neighbours_attends_to_itself():
    model, features = make_model(["MAM"], 10, seed=2)
    with torch.inference_mode():
        out = model(features, _batch({"MAM": np.full((2, 3), -1)}))
    assert torch.isfinite(out).all()
