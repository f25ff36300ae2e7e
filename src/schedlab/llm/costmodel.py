"""Iteration-time cost model for one LLM on one GPU type, derived from a roofline of public specs.

Form (DistServe, Zhong et al., OSDI'24, §4 latency model)::

    prefill_ms = a_p + b_p * sum(tokens) + c_p * sum(tokens^2)
    decode_ms  = a_d + b_d * sum(context) + c_d * batch

Why a roofline instead of profiled tables: schedlab has no GPUs, and the schedulers we study only
need the *shape* of the cost (linear in tokens, quadratic attention, memory-bound decode). Every
coefficient below is one line of arithmetic over the numbers in ``specs.toml``:

* prefill linear term = 2·params FLOPs per token; attention = 2·layers·hidden FLOPs per token
  pair (QK^T and AV, halved for the causal mask); both at ``compute_efficiency`` × peak bf16.
* decode reads every weight once per iteration (a_d), the KV cache of every context token (b_d),
  and does 2·params FLOPs per sequence (c_d); bytes at ``memory_efficiency`` × HBM bandwidth.
* KV bytes per token = 2 (K and V) · layers · kv_heads · head_dim · dtype bytes.
* A host<->GPU transfer of n bytes takes n / (PCIe GB/s) (no overlap with compute).

Tensor parallelism (``tp``) divides FLOPs, weight and KV bytes evenly across ``tp`` GPUs and
ignores all-reduce time; the default ``tp`` is the smallest power of two whose weights fit in
60% of GPU memory (Llama-3-70B needs tp=4 on 80 GB parts, tp=8 on an A10G).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from schedlab.core.errors import BadInputError, ConfigError, UnknownNameError

#: fraction of peak a well-tuned kernel reaches; typical prefill MFU 40-60%, decode HBM 70-85%
COMPUTE_EFFICIENCY = 0.5
MEMORY_EFFICIENCY = 0.8
#: fixed per-iteration overhead (kernel launches, scheduler, sampling), milliseconds
ITERATION_OVERHEAD_MS = 1.0
#: share of GPU memory the weights may take before we add tensor-parallel GPUs
WEIGHT_FRACTION = 0.6


@dataclass(frozen=True)
class ModelSpec:
    """The architecture numbers that decide an LLM's FLOPs and KV bytes."""

    name: str
    params: float
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes


@dataclass(frozen=True)
class GPUSpec:
    """A GPU type's datasheet numbers (dense bf16, HBM and PCIe bandwidth)."""

    name: str
    memory_gb: float
    bf16_tflops: float
    hbm_gbs: float
    pcie_gbs: float


@lru_cache(maxsize=1)
def _load_specs() -> tuple[dict[str, ModelSpec], dict[str, GPUSpec]]:
    text = resources.files("schedlab.llm").joinpath("specs.toml").read_text()
    data = tomllib.loads(text)
    models = {k: ModelSpec(name=k, **v) for k, v in data["models"].items()}
    gpus = {k: GPUSpec(name=k, **v) for k, v in data["gpus"].items()}
    return models, gpus


def model_names() -> list[str]:
    return sorted(_load_specs()[0])


def gpu_names() -> list[str]:
    return sorted(_load_specs()[1])


def get_model(name: str) -> ModelSpec:
    models = _load_specs()[0]
    if name.lower() not in models:
        raise UnknownNameError("model", name, sorted(models))
    return models[name.lower()]


def get_gpu(name: str) -> GPUSpec:
    gpus = _load_specs()[1]
    if name.lower() not in gpus:
        raise UnknownNameError("gpu", name, sorted(gpus))
    return gpus[name.lower()]


def default_tp(model: ModelSpec, gpu: GPUSpec) -> int:
    """Smallest power-of-two GPU count whose share of the weights fits in WEIGHT_FRACTION."""
    tp = 1
    while model.weight_bytes / tp > WEIGHT_FRACTION * gpu.memory_gb * 1e9:
        tp *= 2
        if tp > 64:
            raise ConfigError(f"{model.name} does not fit on {gpu.name} even with tp=64")
    return tp


