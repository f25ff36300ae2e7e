"""A tiny GPT split into *stages* whose parameters can live anywhere (SynergyScale, paper 11).

Why stages and plain functions: an offloading runtime must run one layer at a time with that
layer's parameters materialised from wherever its chunk lives. Each stage is a pure function
``forward(params, x)`` over a dict of tensors, so the same code runs with the parameters of an
``nn.Module`` (in-memory reference training) or with views into a device-tier chunk buffer
(offloaded training). Same kernels, same order: that is what makes losses bit-identical.

There is deliberately no weight tying between the embedding and the head: a tied weight would
accumulate two gradients whose summation order differs between whole-graph autograd and
stage-by-stage backward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.core.io import read_json


@dataclass(frozen=True)
class GPTConfig:
    """Shape of a GPT; ``batch``/``seq`` are the training micro-batch."""

    vocab: int = 256
    d_model: int = 64
    n_layer: int = 4
    n_head: int = 4
    seq: int = 32
    batch: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab", "d_model", "n_layer", "n_head", "seq", "batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise BadInputError(f"must be a positive integer, got {value!r}", field=name)
        if self.d_model % self.n_head:
            raise BadInputError(f"d_model {self.d_model} is not divisible by n_head "
                                f"{self.n_head}", field="n_head")

    @property
    def n_stages(self) -> int:
        return self.n_layer + 2


BUILTIN_MODELS: dict[str, GPTConfig] = {
    "gpt-tiny": GPTConfig(),
    "gpt-small": GPTConfig(vocab=512, d_model=128, n_layer=6, n_head=4, seq=64, batch=4),
    "gpt-medium": GPTConfig(vocab=1024, d_model=256, n_layer=8, n_head=8, seq=64, batch=4),
}


def load_config(spec: str | Path) -> GPTConfig:
    """A built-in name (``gpt-tiny``) or a JSON file with GPTConfig's fields."""
    text = str(spec)
    if text in BUILTIN_MODELS:
        return BUILTIN_MODELS[text]
    path = Path(text)
    if not path.suffix == ".json" and not path.exists():
        raise UnknownNameError("model", text, [*BUILTIN_MODELS, "<file>.json"])
    data = read_json(path, "model config file")
    allowed = set(GPTConfig.__dataclass_fields__)
    for key in data:
        if key not in allowed:
            raise BadInputError(f"unknown field; valid: {', '.join(sorted(allowed))}",
                                path=path, field=str(key))
    try:
        return GPTConfig(**data)
    except BadInputError as exc:
        exc.path = path
        raise


def stage_shapes(cfg: GPTConfig) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Parameter names and shapes of each stage: embed, blocks..., head."""
    d, f = cfg.d_model, 4 * cfg.d_model
    embed = [("wte", (cfg.vocab, d)), ("wpe", (cfg.seq, d))]
    block = [("ln1.w", (d,)), ("ln1.b", (d,)), ("qkv.w", (3 * d, d)), ("qkv.b", (3 * d,)),
             ("proj.w", (d, d)), ("proj.b", (d,)), ("ln2.w", (d,)), ("ln2.b", (d,)),
             ("fc.w", (f, d)), ("fc.b", (f,)), ("out.w", (d, f)), ("out.b", (d,))]
    head = [("lnf.w", (d,)), ("lnf.b", (d,)), ("lm.w", (cfg.vocab, d))]
    return [embed, *([block] * cfg.n_layer), head]


def init_params(cfg: GPTConfig, seed: int) -> list[dict]:
    """Deterministic initial parameters per stage (GPT-2 style scales), from ``seed`` only."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    stages = []
    for shapes in stage_shapes(cfg):
        params = {}
        for name, shape in shapes:
            if name.endswith(".b"):
                params[name] = torch.zeros(shape)
            elif name.startswith("ln") and name.endswith(".w"):
                params[name] = torch.ones(shape)
            else:
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name in ("proj.w", "out.w") else 0.02
                params[name] = torch.randn(shape, generator=gen) * std
        stages.append(params)
    return stages


def embed_forward(p: dict, tokens, cfg: GPTConfig):
    import torch

    positions = torch.arange(tokens.shape[1])
    return p["wte"][tokens] + p["wpe"][positions]


def block_forward(p: dict, x, cfg: GPTConfig):
    import torch.nn.functional as F

    b, t, d = x.shape
    h = F.layer_norm(x, (d,), p["ln1.w"], p["ln1.b"])
    q, k, v = F.linear(h, p["qkv.w"], p["qkv.b"]).split(d, dim=2)
    heads = cfg.n_head
    q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
    att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(att.transpose(1, 2).reshape(b, t, d), p["proj.w"], p["proj.b"])
    h = F.layer_norm(x, (d,), p["ln2.w"], p["ln2.b"])
    return x + F.linear(F.gelu(F.linear(h, p["fc.w"], p["fc.b"])), p["out.w"], p["out.b"])


def head_loss(p: dict, x, targets, cfg: GPTConfig):
    import torch.nn.functional as F

    h = F.layer_norm(x, (cfg.d_model,), p["lnf.w"], p["lnf.b"])
    logits = F.linear(h, p["lm.w"])
    return F.cross_entropy(logits.view(-1, cfg.vocab), targets.reshape(-1))


def stage_forward(index: int, p: dict, x, targets, cfg: GPTConfig):
    """Run stage ``index``: embedding, a block, or the head (which returns the loss)."""
    if index == 0:
        return embed_forward(p, x, cfg)
    if index == cfg.n_stages - 1:
        return head_loss(p, x, targets, cfg)
    return block_forward(p, x, cfg)


def reference_model(cfg: GPTConfig, seed: int):
    """An ordinary ``nn.Module`` with the same parameters: the in-memory training reference."""
    import torch

    class TinyGPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cfg = cfg
            self.stages = torch.nn.ModuleList()
            for params in init_params(cfg, seed):
                holder = torch.nn.Module()
                for name, value in params.items():
                    holder.register_parameter(name.replace(".", "_"), torch.nn.Parameter(value))
                self.stages.append(holder)

        def stage_params(self, index: int) -> dict:
            return {n.replace("_", "."): p for n, p in self.stages[index].named_parameters()}

        def forward(self, tokens, targets):
            x = tokens
            for index in range(cfg.n_stages):
                x = stage_forward(index, self.stage_params(index), x, targets, cfg)
            return x

    return TinyGPT()
