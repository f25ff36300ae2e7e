"""The calibrated roofline: its fixes, and its error against Vidur's profiled operator times.

The profile tests read ../shared/data/vidur_profiles (Microsoft Vidur, MIT) by path and skip
when it is absent; nothing of it is vendored.
"""


import numpy as np
import pytest

from schedlab.core.data import data_dir
from schedlab.core.errors import BadInputError
from schedlab.llm import CostModel, calibrate, get_model, gpu_names, model_names
from schedlab.llm.costmodel import calibration_for

PROFILES = data_dir() / "vidur_profiles"
needs_profiles = pytest.mark.skipif(
    not (PROFILES / "compute").is_dir(), reason="Vidur profiles not present"
)


def test_every_shipped_gpu_has_a_calibration_with_provenance():
    for gpu in gpu_names():
        cal = calibration_for(gpu)
        assert cal is not None, gpu
        assert cal.source.startswith(("vidur:", "borrowed from")), cal.source
    assert calibration_for("a800").source == "borrowed from a100-80g"
    assert CostModel.from_specs("llama-3-8b", "h100").describe()["calibration"].startswith("vidur")


def test_roofline_takes_the_max_of_compute_and_weight_traffic():
    cost = CostModel.from_specs("llama-3-8b", "a100-80g")
    m, cal = cost.model, cost.calibration
    weights_ms = m.weight_bytes / (cal.hbm_efficiency * cost.gpu.hbm_gbs * 1e9) * 1e3
    # a 1-token decode is the weight read (plus launches), not weight read + compute; the
    # linear layers and the LM head carry the fitted efficiency curve's 1-token factor
    weights_ms *= float(cal.curve(np.array([1.0]), cal.knots(1))[0])
    assert weights_ms < cost.decode_ms(0, 1) - cost.overhead_ms < 1.35 * weights_ms
    # far above the ridge the weight read is hidden: 4096 tokens cost ~2x 2048 tokens
    big, half = cost.dense_ms(4096, 1), cost.dense_ms(2048, 1)
    assert 1.8 < big / half < 2.2


def test_embedding_lookup_and_lm_head_are_not_per_token_flops():
    cost = CostModel.from_specs("llama-3-8b", "a100-80g")
    m = cost.model
    # the LM head runs on sampled positions only: 1 vs 64 sequences of the same token count
    assert cost.dense_ms(4096, 64) > cost.dense_ms(4096, 1)
    # the per-token slope is 2·(non-embedding params) FLOPs at the fitted efficiency, plus the
    # norms' traffic and the fitted curve; counting the embedding and LM head as FLOPs would
    # add 2·2·vocab·hidden per token (+13% for Llama-3-8B's 128k vocabulary)
    body = m.params - 2 * m.vocab * m.hidden
    flops_ms = 2 * body / (cost.calibration.gemm_efficiency * cost.gpu.bf16_tflops * 1e12) * 1e3
    assert flops_ms < cost.prefill_b < 1.4 * flops_ms
    assert cost.dense_ms(4096, 1) - cost.dense_ms(4095, 1) < 1.4 * flops_ms


def test_tensor_parallelism_pays_two_all_reduces_per_layer():
    one = CostModel.from_specs("llama-3-8b", "h100", tp=1)
    two = CostModel.from_specs("llama-3-8b", "h100", tp=2)
    assert one.allreduce_ms(1e6) == 0
    act = 2048 * one.model.hidden * 2
    assert two.allreduce_ms(act) > 0
    comm = 2 * one.model.layers * two.allreduce_ms(act)
    assert two.dense_ms(2048, 1) > one.dense_ms(2048, 1) / 2 + 0.5 * comm


@pytest.mark.parametrize("model", ["llama-3-8b", "llama-2-7b", "qwen3-8b", "llama-3-70b"])
@pytest.mark.parametrize("gpu", ["a100-80g", "h100", "a40", "a10g"])
def test_more_tokens_never_cost_less(model, gpu):
    cost = CostModel.from_specs(model, gpu)
    times = [cost.dense_ms(t, 1) for t in range(1, 4097, 7)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(times, times[1:], strict=False))


def test_explicit_efficiencies_give_the_uncalibrated_roofline():
    cost = CostModel.from_specs("llama-3-8b", "h100", compute_efficiency=0.5, memory_efficiency=0.8)
    assert cost.calibration.source == "roofline"
    assert "llama-3-8b" in model_names()


