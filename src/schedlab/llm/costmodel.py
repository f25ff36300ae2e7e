"""Iteration-time cost model for one LLM on ``tp`` GPUs: a roofline calibrated on Vidur's profiles.

Every iteration (prefill, decode or a mixed chunked-prefill batch) of ``T`` tokens over ``S``
sequences costs, in milliseconds::

    overhead + layers · (linear(T) + norms(T) + 2 · all_reduce(T · hidden · 2 B))
             + lm_head(S) + attention

* **linear(T)**: the QKV, output, gate+up and down projections of one layer, each a roofline
  ``launch + max(weight bytes / (hbm_eff · HBM), FLOPs / (gemm_eff · peak))`` times a fitted
  efficiency curve over log2(T). The FLOPs are wave-quantised: ``waves · SMs · tile_m · tile_n
  · 2K`` with ``waves = ceil(ceil(T/tile_m) · ceil(N/tile_n) / SMs)`` (SM count from
  specs.toml; the tile a cuBLAS/CUTLASS CTA shape, or plain token rounding, chosen per GPU,
  projection and TP degree by ``calibrate``'s search on the profile's worst error -- a fitted
  discrete parameter, not cuBLAS's heuristics; a few tokens use a tile of the next power of
  two >= 16), or, for a
  calibration without tile widths, ``2·K·N·ceil(T/tile)·tile``. Embedding lookups do no FLOPs
  (they are a memory copy, counted with the norms); the LM head multiplies only the sampled
  positions (S).
* **norms(T)**: RMSNorms, SiLU·mul, RoPE and residual adds, memory-bound
  (``kernels · launch + bytes / (norm_eff · HBM)``).
* **all_reduce**: two per layer under tensor parallelism (after attention and after the MLP,
  Megatron-LM's split: Shoeybi et al. 2019, §3), ``alpha + 2(n-1)/n · bytes / bus_bw``: the
  bandwidth term of the ring all-reduce (a reduce-scatter and an all-gather, each moving
  ``(n-1)/n`` of the message per GPU; Patarasuk & Yuan, "Bandwidth optimal all-reduce
  algorithms for clusters of workstations", JPDC 69(2), 2009; Thakur, Rabenseifner & Gropp,
  "Optimization of collective communication operations in MPICH", IJHPCA 19(1), 2005), with
  ``bus_bw`` in NCCL's sense (nccl-tests' PERFORMANCE.md: busBw = algBw · 2(n-1)/n, the
  per-link rate that is independent of n) and ``alpha`` a fitted latency; both fitted per GPU
  count to Vidur's NCCL profile. Each GPU runs its shard of every GEMM (``N/tp`` columns for
  QKV and gate/up, ``K/tp`` rows for the output and down projections) and then waits for the
  all-reduce: ``split_ms`` gives the per-GPU compute and communication parts.
* **attention** -- *analytic*, not calibrated (Vidur's attention profiles are not in our copy):
  FlashAttention-style prefill does ``4 · heads · head_dim · Σt²/2`` FLOPs per layer (causal) at
  ``ATTENTION_EFFICIENCY`` of peak (FlashAttention-2, Dao 2023, reports 50-73 % of peak for its
  forward pass on A100; we take the low end), or reads/writes Q, K, V, O at HBM speed if that is
  longer; decode attention reads every context token's KV once at the fitted HBM efficiency.

The linear, norm and all-reduce coefficients are fitted to Vidur's profiled operator timings
(Agrawal et al., MLSys'24; ``schedlab.llm.calibrate``) and stored with their provenance in
``calibration.toml``: A100-80GB, H100 and A40 from their own profiles, A800/H200/A6000/A10G
borrow the profiled GPU of the same architecture (their own datasheet peaks and bandwidths).
The fit's error tables are in docs/systems/faircache.md.

The DistServe-form coefficients (Zhong et al., OSDI'24, §4) ``prefill = a + b·Σt + c·Σt²``,
``decode = a + b·Σctx + c·batch`` are kept as a linearisation for callers that want closed
forms: ``a`` is the 1-token iteration (weight-read floor plus launches), ``b``/``c`` the
compute-bound marginal costs. ``prefill_ms``/``decode_ms``/``iteration_ms`` use the roofline.

A host<->GPU transfer of n bytes takes n / (PCIe GB/s) (no overlap with compute). The default
``tp`` is the smallest power of two whose weights fit in 60% of GPU memory.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import numpy as np

from schedlab.core.errors import BadInputError, ConfigError, UnknownNameError

#: an uncalibrated roofline's fractions of peak (used only when asked for, or for a GPUSpec
#: that has no calibration); typical prefill MFU 40-60%, decode HBM 70-85%
COMPUTE_EFFICIENCY = 0.5
MEMORY_EFFICIENCY = 0.8
#: fixed per-iteration overhead (scheduler, sampling, Python), milliseconds; not in Vidur's
#: operator profiles, an assumption
ITERATION_OVERHEAD_MS = 1.0
#: share of GPU memory the weights may take before we add tensor-parallel GPUs
WEIGHT_FRACTION = 0.6
#: analytic FlashAttention-style prefill attention: fraction of bf16 peak (FlashAttention-2
#: reports 50-73% forward on A100; the low end) -- stated, not fitted
ATTENTION_EFFICIENCY = 0.5
#: tokens over which the linear/norm terms are made non-decreasing by a running maximum
MONOTONE_TABLE = 8192
#: all-reduce over PCIe for GPUs without an NVLink profile: an assumed latency, PCIe bandwidth
PCIE_ALLREDUCE_ALPHA_US = 20.0


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
    ffn: int = 0  # MLP intermediate size (gated: gate+up are 2·ffn wide); 0 = from params
    vocab: int = 0
    max_context: int = 0  # max_position_embeddings (0 = unknown: no check)

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def ffn_size(self) -> float:
        if self.ffn:
            return float(self.ffn)
        attn = self.hidden * (2 * self.heads + 2 * self.kv_heads) * self.head_dim
        per_layer = (self.params - 2 * self.vocab * self.hidden) / self.layers
        return max(1.0, (per_layer - attn) / (3 * self.hidden))


@dataclass(frozen=True)
class GPUSpec:
    """A GPU type's datasheet numbers (dense bf16, HBM and PCIe bandwidth)."""

    name: str
    memory_gb: float
    bf16_tflops: float
    hbm_gbs: float
    pcie_gbs: float
    sms: int = 0  # streaming multiprocessors (GEMM wave quantisation; 0 = unknown)


