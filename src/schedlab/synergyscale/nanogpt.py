"""A nanoGPT-style model written as an ordinary ``nn.Module`` (for :func:`initialize`).

Unlike :mod:`schedlab.synergyscale.model`, nothing here knows about offloading: it is the kind
of model a user brings (Karpathy's nanoGPT layout: token + position embeddings, pre-LN blocks
with fused QKV attention and a GELU MLP, a final LayerNorm and a head tied to the embedding).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class NanoGPTConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vocab: int = Field(1024, ge=2)
    seq: int = Field(64, ge=1)
    d_model: int = Field(256, ge=1)
    n_layer: int = Field(4, ge=1)
    n_head: int = Field(8, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    tie_weights: bool = True

    @model_validator(mode="after")
    def _heads(self):
        if self.d_model % self.n_head:
            raise ValueError(
                f"n_head: d_model {self.d_model} is not divisible by n_head {self.n_head}"
            )
        return self


def NanoGPT(config: NanoGPTConfig | dict | None = None, seed: int = 0):  # noqa: N802
    """Build the model (a factory, so importing this module does not import torch)."""
    import torch
    from torch import nn
    from torch.nn import functional as F  # noqa: N812

    from schedlab.core.io import validate_model

    cfg = (
        config if isinstance(config, NanoGPTConfig) else validate_model(NanoGPTConfig, config or {})
    )

    class CausalSelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
            self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(cfg.d_model, dim=2)
            shape = (b, t, cfg.n_head, c // cfg.n_head)
            q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=cfg.dropout if self.training else 0.0
            )
            return self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
            self.c_proj = nn.Linear(4 * cfg.d_model, cfg.d_model)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, x):
            return self.drop(self.c_proj(F.gelu(self.c_fc(x))))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1 = nn.LayerNorm(cfg.d_model)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(cfg.d_model)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = cfg
            self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
            self.wpe = nn.Embedding(cfg.seq, cfg.d_model)
            self.drop = nn.Dropout(cfg.dropout)
            self.h = nn.ModuleList(Block() for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(cfg.d_model)
            self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
            if cfg.tie_weights:
                self.lm_head.weight = self.wte.weight

        def forward(self, idx, targets=None):
            t = idx.shape[1]
            pos = torch.arange(t, device=idx.device)
            x = self.drop(self.wte(idx) + self.wpe(pos))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            if targets is None:
                return logits, None
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
            return logits, loss

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = GPT()
        for name, p in model.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / (2 * cfg.n_layer) ** 0.5)
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
    finally:
        torch.random.set_rng_state(generator_state)
    return model
