"""Training data and model families (SynergyScale, 11-synergyscale.md).

* :func:`synthetic_batches` - a seeded token stream from a sparse random Markov chain, so a tiny
  GPT has something learnable and the loss visibly falls.
* :func:`text_batches` - your own data: any UTF-8/binary file read as bytes (vocab 256).
* :func:`gpt_family` - GPT shapes of a given size with the GPT-3 aspect ratio (d_model = 128 x
  layers), used to extrapolate the largest trainable model on named hardware.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.synergyscale.model import GPTConfig


def _windows(stream: np.ndarray, cfg: GPTConfig, steps: int, rng: np.random.Generator) -> list:
    import torch

    span = cfg.seq + 1
    batches = []
    for _ in range(steps):
        starts = rng.integers(0, len(stream) - span + 1, size=cfg.batch)
        rows = np.stack([stream[s:s + span] for s in starts]).astype(np.int64)
        inputs, targets = rows[:, :-1].copy(), rows[:, 1:].copy()
        batches.append((torch.from_numpy(inputs), torch.from_numpy(targets)))
    return batches


def synthetic_batches(cfg: GPTConfig, steps: int, seed: int, branching: int = 4) -> list:
    """``steps`` (tokens, targets) batches from a Markov chain where each token has
    ``branching`` likely successors."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, cfg.vocab, size=(cfg.vocab, branching))
    length = max(4 * cfg.seq * cfg.batch, 2048)
    stream = np.empty(length, dtype=np.int64)
    stream[0] = rng.integers(cfg.vocab)
    picks = rng.integers(0, branching, size=length)
    for i in range(1, length):
        stream[i] = successors[stream[i - 1], picks[i]]
    return _windows(stream, cfg, steps, rng)


def text_batches(path: str | Path, cfg: GPTConfig, steps: int, seed: int) -> list:
    """Batches of byte tokens from a file; the model's vocabulary must cover 256 bytes."""
    path = Path(path)
    if not path.is_file():
        raise BadInputError("no such data file", path=path, field="data")
    if cfg.vocab < 256:
        raise BadInputError(f"byte-level data needs vocab >= 256, the model has {cfg.vocab}",
                            path=path, field="vocab")
    stream = np.frombuffer(path.read_bytes(), dtype=np.uint8).astype(np.int64)
    if len(stream) < cfg.seq + 1:
        raise BadInputError(f"has {len(stream)} bytes; one sequence needs {cfg.seq + 1}",
                            path=path, field="data")
    return _windows(stream, cfg, steps, np.random.default_rng(seed))


def gpt_family(layers: int, vocab: int = 50304, seq: int = 2048, batch: int = 4) -> GPTConfig:
    """A GPT with ``layers`` layers and d_model = 128 x layers (GPT-3's aspect ratio)."""
    d_model = 128 * layers
    return GPTConfig(vocab=vocab, d_model=d_model, n_layer=layers, n_head=max(1, d_model // 128),
                     seq=seq, batch=batch)
