"""DistServe's placement search and Splitwise's phase split, and the real-length trace slice."""

import pytest

from schedlab.core.errors import BadInputError
from schedlab.edge_llm import EdgeConfig, generate, simulate
from schedlab.edge_llm.delay import Link
from schedlab.edge_llm.engine import run
from schedlab.edge_llm.placement import (
    PLACEMENTS,
    DistServeRouter,
    PlacementRouter,
    SplitwiseRouter,
)
from schedlab.edge_llm.sites import ClusterView, make_sites
from schedlab.edge_llm.workloads import MOONCAKE_SLICE, mooncake


@pytest.mark.parametrize("changes", [{}, dict(backhaul_gbps=0.5), dict(cloud_sm_budget=0.2)])
def test_distserve_search_picks_the_placement_the_engine_ranks_best(changes):
    cfg = EdgeConfig().with_(**changes)
    reqs = generate(80, 2.0, 3)
    router = DistServeRouter(sample=80, every=10**9, first=80)
    router.seen.extend(reqs)
    link = Link(cfg.backhaul.gbps, cfg.backhaul.transfer_ms)
    chosen = router.search(ClusterView(make_sites(cfg), link, cfg, 0.0))
    scores = {p.name: run(reqs, PlacementRouter(p), cfg).summary for p in PLACEMENTS}
    best = min(scores.values(), key=lambda s: (-s["slo"], s["mean_e2e"]))
    assert scores[chosen.name] == best


def test_distserve_avoids_the_backhaul_when_it_is_slow():
    # 0.5 Gbit/s: every disaggregated placement drowns in KV traffic; DistServe must not use one
    cfg = EdgeConfig().with_(backhaul_gbps=0.5)
    reqs = generate(300, 1.5, 0)
    ds = simulate(reqs, "distserve", cfg).summary
    split = simulate(reqs, "split", cfg).summary
    assert ds["slo"] > 0.9 > split["slo"]


def test_replicas_dispatch_to_both_sites():
    reqs = generate(200, 3.0, 1)
    out = run(reqs, PlacementRouter(PLACEMENTS[-1]), EdgeConfig()).summary
    assert out["n_cloud"] > 0 and out["n_mix"] > 0
    assert out["n_split"] == out["n_disagg"] == 0


def test_splitwise_overflows_the_prompt_pool_when_it_would_miss_ttft():
    # cloud at 20% of its SMs: the prompt pool cannot hold 3 req/s, prompts overflow to the edge
    cfg = EdgeConfig(cloud_sm_budget=0.2)
    out = simulate(generate(300, 3.0, 0), SplitwiseRouter(), cfg).summary
    assert out["n_split"] + out["n_disagg"] > 0 and out["n_mix"] + out["n_cloud"] > 0


def test_mooncake_slice_reads_real_lengths_and_refuses_bad_input(tmp_path):
    reqs = mooncake(10.0, 0)
    assert len(reqs) == 600 and reqs[-1].arrival == pytest.approx(2009.99)
    assert max(r.input_len for r in reqs) > 32_768  # over-context prompts are in the slice
    with pytest.raises(BadInputError, match="stretch"):
        mooncake(0.0)
    bad = tmp_path / "t.csv"
    bad.write_text(MOONCAKE_SLICE.read_text().replace("6758", "x", 1))
    with pytest.raises(BadInputError, match="input_length"):
        mooncake(1.0, path=bad)
