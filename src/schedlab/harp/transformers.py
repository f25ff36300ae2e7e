"""Hugging Face ``transformers`` models, built from their configs, as HARP workloads.

A user's model is usually a ``config.json`` (BERT, GPT-2, ViT, Llama, ...). This builds the
model with ``AutoModel.from_config`` — random weights, nothing downloaded, the shapes are all
HARP needs — makes an example input (``input_ids`` of ``tokens`` rows, or ``pixel_values`` of
the config's image size), and imports it through :func:`schedlab.harp.torch_export.from_export`.
``transformers`` is optional and imported only here, when called.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from schedlab.core.errors import BadInputError, MissingDependencyError
from schedlab.harp.opgraph import Workload


def _transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise MissingDependencyError("importing Hugging Face models needs transformers",
                                     hint="pip install transformers") from exc
    return transformers


def build_model(config: Any, path: str | Path | None = None) -> Any:
    """``AutoModel.from_config`` of a config object or a dict holding ``model_type``."""
    hf = _transformers()
    if isinstance(config, dict):
        data = dict(config)
        kind = data.pop("model_type", None)
        if not kind:
            raise BadInputError("a Hugging Face config needs 'model_type'", path=path,
                                field="model_type")
        try:
            config = hf.AutoConfig.for_model(kind, **data)
        except Exception as exc:  # ValueError/KeyError/TypeError, huggingface_hub's strict
            # dataclass validation errors (not ValueErrors) for a mistyped field, ...
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [repr(exc)]
            bad = re.search(r"field '([^']+)'", lines[0])
            raise BadInputError(f"not a transformers config: {' '.join(lines[:2])[:300]}",
                                path=path, field=bad.group(1) if bad else "model_type") from None
    if hasattr(config, "use_cache"):
        config.use_cache = False  # a KV cache in the outputs is not a tensor torch.export knows
    try:
        return hf.AutoModel.from_config(config).eval()
    except Exception as exc:  # unknown architectures raise many types; one line
        raise BadInputError(f"transformers could not build {type(config).__name__}: "
                            f"{str(exc).splitlines()[0][:300]}", path=path,
                            field="model_type") from None


def example_inputs(config: Any, tokens: int) -> dict[str, Any]:
    """Batch-1 inputs: pixel values for vision configs, ``tokens`` input ids otherwise."""
    import torch

    if hasattr(config, "image_size") and hasattr(config, "num_channels"):
        size = config.image_size
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        return {"pixel_values": torch.randn(1, config.num_channels, h, w)}
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions",
                                                                        None)
    if limit and tokens > limit:
        raise BadInputError(f"{tokens} tokens exceed the model's {limit} positions",
                            field="tokens")
    vocab = max(int(getattr(config, "vocab_size", 2) or 2), 2)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, tokens), generator=gen)
    if getattr(config, "is_encoder_decoder", False):  # T5/BART: a decoder prefill as long
        return {"input_ids": ids, "decoder_input_ids": ids.clone()}
    return {"input_ids": ids}


def from_config(config: Any, tokens: int = 128, name: str | None = None,
                causal: bool | None = None, path: str | Path | None = None) -> Workload:
    """A Workload from a transformers config (object, dict with ``model_type``, or model)."""
    from schedlab.harp.torch_export import from_export

    model = config if hasattr(config, "forward") else build_model(config, path)
    inputs = example_inputs(model.config, tokens)
    label = name or getattr(model.config, "model_type", None) or type(model).__name__
    return from_export(model, (), inputs, name=str(label), causal=causal)


def decode_step_from_model(model: Any, context: int, name: str | None = None) -> Workload:
    """One KV-cache decode step of a Hugging Face decoder, traced with a real cache.

    The model runs one new token with ``use_cache=True`` over a ``DynamicCache`` holding
    ``context`` tokens of random keys/values per layer (their values do not change the
    counts); the cache is built inside the traced function from plain tensors, so
    ``torch.export`` sees tensors in and the last hidden state out. An independent check of
    :func:`schedlab.harp.decoding.decode_step`, which derives the same step from the prefill.
    """
    import torch

    from schedlab.harp.torch_export import from_export

    hf, config = _transformers(), model.config
    if getattr(config, "is_encoder_decoder", False):
        raise BadInputError("decode steps are traced for decoder-only models",
                            field="model")
    # HF configs map these names onto their own (GPT-2: n_layer, n_head, n_embd)
    layers, width = config.num_hidden_layers, config.hidden_size
    query_heads = config.num_attention_heads
    heads = getattr(config, "num_key_value_heads", None) or query_heads
    head_dim = getattr(config, "head_dim", None) or width // query_heads

    class _Step(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, ids: Any, *kv: Any) -> Any:
            cache = hf.DynamicCache(config=self.inner.config)
            for i in range(0, len(kv), 2):
                cache.update(kv[i], kv[i + 1], i // 2)
            return self.inner(input_ids=ids, past_key_values=cache,
                              use_cache=True).last_hidden_state

    gen = torch.Generator().manual_seed(0)
    kv = tuple(torch.randn(1, heads, context, head_dim, generator=gen)
               for _ in range(2 * layers))
    ids = torch.randint(0, max(int(config.vocab_size), 2), (1, 1), generator=gen)
    label = name or f"{getattr(config, 'model_type', type(model).__name__)}@decode{context}"
    return from_export(_Step(model), (ids, *kv), name=label)
