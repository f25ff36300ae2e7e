"""The roofline cost model: formulas, every shipped (model, GPU) pair, clear errors."""

import pytest

from schedlab.core.errors import BadInputError, ConfigError, UnknownNameError
from schedlab.llm import CostModel, get_model, gpu_names, model_names


def test_kv_bytes_per_token_follows_the_formula():
    m = get_model("llama-3-8b")
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    assert get_model("llama-2-7b").kv_bytes_per_token == 2 * 32 * 32 * 128 * 2


def test_ships_the_required_models_and_gpus():
    assert {"llama-3-8b", "llama-2-7b", "qwen3-8b", "llama-3-70b"} <= set(model_names())
    assert {"a10g", "a100-80g", "a800", "a6000", "h100", "h200"} <= set(gpu_names())


@pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b", "qwen3-8b", "llama-3-70b"])
@pytest.mark.parametrize("gpu", ["a10g", "a100-80g", "a800", "a6000", "h100", "h200"])
def test_every_pair_gives_positive_monotone_costs(model, gpu):
    cost = CostModel.from_specs(model, gpu)
    assert cost.kv_capacity_tokens() > 0
    assert 0 < cost.prefill_ms([128]) < cost.prefill_ms([1024]) < cost.prefill_ms([1024, 1024])
    assert cost.decode_ms(1000, 4) < cost.decode_ms(100000, 4) < cost.decode_ms(100000, 64)
    assert cost.prefill_ms([]) == 0 and cost.decode_ms(0, 0) == 0


def test_prefill_is_quadratic_in_one_sequence():
    # the roofline is exact; a + b·t + c·t² is its DistServe-form linearisation (a = the
    # 1-token floor, b = the compute-bound slope), close above the ridge point
    cost = CostModel.from_specs("llama-3-8b", "h100")
    a, b, c = cost.prefill_a, cost.prefill_b, cost.prefill_c
    assert cost.prefill_attention_ms(4000, 4000**2) == pytest.approx(c * 4000**2)
    assert cost.prefill_ms([4000]) == pytest.approx(a + b * 4000 + c * 4000**2, rel=0.1)
    assert cost.prefill_ms(4000, squares=4000**2) == pytest.approx(cost.prefill_ms([4000]))
    # attention grows with the square: one 8k prompt costs more than two 4k prompts
    assert cost.prefill_ms([8000]) > cost.prefill_ms([4000, 4000])


def test_faster_gpu_is_faster_and_transfer_uses_pcie():
    slow = CostModel.from_specs("llama-3-8b", "a10g")
    fast = CostModel.from_specs("llama-3-8b", "h100")
    assert fast.prefill_ms([2048]) < slow.prefill_ms([2048])
    assert slow.tp == 2  # 16 GB of weights > 60% of 24 GB
    assert slow.transfer_ms(25e9 * slow.tp) == pytest.approx(1000.0)
    with pytest.raises(BadInputError):
        slow.transfer_ms(-1)


def test_big_model_gets_tensor_parallelism():
    assert CostModel.from_specs("llama-3-70b", "a100-80g").tp == 4
    assert CostModel.from_specs("llama-3-8b", "a100-80g").tp == 1


def test_bad_names_and_parameters():
    with pytest.raises(UnknownNameError, match="valid"):
        CostModel.from_specs("gpt-5", "h100")
    with pytest.raises(UnknownNameError):
        CostModel.from_specs("llama-3-8b", "tpu")
    with pytest.raises(ConfigError):
        CostModel.from_specs("llama-3-8b", "h100", compute_efficiency=0)
