"""A real transformers Llama model run over paged KV blocks (CPU build of torch).

The weights and modules are Hugging Face ``LlamaForCausalLM``'s, random-initialised from a
``LlamaConfig`` (nothing is downloaded). The forward pass is ours: it packs the new tokens of
every sequence of a batch into one row for the linear layers (varlen batching, as vLLM does),
writes each token's K/V into the physical block its block table names, and computes attention
per sequence over the K/V gathered from its blocks, so a request reuses cached prefix blocks
without recomputing them. ``tests/llm`` checks the logits against the model's own full forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from schedlab.core.errors import ConfigError


@dataclass(frozen=True)
class TinyLlama:
    """A small Llama-architecture configuration (defaults: 2 layers, hidden 64, GQA 4/2)."""

    layers: int = 2
    hidden: int = 64
    intermediate: int = 128
    heads: int = 4
    kv_heads: int = 2
    vocab: int = 256
    max_context: int = 2048
    seed: int = 0

    def __post_init__(self) -> None:
        for name in (
            "layers",
            "hidden",
            "intermediate",
            "heads",
            "kv_heads",
            "vocab",
            "max_context",
        ):
            if getattr(self, name) < 1:
                raise ConfigError("must be >= 1", field=name)
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ConfigError(
                f"hidden {self.hidden} must divide by heads {self.heads} and "
                f"heads by kv_heads {self.kv_heads}",
                field="heads",
            )
        if (self.hidden // self.heads) % 2:
            raise ConfigError(
                f"head dimension hidden/heads = {self.hidden // self.heads} must be even (RoPE)",
                field="hidden",
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def build(self):
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.max_context,
        )
        torch.manual_seed(self.seed)
        return LlamaForCausalLM(cfg).eval()


@dataclass
class SeqInput:
    """One sequence's share of a step: its new tokens from position ``start`` on."""

    tokens: list[int]
    start: int
    table: list[int]  # physical block ids covering positions 0 .. start + len(tokens) - 1


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class PagedLlama:
    """``LlamaForCausalLM`` executed over a paged K/V pool (``kv.BlockPool``)."""

    def __init__(self, spec: TinyLlama) -> None:
        self.spec = spec
        self.hf = spec.build()
        self.inner = self.hf.model

    @torch.inference_mode()
    def forward(
        self, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tokens: int, seqs: list[SeqInput]
    ) -> torch.Tensor:
        """Run one step; write new K/V into the pools; return last-position logits [B, vocab]."""
        spec, m = self.spec, self.inner
        ids = torch.tensor([t for s in seqs for t in s.tokens], dtype=torch.long)
        pos = torch.cat([torch.arange(s.start, s.start + len(s.tokens)) for s in seqs])
        tables = [torch.tensor(s.table, dtype=torch.long) for s in seqs]
        slot_block = torch.cat(
            [
                tables[i][pos_i // block_tokens]
                for i, pos_i in enumerate(torch.split(pos, [len(s.tokens) for s in seqs]))
            ]
        )
        slot_off = pos % block_tokens
        h = m.embed_tokens(ids)[None]  # [1, T, hidden]
        cos, sin = m.rotary_emb(h, pos[None])
        cos, sin = cos[0][:, None, :], sin[0][:, None, :]  # [T, 1, hd]
        T, hd = ids.numel(), spec.head_dim
        lens = [len(s.tokens) for s in seqs]
        for li, layer in enumerate(m.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)[0]
            q = attn.q_proj(x).view(T, spec.heads, hd)
            k = attn.k_proj(x).view(T, spec.kv_heads, hd)
            v = attn.v_proj(x).view(T, spec.kv_heads, hd)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            k_pool[li].index_put_((slot_block, slot_off), k)
            v_pool[li].index_put_((slot_block, slot_off), v)
            outs, offset = [], 0
            for s, table, n in zip(seqs, tables, lens, strict=True):
                ctx = s.start + n
                keys = k_pool[li][table].reshape(-1, spec.kv_heads, hd)[:ctx]
                vals = v_pool[li][table].reshape(-1, spec.kv_heads, hd)[:ctx]
                qs = q[offset : offset + n].transpose(0, 1)[None]  # [1, H, n, hd]
                mask = torch.arange(ctx)[None, :] <= torch.arange(s.start, ctx)[:, None]
                o = F.scaled_dot_product_attention(
                    qs,
                    keys.transpose(0, 1)[None],
                    vals.transpose(0, 1)[None],
                    attn_mask=mask,
                    enable_gqa=True,
                )
                outs.append(o[0].transpose(0, 1).reshape(n, spec.hidden))
                offset += n
            h = h + attn.o_proj(torch.cat(outs))[None]
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        last = torch.tensor(lens).cumsum(0) - 1
        return self.hf.lm_head(m.norm(h[0, last]))