@dataclass(frozen=True)
class CostModel:
    """Prefill/decode/transfer times (milliseconds) for ``model`` on ``tp`` × ``gpu``."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int
    prefill_a: float
    prefill_b: float
    prefill_c: float
    decode_a: float
    decode_b: float
    decode_c: float

    @classmethod
    def from_specs(
        cls,
        model: str | ModelSpec,
        gpu: str | GPUSpec,
        tp: int | None = None,
        compute_efficiency: float = COMPUTE_EFFICIENCY,
        memory_efficiency: float = MEMORY_EFFICIENCY,
        overhead_ms: float = ITERATION_OVERHEAD_MS,
    ) -> CostModel:
        """Derive every coefficient from the roofline (see the module docstring)."""
        m = get_model(model) if isinstance(model, str) else model
        g = get_gpu(gpu) if isinstance(gpu, str) else gpu
        if not 0 < compute_efficiency <= 1 or not 0 < memory_efficiency <= 1:
            raise ConfigError("efficiencies must be in (0, 1]", field="efficiency")
        tp = tp or default_tp(m, g)
        if tp < 1:
            raise ConfigError("tp must be >= 1", field="tp")
        flops = g.bf16_tflops * 1e12 * compute_efficiency * tp  # FLOP/s
        hbm = g.hbm_gbs * 1e9 * memory_efficiency * tp  # B/s
        weight_ms = m.weight_bytes / hbm * 1e3
        return cls(
            model=m, gpu=g, tp=tp,
            prefill_a=overhead_ms + weight_ms,
            prefill_b=2 * m.params / flops * 1e3,
            prefill_c=2 * m.layers * m.hidden / flops * 1e3,
            decode_a=overhead_ms + weight_ms,
            decode_b=m.kv_bytes_per_token / hbm * 1e3,
            decode_c=2 * m.params / flops * 1e3,
        )

    @property
    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token

    def kv_capacity_tokens(self, memory_fraction: float = 0.9) -> int:
        """Tokens of KV that fit in ``memory_fraction`` of GPU memory after the weights."""
        free = memory_fraction * self.gpu.memory_gb * 1e9 * self.tp - self.model.weight_bytes
        if free <= 0:
            raise ConfigError(f"no KV memory left for {self.model.name} on {self.gpu.name}")
        return int(free // self.kv_bytes_per_token)

    def prefill_ms(self, tokens: float | np.ndarray | list[int], squares: float | None = None
                   ) -> float:
        """Time to prefill a batch whose requests compute ``tokens`` new tokens each.

        ``squares`` (Σ tokens²) may be passed precomputed by an engine that keeps running sums.
        """
        if squares is None:
            arr = np.asarray(tokens, dtype=float)
            total, squares = float(arr.sum()), float(np.dot(arr.ravel(), arr.ravel()))
        else:
            total = float(tokens)
        if total <= 0:
            return 0.0
        return self.prefill_a + self.prefill_b * total + self.prefill_c * squares

    def decode_ms(self, context_tokens: float, batch: int) -> float:
        """Time of one decode iteration over ``batch`` sequences holding ``context_tokens``."""
        if batch <= 0:
            return 0.0
        return self.decode_a + self.decode_b * context_tokens + self.decode_c * batch

    def iteration_ms(self, prefill_tokens: float, prefill_squares: float,
                     context_tokens: float, batch: int) -> float:
        """A mixed (chunked-prefill style) iteration: one weight pass, both kinds of work."""
        if prefill_tokens <= 0 and batch <= 0:
            return 0.0
        return (self.decode_a + self.prefill_b * prefill_tokens
                + self.prefill_c * prefill_squares + self.decode_b * context_tokens
                + self.decode_c * batch)

    def transfer_ms(self, nbytes: float) -> float:
        """Host<->GPU copy time over PCIe (one direction, no overlap)."""
        if nbytes < 0:
            raise BadInputError("bytes must be non-negative", field="nbytes")
        return nbytes / (self.gpu.pcie_gbs * 1e9 * self.tp) * 1e3

    def describe(self) -> dict[str, float | str | int]:
        return dict(model=self.model.name, gpu=self.gpu.name, tp=self.tp,
                    kv_bytes_per_token=self.kv_bytes_per_token,
                    prefill_a=self.prefill_a, prefill_b=self.prefill_b,
                    prefill_c=self.prefill_c, decode_a=self.decode_a,
                    decode_b=self.decode_b, decode_c=self.decode_c)


def tokens_to_blocks(tokens: int, block_tokens: int) -> int:
    return max(1, math.ceil(tokens / block_tokens)) if tokens > 0 else 0