@dataclass(frozen=True)
class Calibration:
    """Fitted (or, for ``source='roofline'``, assumed) efficiencies of one GPU type."""

    source: str
    gemm_efficiency: float
    hbm_efficiency: float
    gemm_launch_us: float = 0.0
    tile_tokens: int = 1  # GEMM tile height over tokens (M)
    tile_n: int = 0  # GEMM tile width over output features (N); 0 = no wave quantisation
    # per TP degree, per projection (QKV, output, gate+up, down) its (tile_m, tile_n);
    # empty = tile_tokens/tile_n for every GEMM
    gemm_tiles: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = ()
    curve_log: tuple[tuple[int, tuple[float, ...]], ...] = ()  # per TP degree
    norm_efficiency: float = MEMORY_EFFICIENCY  # embedding copy; norms without a fit
    norm_ops: tuple[tuple[str, float, float], ...] = ()  # (op, launch_us, fraction of HBM)
    norm_curve_log: tuple[tuple[int, tuple[float, ...]], ...] = ()
    knot_step: float = 0.25  # octaves between the curves' knots (from log2(tokens) = 0)

    def knots(self, tp: int, norm: bool = False) -> tuple[float, ...]:
        """The curve fitted for ``tp`` (the nearest profiled TP degree when not profiled)."""
        curves = self.norm_curve_log if norm else self.curve_log
        if not curves:
            return ()
        return min(curves, key=lambda c: (abs(math.log2(c[0]) - math.log2(tp)), -c[0]))[1]

    allreduce: tuple[tuple[int, float, float], ...] = ()  # (workers, alpha_us, bus_gbs)

    def curve(self, tokens: np.ndarray, knots: tuple[float, ...]) -> np.ndarray:
        """The fitted efficiency multiplier at ``tokens`` (knots every ``knot_step`` octaves
        from 1 token, linear in log2(tokens); clamped beyond the last knot)."""
        if not knots:
            return np.ones_like(tokens)
        grid = self.knot_step * np.arange(len(knots))
        return np.exp(np.interp(np.log2(np.maximum(tokens, 1.0)), grid, knots))


