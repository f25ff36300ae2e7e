"""Parameter blocks of real transformer architectures, counted layer by layer from config.json.

The market caches *blocks* (embeddings, groups of layers, the output head, a LoRA adapter) and a
fine-tuned variant shares the blocks it did not change. The block sizes must be those of real
models, not round fractions of a parameter count, so this module counts parameters the way the
Hugging Face implementations allocate them:

* decoder (Llama, Qwen2, Mistral): embedding V·h; per layer q h·(H·d) and k, v h·(K·d) (+ biases
  when ``attention_bias``), o (H·d)·h, a gated MLP 3·h·I, two RMSNorms 2·h; a final norm h;
  ``lm_head`` V·h unless tied to the embedding.
* encoder (BERT, RoBERTa, DeBERTa-v2): word, position (unless ``position_biased_input`` is
  false, as in DeBERTa-v2) and token-type embeddings plus a LayerNorm; per layer q, k, v, o with
  biases, two LayerNorms, an MLP h·I + I·h with biases; DeBERTa's relative-position table with
  its LayerNorm and its convolution (``conv_kernel_size`` k: k·h·h + h, and a LayerNorm), both
  counted in the embedding block; a pooler h·h + h (BERT/RoBERTa).

A LoRA adapter of rank r on a target module of shape d_in x d_out holds r·(d_in + d_out)
parameters per layer (Hu et al., ICLR 2022). The counts are checked in the tests against the
published sizes (Llama-2-7B 6.74 B, Llama-3-8B 8.03 B, Qwen2-7B 7.62 B, RoBERTa-base 125 M, the
LoRA paper's 0.3 M and 4.7 M trainable parameters).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from schedlab.core.errors import BadInputError, UnknownNameError

#: bytes per parameter when cached (fp16 / bf16 weights)
BYTES_PER_PARAM = 2
_DECODER_TYPES = {"llama", "qwen2", "mistral", "qwen3", "gemma", "phi3"}
_ENCODER_TYPES = {"bert", "roberta", "deberta-v2", "xlm-roberta"}
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class TransformerConfig:
    """The architecture numbers that decide the size of every block."""

    name: str
    arch: str  # "decoder" | "encoder"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    max_position_embeddings: int = 0
    type_vocab_size: int = 0
    relative_positions: int = 0
    position_biased_input: bool = True  # absolute position embeddings (DeBERTa-v2: false)
    conv_kernel_size: int = 0  # DeBERTa-v2's convolution after the first layer (0: none)
    source: str = ""
    published_params: float | None = None
    published_lora_params: float | None = None
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    # --- counts -------------------------------------------------------------------------------

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(d_in, d_out) of every linear module in one layer (what LoRA can target)."""
        h, q_out, kv_out = self.hidden_size, self.num_attention_heads * self.dim, \
            self.kv_heads * self.dim
        if self.arch == "encoder":
            q_out = kv_out = h
        shapes = {"q_proj": (h, q_out), "k_proj": (h, kv_out), "v_proj": (h, kv_out),
                  "o_proj": (q_out, h)}
        if self.arch == "decoder":
            shapes |= {"gate_proj": (h, self.intermediate_size),
                       "up_proj": (h, self.intermediate_size),
                       "down_proj": (self.intermediate_size, h)}
        else:
            shapes |= {"up_proj": (h, self.intermediate_size),
                       "down_proj": (self.intermediate_size, h)}
        return shapes

    def layer_params(self) -> int:
        """Parameters of one transformer layer."""
        h, shapes = self.hidden_size, self.module_shapes()
        weights = sum(a * b for a, b in shapes.values())
        if self.arch == "decoder":
            bias = (shapes["q_proj"][1] + 2 * shapes["k_proj"][1]) if self.attention_bias else 0
            return weights + bias + 2 * h  # two RMSNorm weight vectors
        biases = sum(b for _, b in shapes.values())
        return weights + biases + 2 * 2 * h  # two LayerNorms (weight + bias)

    def embedding_params(self) -> int:
        h = self.hidden_size
        if self.arch == "decoder":
            return self.vocab_size * h
        positions = self.max_position_embeddings if self.position_biased_input else 0
        table = (self.vocab_size + positions + self.type_vocab_size) * h
        conv = (self.conv_kernel_size * h * h + h + 2 * h) if self.conv_kernel_size else 0
        return table + 2 * h + (self.relative_positions * h + 2 * h
                                if self.relative_positions else 0) + conv

    def head_params(self) -> int:
        """The block after the last layer: final norm + untied lm_head, or the pooler."""
        h = self.hidden_size
        if self.arch == "decoder":
            return h + (0 if self.tie_word_embeddings else self.vocab_size * h)
        return 0 if self.relative_positions else h * h + h  # DeBERTa-v2 has no pooler

    def total_params(self) -> int:
        return (self.embedding_params() + self.num_hidden_layers * self.layer_params()
                + self.head_params())

    def lora_params(self, rank: int | None = None,
                    targets: tuple[str, ...] | None = None) -> int:
        """Trainable parameters of a LoRA adapter: r·(d_in + d_out) per target, per layer."""
        rank = self.lora_rank if rank is None else rank
        targets = self.lora_targets if targets is None else tuple(targets)
        shapes = self.module_shapes()
        unknown = [t for t in targets if t not in shapes]
        if unknown:
            raise BadInputError(f"{self.name} has no module {unknown[0]!r}; valid: "
                                f"{', '.join(shapes)}", field="lora_targets")
        if rank < 1:
            raise BadInputError(f"must be at least 1, got {rank}", field="lora_rank")
        return self.num_hidden_layers * sum(rank * sum(shapes[t]) for t in targets)

    def classifier_params(self, labels: int = 2) -> int:
        """A sequence-classification head (RoBERTa style: dense h·h + h, out h·labels + labels)."""
        h = self.hidden_size
        return h * h + h + h * labels + labels

    def blocks_gb(self, groups: int) -> tuple[float, list[float], float]:
        """Sizes in GB of the embedding block, ``groups`` contiguous layer groups, the head."""
        if groups < 1:
            raise BadInputError("needs at least one layer group", field="groups")
        groups = min(groups, self.num_hidden_layers)
        per_group = [self.num_hidden_layers // groups + (g < self.num_hidden_layers % groups)
                     for g in range(groups)]
        gb = BYTES_PER_PARAM / 1e9
        return (self.embedding_params() * gb, [n * self.layer_params() * gb for n in per_group],
                self.head_params() * gb)

    def tflop_per_request(self, tokens: int) -> float:
        """Forward FLOPs of ``tokens`` tokens: 2 x non-embedding parameters per token (TFLOP)."""
        dense = self.num_hidden_layers * self.layer_params() + (
            self.vocab_size * self.hidden_size if self.arch == "decoder" else 0)
        return 2.0 * dense * tokens / 1e12


