"""Models users build themselves (issue 58): HF decoders and encoder-decoders built outside the
project import with their KV cache on, and are left as they were; KV-cache decode steps derived
from the prefill equal a decode step traced with a real cache; decoding is evaluated."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
hf = pytest.importorskip("transformers")

from schedlab.core.errors import BadInputError  # noqa: E402
from schedlab.harp import ArchConfig, build_workload, from_export, from_torch  # noqa: E402
from schedlab.harp.decoding import decode_step, evaluate_decoding  # noqa: E402
from schedlab.harp.transformers import decode_step_from_model  # noqa: E402
from schedlab.harp.workloads import ModelConfig  # noqa: E402

D, T = 32, 8


def tri(t: int) -> int:
    return t * (t + 1) // 2


def gpt2(layers: int = 2):
    torch.manual_seed(0)
    return hf.GPT2Model(hf.GPT2Config(n_embd=D, n_layer=layers, n_head=2, vocab_size=64,
                                      n_positions=64, bos_token_id=0, eos_token_id=0))


def test_user_built_gpt2_imports_with_its_cache_on_and_decode_steps_match_a_real_cache() -> None:
    model = gpt2()  # training mode, use_cache=True: as a user builds it
    assert model.config.use_cache and model.training
    prefill = from_torch(model, (torch.randint(0, 64, (1, T)),))
    assert prefill.macs("static") == 2 * T * (4 * D * D + 2 * D * 4 * D)
    assert prefill.macs("dynamic") == 2 * 2 * tri(T) * D  # causal, read from the traced mask
    assert model.config.use_cache and model.training  # restored, not mutated
    # a decode step derived from the prefill == one traced over a real DynamicCache
    context = 3 * T
    traced = decode_step_from_model(model, context)
    derived = decode_step(prefill, context)
    assert traced.tokens == derived.tokens == 1
    assert traced.macs("static") == derived.macs("static") == prefill.macs("static") / T
    assert traced.macs("dynamic") == derived.macs("dynamic") == 2 * 2 * D * (context + 1)
    assert traced.op_counts() == derived.op_counts()
    assert model.config.use_cache and model.training
    out = model.eval()(torch.randint(0, 64, (1, 4)))
    assert out.past_key_values is not None  # the user's model still caches


def test_user_built_t5_encoder_decoder_imports_and_a_failed_export_restores() -> None:
    torch.manual_seed(0)
    model = hf.T5Model(hf.T5Config(vocab_size=64, d_model=D, d_kv=8, d_ff=64, num_layers=1,
                                   num_decoder_layers=1, num_heads=4)).eval()
    ids = torch.randint(0, 64, (1, T))
    work = from_export(model, (), {"input_ids": ids, "decoder_input_ids": ids})
    # encoder self (full), decoder self (causal), cross (full): QK^T + AV each, 32 = 4 x 8
    assert work.macs("dynamic") == 2 * (T * T * 32 + tri(T) * 32 + T * T * 32)
    assert model.config.use_cache and model.decoder.config.use_cache
    with pytest.raises(BadInputError, match="T5Model"):  # no decoder input: export fails
        from_export(model, (), {"input_ids": ids})
    assert model.config.use_cache and model.decoder.config.use_cache


def test_decoding_grows_with_the_cache_and_refuses_encoders() -> None:
    cfg = ModelConfig(name="tiny-dec", layers=2, d_model=64, heads=2, d_ff=128, tokens=16,
                      causal=True)
    work = build_workload(cfg)
    arch = ArchConfig()
    harp = evaluate_decoding(work, arch, 24, "harp", every=8)
    assert len(harp.step_us) == 24 and harp.step_us[0] <= harp.step_us[-1]
    for baseline in ("non-pipelined", "mnsim-pipeline"):
        base = evaluate_decoding(work, arch, 24, baseline, every=8)
        assert harp.decode_us <= base.decode_us * (1 + 1e-9)
    assert decode_step(work, 100).macs("dynamic") > decode_step(work, 10).macs("dynamic")
    with pytest.raises(BadInputError, match="causal decoder-only"):
        decode_step(build_workload("bert-base", 8), 4)


def test_decode_cli_and_the_headline_configuration() -> None:
    import json

    from typer.testing import CliRunner

    from schedlab.harp.cli import app
    from schedlab.harp.experiment import ISAAC_CHIP_CROSSBARS, headline_arch

    result = CliRunner().invoke(app, ["decode", "--model", "gpt2-small", "--prompt", "8",
                                      "--new-tokens", "3", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["new_tokens"] == 3 and len(out["step_us"]) == 3 and out["prompt"] == 8
    # the headline: ISAAC's cited parameters on the fewest whole ISAAC chips holding BERT-base
    arch, chips = headline_arch()
    assert chips == 3 and arch.max_crossbars == 3 * ISAAC_CHIP_CROSSBARS  # one copy: 41,472
    xbar = arch.crossbar
    assert (xbar.rows, xbar.cell_bits, xbar.weight_bits, xbar.input_bits, xbar.adcs) == (
        128, 2, 16, 16, 1)
    assert xbar.adc_sample_ns == pytest.approx(1 / 1.28)