def gemm_roofline_ms(
    k_dim,
    n_dim,
    tokens,
    peak_flops: float,
    hbm_bytes_s: float,
    gemm_eff: float,
    hbm_eff: float,
    launch_us: float,
    tile_m: int,
    tile_n: int = 0,
    sms: int = 0,
    dtype_bytes: int = 2,
) -> np.ndarray:
    """``launch + max(weight bytes / (hbm_eff·HBM), GEMM FLOPs / (gemm_eff·peak))`` in ms, the
    FLOPs wave-quantised when ``tile_n`` and ``sms`` are given (see ``CostModel._gemm_ms``)."""
    tokens = np.asarray(tokens, dtype=float)
    k_dim = np.asarray(k_dim, dtype=float)
    n_dim = np.asarray(n_dim, dtype=float)
    if tile_n and sms:
        # small batches run on kernels whose tile height fits them (cuBLAS's heuristics pick
        # 16-64-row tiles, or GEMV, for a few tokens): the height is the next power of two of
        # the token count, at least 16, at most the GPU's tile -- else a 1-token decode
        # would pay a full 128-row tile of FLOPs and look compute-bound
        height = np.minimum(
            tile_m, np.maximum(16.0, 2.0 ** np.ceil(np.log2(np.maximum(tokens, 1))))
        )
        m_tiles = np.ceil(tokens / height)
        waves = np.ceil(m_tiles * np.ceil(n_dim / tile_n) / sms)
        flops = 2.0 * k_dim * waves * sms * height * tile_n
    else:
        flops = 2.0 * k_dim * n_dim * np.ceil(tokens / tile_m) * tile_m
    compute = flops / (gemm_eff * peak_flops)
    traffic = k_dim * n_dim * dtype_bytes / (hbm_eff * hbm_bytes_s)
    return 1e3 * (launch_us * 1e-6 + np.maximum(compute, traffic))


@lru_cache(maxsize=1)
def _load_specs() -> tuple[dict[str, ModelSpec], dict[str, GPUSpec]]:
    text = resources.files("schedlab.llm").joinpath("specs.toml").read_text()
    data = tomllib.loads(text)
    models = {k: ModelSpec(name=k, **v) for k, v in data["models"].items()}
    gpus = {k: GPUSpec(name=k, **v) for k, v in data["gpus"].items()}
    return models, gpus


@lru_cache(maxsize=1)
def _load_calibration() -> dict[str, Calibration]:
    path = resources.files("schedlab.llm").joinpath("calibration.toml")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"calibration.toml: {exc}", field="calibration") from exc
    out: dict[str, Calibration] = {}
    for gpu, row in data.get("gpus", {}).items():
        if "gemm_efficiency" not in row:
            continue
        out[gpu] = calibration_from_row(gpu, row)
    for gpu, donor in data.get("borrow", {}).items():
        if donor in out and gpu not in out:
            base = out[donor]
            out[gpu] = Calibration(**{**base.__dict__, "source": f"borrowed from {donor}"})
    return out


