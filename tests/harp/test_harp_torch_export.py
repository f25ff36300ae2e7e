"""torch.export importer: every architecture's MACs and op counts equal the config's analytic
count exactly; attention masks are read from the traced values; bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from schedlab.core.errors import BadInputError  # noqa: E402
from schedlab.harp import ArchConfig, evaluate, from_export  # noqa: E402


def tri(t: int) -> int:
    """Unmasked keys summed over causal rows: 1 + 2 + ... + t."""
    return t * (t + 1) // 2


def check(work, static: float, dynamic: float, counts: dict[str, int]) -> None:
    assert work.macs("static") == static
    assert work.macs("dynamic") == dynamic
    got = work.op_counts()
    assert {k: got.get(k, 0) for k in counts} == counts, got


def encoder_layer_count(layers: int, d: int, f: int, t: int) -> tuple[int, int]:
    """(static, dynamic) MACs of ``layers`` BERT/ViT blocks on ``t`` tokens."""
    return layers * t * (4 * d * d + 2 * d * f), layers * 2 * t * t * d


# -- PyTorch's own modules -----------------------------------------------------------------

@pytest.mark.parametrize("batch_first", [True, False])
def test_transformer_encoder_layer_decomposed(batch_first: bool) -> None:
    d, h, f, t = 64, 4, 96, 12
    layer = nn.TransformerEncoderLayer(d, h, f, batch_first=batch_first)
    x = torch.randn(1, t, d) if batch_first else torch.randn(t, 1, d)
    work = from_export(layer, (x,))
    static, dynamic = encoder_layer_count(1, d, f, t)
    check(work, static, dynamic, {"static": 4, "dynamic": 2, "softmax": 1, "layernorm": 2,
                                  "relu": 1})
    assert work.tokens == t and not work.causal
    in_proj = work.ops[0]
    assert (in_proj.k, in_proj.n) == (d, 3 * d)  # the packed Q/K/V projection


def test_multihead_attention_decomposed_with_causal_mask() -> None:
    d, h, t = 64, 4, 10
    mha = nn.MultiheadAttention(d, h, batch_first=True)
    x = torch.randn(1, t, d)
    mask = nn.Transformer.generate_square_subsequent_mask(t)
    full = from_export(mha, (x, x, x))
    check(full, t * 4 * d * d, 2 * t * t * d, {"static": 2, "dynamic": 2, "softmax": 1})
    causal = from_export(mha, (x, x, x), {"attn_mask": mask, "need_weights": False})
    assert causal.causal
    check(causal, t * 4 * d * d, 2 * tri(t) * d, {"static": 2, "dynamic": 2, "softmax": 1})


class Block(nn.Module):
    """A hand-written block with eager attention and a causal additive mask."""

    def __init__(self, d: int = 32, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2)
                   for y in self.qkv(x).split(d, dim=-1))
        scores = q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5
        mask = torch.full((t, t), float("-inf")).triu(1)
        attn = torch.softmax(scores + mask, dim=-1)
        return self.o((attn @ v).transpose(1, 2).reshape(b, t, d))


def test_eager_causal_mask_read_from_softmax_zeros() -> None:
    t, d = 9, 32
    work = from_export(Block(d), (torch.randn(1, t, d),))
    assert work.causal
    check(work, t * 4 * d * d, 2 * tri(t) * d, {"static": 2, "dynamic": 2, "softmax": 1})
    forced = from_export(Block(d), (torch.randn(1, t, d),), causal=False)
    assert forced.macs("dynamic") == 2 * t * t * d


# -- Hugging Face transformers, built from configs (random weights, no download) -----------

def _hf():
    return pytest.importorskip("transformers")


def bert_config(**kw):
    return _hf().BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=96, vocab_size=100,
                            max_position_embeddings=64, **kw)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hf_bert_counts_exact(attn: str) -> None:
    from schedlab.harp.transformers import from_config

    cfg, t = bert_config(attn_implementation=attn), 12
    work = from_config(cfg, tokens=t)
    static, dynamic = encoder_layer_count(2, 64, 96, t)
    check(work, static + 64 * 64, dynamic,  # + the pooler's dense layer on the [CLS] row
          {"static": 6 * 2 + 1, "dynamic": 4, "softmax": 2, "layernorm": 2 * 2 + 1, "gelu": 2,
           "tanh": 1})
    assert work.tokens == t and not work.causal


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hf_gpt2_counts_exact(attn: str) -> None:
    from schedlab.harp.transformers import from_config

    d, f, t, layers = 64, 256, 12, 2
    cfg = _hf().GPT2Config(n_embd=d, n_layer=layers, n_head=4, vocab_size=100, n_positions=64,
                           attn_implementation=attn)
    work = from_config(cfg, tokens=t)
    assert work.causal
    check(work, layers * t * (3 * d * d + d * d + 2 * d * f), layers * 2 * tri(t) * d,
          {"static": 4 * layers, "dynamic": 2 * layers, "softmax": layers,
           "layernorm": 2 * layers + 1, "gelu": layers})  # gelu_new folded from 8 ATen ops


def test_hf_vit_tokens_are_patches_plus_cls() -> None:
    from schedlab.harp.transformers import from_config

    d, f, img, p, layers = 64, 96, 32, 8, 2
    cfg = _hf().ViTConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=4,
                          intermediate_size=f, image_size=img, patch_size=p)
    work = from_config(cfg)
    patches = (img // p) ** 2
    t = patches + 1
    assert work.tokens == t
    embed = work.ops[0]
    assert (embed.k, embed.n, work.rows_of(embed)) == (3 * p * p, d, patches)  # conv as GEMM
    static, dynamic = encoder_layer_count(layers, d, f, t)
    check(work, static + patches * 3 * p * p * d + d * d, dynamic,
          {"static": 1 + 6 * layers + 1, "dynamic": 2 * layers, "softmax": layers,
           "layernorm": 2 * layers + 1, "gelu": layers, "tanh": 1})
    qk = next(o for o in work.ops if o.kind == "dynamic")
    assert qk.macs == d * t  # heads * head_dim * keys per row, not channels as tokens


def test_hf_llama_gqa_counts_exact() -> None:
    from schedlab.harp.transformers import from_config

    d, hq, hkv, inter, t, layers = 64, 4, 2, 96, 12, 2
    hd = d // hq
    cfg = _hf().LlamaConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=hq,
                            num_key_value_heads=hkv, intermediate_size=inter, vocab_size=100)
    work = from_config(cfg, tokens=t)
    assert work.causal
    per_token = d * hq * hd + 2 * d * hkv * hd + hq * hd * d + 3 * d * inter
    check(work, layers * t * per_token, layers * 2 * hq * hd * tri(t),
          {"static": 7 * layers, "dynamic": 2 * layers, "softmax": layers,
           "rmsnorm": 2 * layers + 1, "silu": layers})  # RMSNorm folded from pow/mean/rsqrt


def test_hf_t5_encoder_decoder_and_bloom_alibi_counts_exact() -> None:
    from schedlab.harp.transformers import from_config

    d, f, t = 64, 96, 12
    t5 = from_config({"model_type": "t5", "vocab_size": 128, "d_model": d, "num_layers": 2,
                      "num_heads": 4, "d_ff": f, "d_kv": 16}, tokens=t)
    enc, dec = 4 * d * d + 2 * d * f, 8 * d * d + 2 * d * f  # decoder: self + cross attention
    check(t5, t * 2 * (enc + dec),
          2 * 2 * t * t * d + 2 * 2 * tri(t) * d + 2 * 2 * t * t * d,  # enc, dec self, cross
          {"static": 32, "dynamic": 12, "softmax": 6, "layernorm": 12, "relu": 4})
    assert t5.causal  # the decoder's self-attention; encoder and cross-attention stay full
    bloom = from_config({"model_type": "bloom", "vocab_size": 128, "hidden_size": d,
                         "n_layer": 2, "n_head": 4}, tokens=t)
    check(bloom, 2 * t * (3 * d * d + d * d + 2 * d * 4 * d), 2 * 2 * tri(t) * d,
          {"static": 8, "dynamic": 4, "softmax": 2, "gelu": 2})  # QK^T is baddbmm (ALiBi)


def test_hf_real_size_gpt2_small() -> None:
    """Full size (BERT-base at full size: benchmarks/harp test_harp_bench_import_hf_bert_base,
    and its small configs above; dropped here to keep tests/harp's time from growing)."""
    from schedlab.harp.transformers import from_config

    hf, t = _hf(), 128
    gpt2 = from_config(hf.GPT2Config(), tokens=t)
    d = 768
    check(gpt2, 12 * t * (4 * d * d + 2 * d * 4 * d), 12 * 2 * tri(t) * d,
          {"static": 48, "dynamic": 24, "softmax": 12, "layernorm": 25, "gelu": 12})


def test_imported_models_evaluate_end_to_end() -> None:
    from schedlab.harp.transformers import from_config

    work = from_config(_hf().ViTConfig(hidden_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=96,
                                       image_size=32, patch_size=8))
    fast = evaluate(work, ArchConfig(), "latency", "harp", "simulate")
    slow = evaluate(work, ArchConfig(), "latency", "non-pipelined", "simulate")
    assert 0 < fast.latency_us <= slow.latency_us


def test_hf_config_json_through_the_cli(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedlab.harp.cli import app

    path = tmp_path / "config.json"
    path.write_text(json.dumps(bert_config().to_dict()))
    result = CliRunner().invoke(app, ["estimate", "--model", str(path), "--tokens", "16",
                                      "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == "config" and report["tokens"] == 16


# -- bad input: one line naming the op, the module or the field ----------------------------

def _one_line(info) -> str:
    text = str(info.value)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_unsupported_op_names_op_and_module() -> None:
    class Sorter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)

        def forward(self, x):
            return torch.sort(self.proj(x), dim=-1).values

    with pytest.raises(BadInputError) as info:
        from_export(Sorter(), (torch.randn(1, 4, 8),))
    text = _one_line(info)
    assert "aten.sort" in text and "Sorter" in text


def test_untraceable_model_is_named() -> None:
    class Branchy(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(BadInputError) as info:
        from_export(Branchy(), (torch.randn(1, 4, 4),))
    assert "torch.export could not trace Branchy" in _one_line(info)


def test_padding_mask_is_refused() -> None:
    model = _hf().AutoModel.from_config(bert_config())
    ids = torch.randint(0, 100, (1, 8))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]])
    with pytest.raises(BadInputError) as info:
        from_export(model, (), {"input_ids": ids, "attention_mask": mask})
    assert "neither full nor causal" in _one_line(info)


def test_not_a_module_and_bad_configs() -> None:
    with pytest.raises(BadInputError):
        from_export(lambda x: x, (torch.randn(1, 2, 2),))
    _hf()
    from schedlab.harp.transformers import from_config

    with pytest.raises(BadInputError) as info:
        from_config({"hidden_size": 8})
    assert info.value.field == "model_type"
    with pytest.raises(BadInputError) as info:
        from_config({"model_type": "no-such-model"})
    assert info.value.field == "model_type"
    with pytest.raises(BadInputError) as info:
        from_config(bert_config(), tokens=1000)
    assert info.value.field == "tokens"


def test_mistyped_config_field_is_one_line_naming_it(tmp_path: Path) -> None:
    """huggingface_hub's strict-dataclass validation error is not a ValueError; a wrong type
    in a config.json used to escape as a traceback."""
    _hf()
    from typer.testing import CliRunner

    from schedlab.harp.cli import app

    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "gpt2", "n_layer": "x", "n_embd": 64,
                               "n_head": 4}))
    result = CliRunner().invoke(app, ["estimate", "--model", str(bad), "--tokens", "8"])
    assert result.exit_code == 2, result.output
    assert "n_layer" in result.output and "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception,
                                                                      SystemExit)
