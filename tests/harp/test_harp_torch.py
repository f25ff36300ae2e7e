"""A PyTorch transformer block imported through torch.fx runs end to end."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from schedlab.core.errors import BadInputError  # noqa: E402
from schedlab.harp import ArchConfig, evaluate, from_torch  # noqa: E402


class Block(nn.Module):
    def __init__(self, d: int = 64, heads: int = 4, ff: int = 256) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.f1, self.f2, self.act = nn.Linear(d, ff), nn.Linear(ff, d), nn.GELU()

    def forward(self, x):
        b, t, d = x.shape

        def split(y):
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        attn = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, t, d)
        x = self.ln1(x + self.o(y))
        return self.ln2(x + self.f2(self.act(self.f1(x))))


def test_fx_import_classifies_and_evaluates() -> None:
    work = from_torch(Block(), torch.randn(1, 32, 64), name="block")
    kinds = [op.kind for op in work.ops]
    assert kinds.count("static") == 6 and kinds.count("dynamic") == 2
    assert {op.func for op in work.ops if op.kind == "nonlinear"} >= {"softmax", "layernorm",
                                                                      "gelu"}
    qk = next(op for op in work.ops if op.kind == "dynamic")
    assert qk.macs == 64 * 32  # heads * head_dim * keys per row
    assert dict(qk.inputs)["k"] == "all"
    fast = evaluate(work, ArchConfig(), "latency", "harp")
    slow = evaluate(work, ArchConfig(), "latency", "non-pipelined", "simulate")
    assert 0 < fast.latency_us < slow.latency_us


def test_fx_rejects_untraceable_module() -> None:
    class Branchy(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(BadInputError):
        from_torch(Branchy(), torch.randn(1, 4, 4))