@lru_cache(maxsize=1)
def presets() -> dict[str, TransformerConfig]:
    """The architectures in ``model_configs.toml`` (numbers from each model's config.json)."""
    text = resources.files("schedlab.mec_coalition").joinpath("model_configs.toml").read_text()
    return {name: _config(name, dict(values), "model_configs.toml")
            for name, values in tomllib.loads(text).items()}


def get_config(name: str) -> TransformerConfig:
    """A preset by name, or a Hugging Face ``config.json`` when ``name`` is a path to one."""
    table = presets()
    if name in table:
        return table[name]
    path = Path(name)
    if path.suffix == ".json" or path.is_file():
        return read_hf_config(path)
    raise UnknownNameError("model configuration", name, sorted(table))


def read_hf_config(path: Path) -> TransformerConfig:
    """A transformers ``config.json`` (llama/qwen2/mistral/bert/roberta/deberta-v2 families)."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise BadInputError("no such file", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read it ({exc})", path=path) from None
    except json.JSONDecodeError as exc:
        raise BadInputError(f"not JSON: {exc.msg}", path=path, line=exc.lineno) from None
    if not isinstance(raw, dict):
        raise BadInputError("must be a JSON object (a transformers config.json)", path=path)
    kind = str(raw.get("model_type", ""))
    if kind in _DECODER_TYPES:
        raw["arch"] = "decoder"
        raw.setdefault("attention_bias", kind == "qwen2")
    elif kind in _ENCODER_TYPES:
        raw["arch"] = "encoder"
        if kind == "deberta-v2" and raw.get("relative_attention"):
            raw.setdefault("relative_positions", 2 * int(raw.get("position_buckets", 256)))
    else:
        raise BadInputError(f"model_type {kind!r} is not one we can count; supported: "
                            f"{', '.join(sorted(_DECODER_TYPES | _ENCODER_TYPES))}",
                            path=path, field="model_type")
    name = str(raw.get("_name_or_path") or Path(path).parent.name or Path(path).stem)
    return _config(name, raw, str(path))


_INT_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
               "num_attention_heads")


def _config(name: str, raw: dict, where: str) -> TransformerConfig:
    """Validate one table/JSON object into a config; errors name the field and the source."""
    for key in _INT_FIELDS:
        value = raw.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise BadInputError(f"{name}: needs a positive integer, got {value!r}",
                                path=Path(where), field=key)
    for key in ("num_key_value_heads", "head_dim", "max_position_embeddings",
                "type_vocab_size", "relative_positions", "conv_kernel_size"):
        value = raw.get(key)
        if value is not None and (not isinstance(value, int) or value < 0):
            raise BadInputError(f"{name}: needs a non-negative integer, got {value!r}",
                                path=Path(where), field=key)
    for key in ("tie_word_embeddings", "attention_bias", "position_biased_input"):
        if key in raw and not isinstance(raw[key], bool):
            raise BadInputError(f"{name}: needs true or false, got {raw[key]!r}",
                                path=Path(where), field=key)
    targets = tuple(raw.get("lora_targets", ("q_proj", "v_proj")))
    unknown = [t for t in targets if t not in (*_ATTENTION, *_MLP)]
    if unknown:
        raise BadInputError(f"{name}: unknown LoRA target {unknown[0]!r}", path=Path(where),
                            field="lora_targets")
    known = {f for f in TransformerConfig.__dataclass_fields__ if f not in ("name", "extra")}
    values = {k: raw[k] for k in known if k in raw and raw[k] is not None}
    values["lora_targets"] = targets
    values["extra"] = {k: v for k, v in raw.items() if k not in known}
    return TransformerConfig(name=name, **values)
