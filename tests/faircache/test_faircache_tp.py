"""Tensor parallelism > 1 in the cost model and the unified cost's prices (issue 47, item 4)."""

from __future__ import annotations

import pytest

from schedlab.llm.accounting import CostWeights, kv_memory_share
from schedlab.llm.costmodel import CostModel


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_per_gpu_compute_and_allreduce_add_up_and_prices_follow_the_group(tp):
    cost = CostModel.from_specs("llama-3-70b" if tp > 1 else "llama-3-8b", "h100", tp=tp)
    m = cost.model
    for tokens in (1, 64, 2048):
        split = cost.split_ms(tokens, 1)
        assert split["compute"] + split["allreduce"] == pytest.approx(cost.dense_ms(tokens, 1))
        # two ring all-reduces per layer of the tokens' activations (Megatron-LM's split)
        one = cost.allreduce_ms(tokens * m.hidden * m.dtype_bytes)
        assert split["allreduce"] == pytest.approx(2 * m.layers * one)
        assert (split["allreduce"] > 0) == (tp > 1)
    if tp > 1:  # ring bandwidth term: 2(n-1)/n of the message per GPU over the bus
        big, small = 64 << 20, 32 << 20
        slope = (cost.allreduce_ms(big) - cost.allreduce_ms(small)) / (big - small)
        bus = cost.calibration.allreduce and min(
            cost.calibration.allreduce, key=lambda f: (abs(f[0] - tp), -f[0])
        )[2]
        assert slope == pytest.approx(2 * (tp - 1) / tp / (bus * 1e9) * 1e3)
    # prices stay right at any tp: a charge is what the whole group could have done meanwhile
    pool = 100_000
    share = kv_memory_share(cost, pool)
    w = CostWeights.from_cost_model(cost, pool, hbm_share=share)
    tokens_per_s = 1000.0 / cost.prefill_b
    nbytes = 1e9  # KV is sharded: each GPU moves 1/tp of it over its own PCIe link
    assert w.p_io * nbytes == pytest.approx(cost.transfer_ms(nbytes) / 1000 * tokens_per_s)
    assert share == pytest.approx(pool * m.kv_bytes_per_token / (tp * cost.gpu.memory_gb * 1e9))
    # holding the whole pool for a second costs the pool's share of a group-second
    assert w.p_kv * pool * cost.kv_bytes_per_token == pytest.approx(share * tokens_per_s)
