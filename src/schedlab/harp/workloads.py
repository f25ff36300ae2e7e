"""Transformer workloads as operator graphs: static GEMMs, dynamic GEMMs and non-linear ops.

HARP (../shared/papers/16-harp.md) splits a transformer by what the hardware can do with it:
static-weight GEMMs (Q/K/V/O projections, FFN) can live in analog crossbars because their
weights never change; dynamic GEMMs (QK^T, AV) multiply two activations, so writing either into
a crossbar would pay the costly write per inference; non-linear ops (softmax, LayerNorm, GELU)
have no analog form. Both of the latter run on digital units.

Each op records its dataflow per token row: ``inputs`` pairs a producer with a pattern —
``rows`` (row t needs the producer's row t), ``all`` (needs every row: the keys/values of an
encoder) or ``prefix`` (rows 0..t: causal attention). Schedulers must respect these.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.core.io import read_json, validate_model
from schedlab.core.registry import lookup
from schedlab.harp.opgraph import NONLINEAR_FUNCS, Op, OpKind, Pattern, Workload

__all__ = ["MODELS", "NONLINEAR_FUNCS", "ModelConfig", "Op", "OpKind", "Pattern", "Workload",
           "build_workload", "load_model"]

class ModelConfig(BaseModel):
    """The shape of a standard transformer: enough to build its operator graph."""

    model_config = ConfigDict(extra="forbid")

    name: str
    layers: int = Field(ge=1, le=256)
    d_model: int = Field(ge=1)
    heads: int = Field(ge=1)
    d_ff: int = Field(ge=1)
    tokens: int = Field(ge=1, le=65_536)
    causal: bool = False
    patch_embed: int = Field(0, ge=0)  # ViT: input features of the patch projection (16*16*3)


#: built-in shapes: BERT (Devlin et al. 2019), ViT-B/16 (Dosovitskiy et al. 2021, 196 patches
#: + [CLS]), GPT-2 (Radford et al. 2019). Sequence lengths are typical inference lengths.
MODELS: dict[str, ModelConfig] = {
    "bert-base": ModelConfig(name="bert-base", layers=12, d_model=768, heads=12, d_ff=3072,
                             tokens=128),
    "bert-large": ModelConfig(name="bert-large", layers=24, d_model=1024, heads=16, d_ff=4096,
                              tokens=128),
    "vit-b16": ModelConfig(name="vit-b16", layers=12, d_model=768, heads=12, d_ff=3072,
                           tokens=197, patch_embed=768),
    "gpt2-small": ModelConfig(name="gpt2-small", layers=12, d_model=768, heads=12, d_ff=3072,
                              tokens=128, causal=True),
    "gpt2-medium": ModelConfig(name="gpt2-medium", layers=24, d_model=1024, heads=16,
                               d_ff=4096, tokens=128, causal=True),
}


def _layer_ops(cfg: ModelConfig, layer: int, source: str | None) -> list[Op]:
    """The twelve ops of one transformer block; ``source`` is the previous block's output."""
    d, t, f = cfg.d_model, cfg.tokens, cfg.d_ff
    kv: Pattern = "prefix" if cfg.causal else "all"
    inp: tuple[tuple[str, Pattern], ...] = ((source, "rows"),) if source else ()
    p = f"L{layer}."
    # Non-causal attention costs the same for every row; causal row r attends r+1 keys.
    full, grow = (0.0, float(d)) if cfg.causal else (float(d * t), 0.0)
    sm_full, sm_grow = (0.0, float(cfg.heads)) if cfg.causal else (float(cfg.heads * t), 0.0)
    return [
        Op(p + "q", layer, "static", inp, k=d, n=d),
        Op(p + "k", layer, "static", inp, k=d, n=d),
        Op(p + "v", layer, "static", inp, k=d, n=d),
        Op(p + "qk", layer, "dynamic", ((p + "q", "rows"), (p + "k", kv)),
           macs=full, macs_growth=grow),
        Op(p + "softmax", layer, "nonlinear", ((p + "qk", "rows"),),
           elems=sm_full, elems_growth=sm_grow, func="softmax"),
        Op(p + "av", layer, "dynamic", ((p + "softmax", "rows"), (p + "v", kv)),
           macs=full, macs_growth=grow),
        Op(p + "o", layer, "static", ((p + "av", "rows"),), k=d, n=d),
        Op(p + "ln1", layer, "nonlinear", ((p + "o", "rows"), *inp), elems=d, func="layernorm"),
        Op(p + "ffn1", layer, "static", ((p + "ln1", "rows"),), k=d, n=f),
        Op(p + "gelu", layer, "nonlinear", ((p + "ffn1", "rows"),), elems=f, func="gelu"),
        Op(p + "ffn2", layer, "static", ((p + "gelu", "rows"),), k=f, n=d),
        Op(p + "ln2", layer, "nonlinear", ((p + "ffn2", "rows"), (p + "ln1", "rows")),
           elems=d, func="layernorm"),
    ]


def build_workload(cfg: ModelConfig | str, tokens: int | None = None) -> Workload:
    """The operator graph of a model config (or a built-in name), optionally re-sized."""
    if isinstance(cfg, str):
        cfg = lookup(MODELS, "model", cfg)
    if tokens is not None:
        cfg = cfg.model_copy(update={"tokens": tokens})
    if cfg.d_model % cfg.heads:
        raise ConfigError(f"d_model {cfg.d_model} is not divisible by {cfg.heads} heads",
                          field="heads")
    ops: list[Op] = []
    source: str | None = None
    if cfg.patch_embed:
        ops.append(Op("embed", 0, "static", (), k=cfg.patch_embed, n=cfg.d_model))
        source = "embed"
    for layer in range(cfg.layers):
        ops.extend(_layer_ops(cfg, layer, source))
        source = ops[-1].name
    return Workload(cfg.name, cfg.tokens, tuple(ops), cfg.causal, meta=cfg.model_dump())


def load_model(spec: str | Path, tokens: int | None = None) -> Workload:
    """A built-in model name, a JSON file holding a ModelConfig, or a transformers config.json.

    A file with a ``model_type`` key is a Hugging Face config: the model is built from it
    (random weights, needs ``transformers``) and imported with ``torch.export``.
    """
    if str(spec) in MODELS:
        return build_workload(str(spec), tokens)
    path = Path(spec)
    if not path.suffix and not path.exists():
        raise UnknownNameError("model", str(spec), sorted(MODELS))
    data = read_json(path, "model file")
    if isinstance(data, dict) and "model_type" in data:  # a Hugging Face config.json
        from schedlab.harp.transformers import from_config

        return from_config(data, tokens or 128, name=path.stem, path=path)
    data.setdefault("name", path.stem)
    cfg = validate_model(ModelConfig, data, path)
    try:
        return build_workload(cfg, tokens)
    except ConfigError as exc:
        exc.path = path
        raise