@needs_profiles
def test_fit_error_on_vidur_profiles_within_bounds():
    table = calibrate.error_table(PROFILES)
    one = table[table.tp == 1]
    assert set(one.gpu) == {"a100-80g", "h100", "a40"}
    assert set(one[one.gpu == "a100-80g"].model) == {"llama-2-7b", "llama-3-8b"}
    assert one.tokens.min() == 1 and one.tokens.max() == 4096
    worst = one.assign(e=one.error.abs()).groupby(["gpu", "model", "term"]).e.max()
    # measured (docs/systems/faircache.md), with GEMM wave quantisation: layer 6.7-10.1%,
    # linear 6.7-10.0%, norms 6.8-11.6% (before it: layer 10-15%)
    assert worst.xs("layer", level="term").max() <= 0.105
    assert worst.xs("linear", level="term").max() <= 0.105
    assert worst.xs("norm", level="term").max() <= 0.12
    # the misses are jitter between neighbouring sizes (the profile is not monotone); the
    # minimax fit spreads its error, so the median is close to the maximum
    assert one.error.abs().median() <= 0.10
    multi = table[table.tp > 1]
    assert multi.error.abs().max() <= 0.25  # measured 9-20% per layer
    # no non-decreasing model can beat the profile's own dips (monotone_floor); ours is
    # non-decreasing, so its worst error is at least the floor everywhere (a model or floor
    # that broke this would fail here), and A40 tp=4's floor alone exceeds the 10% target
    floor = calibrate.monotone_floor(table).set_index(["gpu", "model", "tp", "term"]).floor
    worst_all = table.assign(e=table.error.abs()).groupby(["gpu", "model", "tp", "term"]).e.max()
    assert (worst_all >= floor - 1e-9).all()
    assert floor[("a40", "llama-2-7b", 4, "layer")] > 0.10
    assert floor.xs("layer", level="term").min() > 0.02


@needs_profiles
def test_stored_coefficients_are_what_the_fit_produces():
    # the tile search (coordinate descent, ~20 s CPU) is skipped: the stored tiles are refitted
    fitted = calibrate.fit_all(PROFILES, stored_tiles=True)
    for gpu, row in fitted.items():
        cal = calibration_for(gpu)
        if "gemm_efficiency" in row:
            assert cal.gemm_efficiency == pytest.approx(row["gemm_efficiency"], rel=1e-4)
            assert cal.hbm_efficiency == pytest.approx(row["hbm_efficiency"], rel=1e-4)
            assert np.allclose(cal.knots(1), row["curve_log"]["1"], atol=1e-5)
        if "allreduce" in row:
            assert {w for w, _, _ in cal.allreduce} == {int(k) for k in row["allreduce"]}


@needs_profiles
def test_allreduce_fit_on_nvlink_profiles():
    table = calibrate.allreduce_error_table(PROFILES)
    assert {"a100-80g", "h100"} <= set(table.gpu)
    # large messages (>= 4 MiB, i.e. >= 512 tokens of a 4096-wide model): median <= 7%,
    # max <= 30%; small ones are latency-bound and bimodal in the profile (reported only)
    big = table[table["bytes"] >= 4 << 20]
    assert big.error.abs().max() <= 0.30
    assert big.error.abs().median() <= 0.07


def test_bad_profile_folders_name_the_problem(tmp_path):
    with pytest.raises(BadInputError, match="no Vidur compute profiles"):
        calibrate.load_compute(tmp_path)
    bad = tmp_path / "compute" / "a100" / "meta-llama" / "Llama-2-7b-hf"
    bad.mkdir(parents=True)
    (bad / "mlp.csv").write_text("num_tokens,n_embd\n1,4096\n")
    with pytest.raises(BadInputError) as info:
        calibrate.load_compute(tmp_path)
    assert "mlp.csv:1" in str(info.value) and "num_tensor_parallel_workers" in str(info.value)


def test_model_spec_without_ffn_derives_it():
    spec = get_model("llama-2-7b")
    assert spec.ffn_size == 11008


@needs_profiles
def test_fit_on_one_model_predicts_the_other():
    # A100 coefficients fitted on Llama-2-7B alone, tested on Llama-3-8B (GQA, wider MLP)
    worst = calibrate.holdout(PROFILES)
    # the per-GEMM, per-TP tile choices (wave quantisation) are shape-specific: measured
    # 20% at tp=1 and 22-38% at tp > 1 (docs/systems/faircache.md); an unfitted roofline
    # (efficiency 0.5, no tiles) is off by 46-86%
    assert worst[1] <= 0.25 and max(worst.values()) <= 0.45


def test_calibrate_cli_bad_folder_is_one_line(tmp_path, capsys):
    assert calibrate.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no Vidur compute profiles" in err and str(tmp_path) in err