def calibration_from_row(gpu: str, row: dict) -> Calibration:
    """A Calibration from one ``[gpus.X]`` table of calibration.toml (or a fit's dict)."""
    ar = tuple(
        sorted((int(k), float(v[0]), float(v[1])) for k, v in row.get("allreduce", {}).items())
    )
    return Calibration(
        source=f"vidur:{row.get('profiled', gpu)}",
        gemm_efficiency=row["gemm_efficiency"],
        hbm_efficiency=row["hbm_efficiency"],
        gemm_launch_us=row["gemm_launch_us"],
        tile_tokens=int(row["tile_tokens"]),
        tile_n=int(row.get("tile_n", 0)),
        gemm_tiles=tuple(
            sorted(
                (int(tp), tuple((int(t[0]), int(t[1])) for t in tiles))
                for tp, tiles in row.get("gemm_tiles", {}).items()
            )
        ),
        curve_log=_curves(row.get("curve_log", {})),
        norm_ops=tuple((op, float(v[0]), float(v[1])) for op, v in row.get("norm_ops", {}).items()),
        norm_curve_log=_curves(row.get("norm_curve_log", {})),
        knot_step=float(row.get("knot_step", 0.25)),
        norm_efficiency=float(
            np.median([v[1] for v in row.get("norm_ops", {}).values()] or [MEMORY_EFFICIENCY])
        ),
        allreduce=ar,
    )


def _curves(table: dict) -> tuple[tuple[int, tuple[float, ...]], ...]:
    return tuple(sorted((int(k), tuple(float(x) for x in v)) for k, v in table.items()))


