"""Worked examples of :func:`schedlab.synergyscale.initialize` on models the project did not write.

``fit`` trains transformers' GPT-2 (``GPT2Config``, random init) or the nanoGPT-style model of
:mod:`schedlab.synergyscale.nanogpt` under an offloading config, optionally checkpointing after
every step and resuming from the last checkpoint. Batch ``i`` depends only on ``(seed, i)``, so a
run killed and resumed sees exactly the batches an uninterrupted run sees. The CLI form is
``schedlab synergyscale fit``.

The loop is the whole API::

    engine = initialize(model, torch.optim.Adam(model.parameters(), lr=1e-3),
                        {"device_budget": 0.35, "tier": "nvme", "nvme_dir": "/mnt/nvme/ss"})
    for x, y in batches:
        loss = engine(x, labels=y).loss      # the model's own forward, called through the engine
        engine.backward(loss)
        engine.step()
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedlab.core.errors import ConfigError

MODELS = ("nanogpt", "gpt2")


@dataclass
class FitResult:
    losses: list[float]
    step_seconds: list[float]
    stats: dict
    resumed_from: int


def build_model(kind: str, size: dict | None = None, seed: int = 0):
    """``kind`` = 'nanogpt' or 'gpt2' (transformers), randomly initialised from ``seed``."""
    import torch

    size = dict(size or {})
    if kind == "nanogpt":
        from schedlab.synergyscale.nanogpt import NanoGPT

        return NanoGPT(size, seed=seed)
    if kind == "gpt2":
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except ImportError:
            raise ConfigError(
                "the gpt2 example needs transformers (pip install transformers)", field="model"
            ) from None
        defaults = dict(
            vocab_size=1024,
            n_positions=64,
            n_embd=128,
            n_layer=2,
            n_head=4,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
        defaults.update(size)
        for key in ("bos_token_id", "eos_token_id"):
            defaults.setdefault(key, defaults["vocab_size"] - 1)
        try:
            cfg = GPT2Config(**defaults)
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc).splitlines()[0], field="model") from None
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            return GPT2LMHeadModel(cfg)
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc).splitlines()[0], field="size") from None
        finally:
            torch.random.set_rng_state(state)
    raise ConfigError(f"unknown model {kind!r} (known: {', '.join(MODELS)})", field="model")


def _vocab_seq(kind: str, model) -> tuple[int, int]:
    if kind == "gpt2":
        return model.config.vocab_size, model.config.n_positions
    return model.config.vocab, model.config.seq


def load_bytes(path: str | Path, kind: str, model):
    """A file's bytes as a token stream (byte-level: the vocabulary must cover 256)."""
    import torch

    from schedlab.core.errors import BadInputError

    path = Path(path)
    if not path.is_file():
        raise BadInputError("no such data file", path=path, field="data")
    vocab, seq = _vocab_seq(kind, model)
    if vocab < 256:
        raise BadInputError(
            f"byte-level data needs a vocabulary >= 256, the model has {vocab}",
            path=path,
            field="data",
        )
    raw = path.read_bytes()
    if len(raw) < seq + 1:
        raise BadInputError(
            f"has {len(raw)} bytes; one sequence needs {seq + 1}", path=path, field="data"
        )
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


def batch(kind: str, model, step: int, seed: int, batch_size: int, stream=None):
    """Batch ``step`` (inputs, next-token targets): seeded random tokens, or windows of
    ``stream`` at seeded offsets; depends only on ``(seed, step)``."""
    import torch

    vocab, seq = _vocab_seq(kind, model)
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    if stream is None:
        tokens = torch.randint(0, vocab, (batch_size, seq + 1), generator=g)
    else:
        starts = torch.randint(0, len(stream) - seq, (batch_size,), generator=g)
        tokens = torch.stack([stream[i : i + seq + 1] for i in starts.tolist()])
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def loss_of(kind: str, engine_or_model, x, y):
    if kind == "gpt2":
        # GPT-2 shifts labels itself; pass the unshifted sequence as labels
        return engine_or_model(x, labels=x).loss
    return engine_or_model(x, y)[1]


def fit(
    kind: str,
    steps: int,
    config: dict | Any | None = None,
    *,
    size: dict | None = None,
    lr: float = 1e-3,
    seed: int = 0,
    batch_size: int = 4,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    on_step=None,
    data: str | Path | None = None,
) -> FitResult:
    """Train ``steps`` steps with the engine; checkpoint after each step when asked."""
    import time

    import torch

    from schedlab.synergyscale.engine import initialize

    if steps < 1:
        raise ConfigError("must be at least 1", field="steps")
    if checkpoint is not None and Path(checkpoint).exists() and not Path(checkpoint).is_dir():
        from schedlab.core.errors import BadInputError

        raise BadInputError(
            "checkpoint path exists and is not a directory", path=checkpoint, field="checkpoint"
        )
    model = build_model(kind, size, seed)
    stream = load_bytes(data, kind, model) if data is not None else None
    engine = initialize(model, torch.optim.Adam(model.parameters(), lr=lr), config)
    losses: list[float] = []
    start = 0
    if resume and checkpoint is not None and Path(checkpoint).exists():
        extra = engine.load_checkpoint(checkpoint)
        losses = list(extra.get("losses", []))
        start = engine.step_count
    seconds = []
    try:
        for step in range(start, steps):
            x, y = batch(kind, model, step, seed, batch_size, stream)
            began = time.perf_counter()
            loss = loss_of(kind, engine, x, y)
            engine.backward(loss)
            engine.step()
            seconds.append(time.perf_counter() - began)
            losses.append(loss.item())
            if checkpoint is not None:
                engine.save_checkpoint(checkpoint, extra={"losses": losses})
            if on_step is not None:
                on_step(step, losses[-1])
        stats = engine.stats()
    finally:
        engine.close()
    return FitResult(losses, seconds, stats, start)


def fit_reference(
    kind: str,
    steps: int,
    *,
    size: dict | None = None,
    lr: float = 1e-3,
    seed: int = 0,
    batch_size: int = 4,
    data: str | Path | None = None,
) -> list[float]:
    """The same run with plain PyTorch and ``torch.optim.Adam`` (the yardstick)."""
    import torch

    model = build_model(kind, size, seed)
    stream = load_bytes(data, kind, model) if data is not None else None
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        x, y = batch(kind, model, step, seed, batch_size, stream)
        loss = loss_of(kind, model, x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
