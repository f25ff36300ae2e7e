"""The registered experiments run at a tiny scale and return well-formed claims."""

from __future__ import annotations

import math

from schedlab.core.experiment import experiments
from schedlab.esr_hgnn import experiment


def test_experiments_are_registered():
    keys = {e.key for e in experiments(["esr_hgnn"])}
    assert keys == {"esr_hgnn.sampling_redundancy", "esr_hgnn.hardware_speedup",
                    "esr_hgnn.end_to_end_inference"}


def test_hardware_experiment_tiny():
    result = experiment.hardware_speedup(scale=0.1, batch=32, batches=1, channels=4, seed=0)
    # 8 platforms, the CPU cost model of naive and trie, the unit with replicated graph copies
    assert result.frame.height == 3 * 11
    model = result.frame.filter(result.frame["platform"] == "cpu-naive-model")
    assert model.height == 3 and (model["seconds"] > 0).all()
    repl = result.frame.filter(result.frame["platform"] == "esr-trie-replicated")
    assert repl.height == 3 and (repl["graph_copies"] == 4).all()
    required = [c for c in result.claims if c.required]
    assert required and all(c.holds for c in required)
    assert all(math.isfinite(c.measured) for c in result.claims)
    assert result.figures and result.figures[0].png.startswith(b"\x89PNG")


def test_sampling_and_end_to_end_experiments_tiny():
    result = experiment.sampling_redundancy(scales=(0.1,), batch=32, batches=1, runs=50, seed=0)
    saving = [c for c in result.claims if "removes redundant" in c.statement]
    assert saving and all(c.measured > 0 for c in saving)
    e2e = experiment.end_to_end_inference(scale=0.1, batch=16, batches=1, seed=0)
    assert e2e.frame.height == 9