def calibration_for(gpu: str) -> Calibration | None:
    """The stored calibration of a GPU name (own profile or borrowed), or None."""
    return _load_calibration().get(gpu.lower())


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
    calibration: Calibration = field(default=None, compare=False)  # type: ignore[assignment]
    overhead_ms: float = ITERATION_OVERHEAD_MS
    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_specs(
        cls,
        model: str | ModelSpec,
        gpu: str | GPUSpec,
        tp: int | None = None,
        compute_efficiency: float | None = None,
        memory_efficiency: float | None = None,
        overhead_ms: float = ITERATION_OVERHEAD_MS,
        calibration: Calibration | None = None,
    ) -> CostModel:
        """The calibrated roofline; explicit efficiencies give an uncalibrated one instead
        (``calibration`` overrides the stored fit, e.g. one fitted on a subset of a profile)."""
        m = get_model(model) if isinstance(model, str) else model
        g = get_gpu(gpu) if isinstance(gpu, str) else gpu
        for name, value in (
            ("compute_efficiency", compute_efficiency),
            ("memory_efficiency", memory_efficiency),
        ):
            if value is not None and not 0 < value <= 1:
                raise ConfigError("efficiencies must be in (0, 1]", field=name)
        if overhead_ms < 0:
            raise ConfigError("must be >= 0", field="overhead_ms")
        tp = tp or default_tp(m, g)
        if tp < 1:
            raise ConfigError("tp must be >= 1", field="tp")
        cal = calibration if calibration is not None else calibration_for(g.name)
        if cal is None or compute_efficiency is not None or memory_efficiency is not None:
            cal = Calibration(
                source="roofline",
                gemm_efficiency=compute_efficiency or COMPUTE_EFFICIENCY,
                hbm_efficiency=memory_efficiency or MEMORY_EFFICIENCY,
                norm_efficiency=memory_efficiency or MEMORY_EFFICIENCY,
            )
        cost = cls(
            model=m,
            gpu=g,
            tp=tp,
            prefill_a=0.0,
            prefill_b=0.0,
            prefill_c=0.0,
            decode_a=0.0,
            decode_b=0.0,
            decode_c=0.0,
            calibration=cal,
            overhead_ms=overhead_ms,
        )
        floor = overhead_ms + cost.dense_ms(1, 1)
        slope = (cost.dense_ms(4096, 1) - cost.dense_ms(2048, 1)) / 2048
        per_seq = (cost.dense_ms(4096, 4096) - cost.dense_ms(2048, 2048)) / 2048
        coeffs = dict(
            prefill_a=floor,
            prefill_b=slope,
            prefill_c=cost._attn_ms_per_square(),
            decode_a=floor,
            decode_b=cost._kv_ms_per_token(),
            decode_c=per_seq,
        )
        for key, value in coeffs.items():
            object.__setattr__(cost, key, value)
        return cost

    # --- the roofline terms ------------------------------------------------------------------
    @property
    def _peak(self) -> float:
        return self.gpu.bf16_tflops * 1e12

    @property
    def _hbm(self) -> float:
        return self.gpu.hbm_gbs * 1e9

    def _gemms(self) -> list[tuple[float, float]]:
        m, tp = self.model, self.tp
        h, hd, f = m.hidden, m.head_dim, m.ffn_size
        return [
            (h, (m.heads + 2 * m.kv_heads) * hd / tp),
            (m.heads * hd / tp, h),
            (h, 2 * f / tp),
            (f / tp, h),
        ]

    def _gemm_ms(
        self, k_dim: float, n_dim: float, tokens: np.ndarray, tile: tuple[int, int] | None = None
    ) -> np.ndarray:
        """The per-GEMM roofline over an array of token counts (before the curve).

        With a tile width and the GPU's SM count the compute side is wave-quantised: the
        output is cut into ``ceil(T/tile_m) · ceil(N/tile_n)`` tiles, the SMs run them in
        ``waves = ceil(tiles / SMs)`` rounds, and every round costs a full tile's FLOPs on every
        SM (the staircase of Vidur's profiles: e.g. H100 Llama-2-7B gate/up at 640 vs 648
        tokens). Without them, the token count is rounded up to the tile height only."""
        cal = self.calibration
        tile_m, tile_n = tile or (cal.tile_tokens, cal.tile_n)
        return gemm_roofline_ms(
            k_dim,
            n_dim,
            tokens,
            self._peak,
            self._hbm,
            cal.gemm_efficiency,
            cal.hbm_efficiency,
            cal.gemm_launch_us,
            tile_m,
            tile_n,
            self.gpu.sms,
            self.model.dtype_bytes,
        )

    def _raw_linear_ms(self, tokens: np.ndarray) -> np.ndarray:
        cal = self.calibration
        tiles = (None,) * 4
        if cal.gemm_tiles:  # the nearest profiled TP degree's
            tiles = min(
                cal.gemm_tiles, key=lambda c: (abs(math.log2(c[0]) - math.log2(self.tp)), -c[0])
            )[1]
        base = sum(
            self._gemm_ms(k, n, tokens, tile)
            for (k, n), tile in zip(self._gemms(), tiles, strict=True)
        )
        return base * cal.curve(tokens, cal.knots(self.tp))

    def _monotone(self, key: str, raw, tokens: float) -> float:
        """``raw(tokens)`` made non-decreasing in tokens by a running maximum over 1..TABLE
        tokens (the profiles are not monotone, e.g. 2 tokens run faster than 1; a scheduler's
        cost model must not make a bigger batch cheaper). Beyond the table the curve is flat and
        the roofline grows, so the raw value is used (never below the table's end)."""
        table = self._memo.get(key)
        if table is None:
            values = raw(np.arange(1, MONOTONE_TABLE + 1, dtype=float))
            table = np.maximum.accumulate(values)
            self._memo[key] = table
        t = int(math.ceil(tokens))
        if t <= MONOTONE_TABLE:
            return float(table[t - 1])
        return max(float(table[-1]), float(raw(np.array([float(tokens)]))[0]))

    def layer_linear_ms(self, tokens: float) -> float:
        """One layer's four projections for a batch of ``tokens`` tokens (per GPU)."""
        if tokens <= 0:
            return 0.0
        return self._monotone("linear", self._raw_linear_ms, tokens)

    def _norm_bytes(self, op: str) -> float:
        m, tp = self.model, self.tp
        per_token = {
            "input_layernorm": 2 * m.hidden,
            "post_attention_layernorm": 2 * m.hidden,
            "mlp_act": 3 * m.ffn_size / tp,
            "attn_rope": 2 * (m.heads + m.kv_heads) * m.head_dim / tp,
            "add": 3 * m.hidden,
        }[op]
        return per_token * m.dtype_bytes

    def layer_norm_ms(self, tokens: float) -> float:
        """One layer's 2 RMSNorms, SiLU·mul, RoPE and 2 residual adds (memory-bound kernels)."""
        if tokens <= 0:
            return 0.0
        return self._monotone("norm", self._raw_norm_ms, tokens)

    def _raw_norm_ms(self, tokens: np.ndarray) -> np.ndarray:
        cal = self.calibration
        ops = cal.norm_ops or tuple(
            (op, 0.0, cal.norm_efficiency)
            for op in ("input_layernorm", "post_attention_layernorm", "mlp_act", "attn_rope", "add")
        )
        total = 0.0
        for op, launch_us, eff in ops:
            count = 2 if op == "add" else 1
            total += count * (
                launch_us * 1e-3 + 1e3 * self._norm_bytes(op) * tokens / (eff * self._hbm)
            )
        return total * cal.curve(tokens, cal.knots(self.tp, norm=True))

    def allreduce_ms(self, nbytes: float) -> float:
        """One all-reduce of ``nbytes`` across the ``tp`` GPUs (0 without tensor parallelism)."""
        if self.tp <= 1 or nbytes <= 0:
            return 0.0
        alpha_us, bus_gbs = PCIE_ALLREDUCE_ALPHA_US, self.gpu.pcie_gbs
        fits = self.calibration.allreduce
        if fits:
            # the fitted GPU count nearest to tp (beyond the profile: the largest one)
            _, alpha_us, bus_gbs = min(fits, key=lambda f: (abs(f[0] - self.tp), -f[0]))
        ring = 2.0 * (self.tp - 1) / self.tp * nbytes
        return alpha_us * 1e-3 + ring / (bus_gbs * 1e9) * 1e3

    def dense_ms(self, tokens: float, seqs: int) -> float:
        """Everything but attention and the fixed overhead: ``tokens`` through every layer
        (linear, norms, two all-reduces per layer under TP), the embedding copy, and the LM
        head on ``seqs`` sampled positions."""
        key = (int(math.ceil(tokens)), int(seqs))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if tokens <= 0:
            return 0.0
        m = self.model
        act_bytes = tokens * m.hidden * m.dtype_bytes
        per_layer = (
            self.layer_linear_ms(tokens)
            + self.layer_norm_ms(tokens)
            + 2 * self.allreduce_ms(act_bytes)
        )
        cal = self.calibration
        embed = 2 * act_bytes / (cal.norm_efficiency * self._hbm) * 1e3  # a gather: no FLOPs
        head = 0.0
        if m.vocab and seqs > 0:
            head = self._monotone("head", self._raw_head_ms, seqs)
        value = m.layers * per_layer + embed + head
        if len(self._memo) < 200_000:
            self._memo[key] = value
        return value

    def split_ms(self, tokens: float, seqs: int) -> dict[str, float]:
        """``dense_ms`` split per GPU: ``compute`` (each GPU's GEMM shards, norms, embedding,
        LM head shard), ``allreduce`` (2 per layer, the ring model) and the communication
        share. Every GPU of the group does all of it in lockstep, so a step's time is the sum
        and a GPU-second of the group is worth ``tp`` GPU-seconds of hardware."""
        if tokens <= 0:
            return dict(compute=0.0, allreduce=0.0, comm_share=0.0)
        m = self.model
        comm = 2 * m.layers * self.allreduce_ms(tokens * m.hidden * m.dtype_bytes)
        total = self.dense_ms(tokens, seqs)
        return dict(compute=total - comm, allreduce=comm, comm_share=comm / total)

    def _raw_head_ms(self, seqs: np.ndarray) -> np.ndarray:
        cal = self.calibration
        return self._gemm_ms(self.model.hidden, self.model.vocab / self.tp, seqs) * cal.curve(
            seqs, cal.knots(self.tp)
        )

    def _attn_ms_per_square(self) -> float:
        m = self.model
        flops = m.layers * 4 * (m.heads / self.tp) * m.head_dim / 2  # causal: half of T²
        return flops / (ATTENTION_EFFICIENCY * self._peak) * 1e3

    def _kv_ms_per_token(self) -> float:
        return (
            self.model.kv_bytes_per_token
            / self.tp
            / (self.calibration.hbm_efficiency * self._hbm)
            * 1e3
        )

    def prefill_attention_ms(self, tokens: float, squares: float) -> float:
        """Analytic FlashAttention-style prefill attention (not calibrated)."""
        if tokens <= 0:
            return 0.0
        m = self.model
        io = (
            tokens
            * (2 * m.heads + 2 * m.kv_heads)
            * m.head_dim
            / self.tp
            * m.dtype_bytes
            * m.layers
            / (self.calibration.hbm_efficiency * self._hbm)
            * 1e3
        )
        return max(self.prefill_c * squares, io)

    def decode_attention_ms(self, context_tokens: float) -> float:
        """Decode attention reads every context token's K and V once (memory-bound)."""
        return self.decode_b * max(0.0, context_tokens)

    # --- the public API ----------------------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> int:
        return self.model.kv_bytes_per_token

    def kv_capacity_tokens(self, memory_fraction: float = 0.9) -> int:
        """Tokens of KV that fit in ``memory_fraction`` of GPU memory after the weights."""
        free = memory_fraction * self.gpu.memory_gb * 1e9 * self.tp - self.model.weight_bytes
        if free <= 0:
            raise ConfigError(f"no KV memory left for {self.model.name} on {self.gpu.name}")
        return int(free // self.kv_bytes_per_token)

    def prefill_ms(
        self, tokens: float | np.ndarray | list[int], squares: float | None = None
    ) -> float:
        """Time to prefill a batch whose requests compute ``tokens`` new tokens each.

        ``squares`` (Σ tokens²) may be passed precomputed by an engine that keeps running sums
        (then ``tokens`` is the total and the batch counts as one sequence for the LM head).
        """
        if squares is None:
            arr = np.asarray(tokens, dtype=float).ravel()
            total, squares, seqs = float(arr.sum()), float(np.dot(arr, arr)), int(arr.size)
        else:
            total, seqs = float(tokens), 1
        if total <= 0:
            return 0.0
        return (
            self.overhead_ms
            + self.dense_ms(total, seqs)
            + self.prefill_attention_ms(total, squares)
        )

    def decode_ms(self, context_tokens: float, batch: int) -> float:
        """Time of one decode iteration over ``batch`` sequences holding ``context_tokens``."""
        if batch <= 0:
            return 0.0
        return (
            self.overhead_ms
            + self.dense_ms(batch, batch)
            + self.decode_attention_ms(context_tokens)
        )

    def iteration_ms(
        self,
        prefill_tokens: float,
        prefill_squares: float,
        context_tokens: float,
        batch: int,
        prefill_seqs: int = 1,
    ) -> float:
        """A mixed (chunked-prefill style) iteration: one weight pass, both kinds of work."""
        if prefill_tokens <= 0 and batch <= 0:
            return 0.0
        seqs = batch + (prefill_seqs if prefill_tokens > 0 else 0)
        return (
            self.overhead_ms
            + self.dense_ms(prefill_tokens + batch, seqs)
            + self.prefill_attention_ms(prefill_tokens, prefill_squares)
            + self.decode_attention_ms(context_tokens)
        )

    def transfer_ms(self, nbytes: float) -> float:
        """Host<->GPU copy time over PCIe (one direction, no overlap)."""
        if nbytes < 0:
            raise BadInputError("bytes must be non-negative", field="nbytes")
        return nbytes / (self.gpu.pcie_gbs * 1e9 * self.tp) * 1e3

    def describe(self) -> dict[str, float | str | int]:
        cal = self.calibration
        return dict(
            model=self.model.name,
            gpu=self.gpu.name,
            tp=self.tp,
            calibration=cal.source,
            gemm_efficiency=cal.gemm_efficiency,
            hbm_efficiency=cal.hbm_efficiency,
            attention=f"analytic (FlashAttention-style, {ATTENTION_EFFICIENCY:g} of peak)",
            kv_bytes_per_token=self.kv_bytes_per_token,
            prefill_a=self.prefill_a,
            prefill_b=self.prefill_b,
            prefill_c=self.prefill_c,
            decode_a=self.decode_a,
            decode_b=self.decode_b,
            decode_c=self.decode_c,
            allreduce_share_1_token=self.split_ms(1, 1)["comm_share"],
            allreduce_share_2048_tokens=self.split_ms(2048, 1)["comm_share"],
        )


def tokens_to_blocks(tokens: int, block_tokens: int) -> int:
    return max(1, math.ceil(tokens / block_tokens)) if tokens > 0 else 0
