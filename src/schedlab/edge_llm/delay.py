"""The fine-grained delay model: OFDMA radio, KV-cache backhaul and GPU planning chunks.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md), delay model. Each term is a closed form the scheduler can
evaluate in microseconds and the simulator executes exactly:

* radio: user k with b_k resource blocks of B Hz at SNR_k gets r_k = b_k·B·log2(1 + SNR_k);
  prompt bits go up, tokens come down, each direction adds a fixed air-interface latency;
* backhaul: a KV cache of 2·layers·kv_heads·head_dim·dtype bytes per token is serialised over
  the cloud-to-edge link (``transfer_ms`` + bytes/bandwidth, FIFO, so overlapping transfers
  queue);
* GPU: a prefill runs in planning chunks of ``chunk_tokens``, each one step of
  schedlab.llm's calibrated cost model (per GEMM max(compute, weight traffic), fitted to
  Vidur's profiled operators), its tokens padded to the tile's M; the chosen kernel's
  relative efficiency and the SM share divide the compute side only. Decode iterations are
  the same step at batch size plus the KV reads of the context.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.edge_llm.config import RB_HZ, check_snr
from schedlab.llm.costmodel import CostModel


def spectral_efficiency(snr_db: float) -> float:
    """Shannon bound log2(1 + SNR) in bit/s/Hz for an SNR in dB."""
    return math.log2(1.0 + 10.0 ** (snr_db / 10.0))


def rate_bps(rbs: float, snr_db: float, rb_hz: float = RB_HZ) -> float:
    """r = b·B·log2(1 + SNR): the rate of ``rbs`` resource blocks (may be fractional when
    users time-share a block)."""
    if rbs <= 0:
        raise BadInputError(f"needs a positive number of resource blocks, got {rbs}", field="rbs")
    check_snr(snr_db)
    return rbs * rb_hz * spectral_efficiency(snr_db)


def allocate_rbs(n_rbs: int, bits: np.ndarray, snr_db: np.ndarray) -> np.ndarray:
    """Split ``n_rbs`` OFDMA blocks among the users of one window so transfers end together.

    Min-max completion time wants b_k proportional to bits_k / log2(1+SNR_k). With at least as
    many blocks as users every user gets an integer number >= 1 (largest-remainder rounding);
    with more users than blocks they time-share, which is a fractional allocation.
    """
    bits = np.asarray(bits, dtype=float)
    snr = np.asarray(snr_db, dtype=float)
    n = bits.size
    if n == 0:
        return np.zeros(0)
    weight = np.maximum(bits, 1.0) / np.log2(1.0 + 10.0 ** (snr / 10.0))
    ideal = n_rbs * weight / weight.sum()
    if n > n_rbs:
        return ideal
    shares = np.maximum(1, np.floor(ideal)).astype(int)
    while shares.sum() > n_rbs:  # the >= 1 floor can overshoot; take from the largest
        shares[int(np.argmax(shares))] -= 1
    left = n_rbs - int(shares.sum())
    if left > 0:
        order = np.argsort(-(ideal - shares), kind="stable")
        shares[order[:left]] += 1
    return shares.astype(float)


def kv_bytes(kv_bytes_per_token: int, tokens: int) -> int:
    """KV cache bytes = 2·layers·kv_heads·head_dim·dtype bytes (per token) × tokens."""
    return kv_bytes_per_token * tokens


class Link:
    """A FIFO serial link: a transfer occupies it for setup + bytes/bandwidth."""

    def __init__(self, gbps: float, transfer_ms: float) -> None:
        self.bytes_per_s = gbps * 1e9 / 8.0
        self.setup_s = transfer_ms / 1e3
        self.free_at = 0.0
        self.busy_s = 0.0

    def duration(self, nbytes: float) -> float:
        return self.setup_s + nbytes / self.bytes_per_s

    def transfer(self, ready: float, nbytes: float) -> tuple[float, float]:
        """Queue a transfer that can start at ``ready``; return (start, end)."""
        start = max(ready, self.free_at)
        end = start + self.duration(nbytes)
        self.free_at = end
        self.busy_s += end - start
        return start, end


class GpuTiming:
    """Prefill/decode step times of one model on one GPU with an SM budget (seconds).

    Every step is schedlab.llm's calibrated cost (``CostModel.dense_ms``: per GEMM the maximum
    of compute and weight traffic, fitted to Vidur's profiled operators) scaled for the SMs it
    holds: the compute side slows by 1/(share · kernel efficiency), the weight/KV traffic only
    once the share falls below ``decode_saturation`` (HBM saturates with a fraction of the
    SMs). The two are combined with a max, never added: a step is bound by one or the other.
    """

    def __init__(
        self, cost: CostModel, sm_budget: float, chunk_tokens: int, decode_saturation: float
    ) -> None:
        self.cost = cost
        self.budget = sm_budget
        self.chunk = chunk_tokens
        self.saturation = decode_saturation
        cal, gpu, m = cost.calibration, cost.gpu, cost.model
        from schedlab.edge_llm.calibration import correction_for

        # per-(GPU, model) step correction fitted to Vidur's tp=1 profiles (calibration.py)
        self.correction = correction_for(gpu.name, m.name) if cost.tp == 1 else None
        self._dense: dict[tuple[int, int], float] = {}
        # ridge point of a GEMM (tokens where 2KNT/(eff·peak) = KN·dtype/(eff_hbm·HBM))
        self.ridge = (
            m.dtype_bytes
            * cal.gemm_efficiency
            * gpu.bf16_tflops
            * 1e12
            / (2.0 * cal.hbm_efficiency * gpu.hbm_gbs * 1e9)
        )

    def slowdown(self, tokens: float, share: float, efficiency: float = 1.0) -> float:
        """Factor on the full-GPU dense time of a ``tokens``-token step run on ``share`` of the
        GPU's SMs (after the budget) with a kernel of relative ``efficiency``."""
        x = tokens / self.ridge
        sms = self.budget * share
        memory = 1.0 / min(1.0, sms / self.saturation)
        return max(x / (efficiency * sms), memory) / max(x, 1.0)

    def step_ms(
        self, tokens: float, seqs: int, share: float = 1.0, efficiency: float = 1.0
    ) -> float:
        """Dense part (weights, norms, LM head) of one step, milliseconds, incl. overhead."""
        return self.cost.overhead_ms + self.dense_ms(tokens, seqs) * self.slowdown(
            tokens, share, efficiency
        )

    def dense_ms(self, tokens: float, seqs: int) -> float:
        """schedlab.llm's dense step with the profiled layers' correction applied."""
        key = (int(math.ceil(tokens)), int(seqs))
        hit = self._dense.get(key)
        if hit is not None:
            return hit
        value = self.cost.dense_ms(tokens, seqs)
        if self.correction is not None:
            layers = self.cost.model.layers * (
                self.cost.layer_linear_ms(tokens) + self.cost.layer_norm_ms(tokens)
            )
            value += layers * (self.correction.factor(tokens) - 1.0)
        if len(self._dense) < 100_000:
            self._dense[key] = value
        return value

    def prefill_s(
        self, lengths: list[int], pad_to: int, tile_m: int, efficiency: float, speed: float = 1.0
    ) -> float:
        """A padded batch: every prompt padded to ``pad_to``; the GEMM M-dimension of each
        planning chunk rounded up to ``tile_m``; each chunk is one step (re-reads the weights)."""
        n = len(lengths)
        if n == 0:
            return 0.0
        total = n * pad_to
        chunks = max(1, math.ceil(total / self.chunk))
        ms = 0.0
        for c in range(chunks):
            rows = min(self.chunk, total - c * self.chunk)
            padded = math.ceil(rows / tile_m) * tile_m
            ms += self.step_ms(padded, 1, 1.0, efficiency)
        attention = self.cost.prefill_attention_ms(total, n * pad_to * pad_to)
        ms += attention / (efficiency * self.budget)
        return ms / 1e3 / speed

    def chunk_s(self, tile_m: int, efficiency: float) -> float:
        """One full planning chunk: the longest a time-sliced decode iteration can stall."""
        rows = math.ceil(self.chunk / tile_m) * tile_m
        return self.step_ms(rows, 1, 1.0, efficiency) / 1e3

    def decode_iter_s(self, batch: int, context_tokens: float, decode_share: float = 1.0) -> float:
        """One decode iteration: weight traffic (or compute for large batches) plus reading
        every context token's KV, both at the SM share decode holds."""
        batch = max(1, batch)
        memory = 1.0 / min(1.0, self.budget * decode_share / self.saturation)
        ms = (
            self.step_ms(batch, batch, decode_share)
            + self.cost.decode_attention_ms(context_tokens) * memory
        )
        return ms / 1e3


class Lane:
    """A GPU's prefill lane (FIFO) with a record of busy intervals, for duty estimates."""

    def __init__(self) -> None:
        self.free_at = 0.0
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.busy_s = 0.0

    def run(self, ready: float, duration: float) -> tuple[float, float]:
        start = max(ready, self.free_at)
        end = start + duration
        self.free_at = end
        self.starts.append(start)
        self.ends.append(end)
        self.busy_s += duration
        return start, end

    def recent_starts(self, t: float, horizon: float) -> int:
        """Prefill batches started in [t - horizon, t]."""
        return bisect_right(self.starts, t) - bisect_left(self.starts, t - horizon)

    def duty(self, t: float, horizon: float) -> float:
        """Share of [t - horizon, t] this lane was busy: the recent prefill load, which is what
        a decode joining at ``t`` will keep interleaving with (prefills booked later in the
        replay are not known yet, so the past window is the causal estimate)."""
        lo = t - horizon
        i = bisect_right(self.ends, lo)
        busy = 0.0
        while i < len(self.starts) and self.starts[i] < t:
            busy += min(self.ends[i], t) - max(self.starts[i], lo)
            i += 1
        return min(1.0, busy / horizon)


class DecodePool:
    """Continuous-batching decode on one GPU, kept as sorted join and finish times."""

    def __init__(self, max_batch: int) -> None:
        self.joins: list[float] = []
        self.finishes: list[float] = []
        self.context_ewma = 0.0
        self.max_batch = max(1, max_batch)
        self.tokens = 0

    def active(self, t: float) -> int:
        return bisect_right(self.joins, t) - bisect_right(self.finishes, t)

    def recent_joins(self, t: float, horizon: float) -> int:
        """Sequences that joined the batch in [t - horizon, t]."""
        return bisect_right(self.joins, t) - bisect_left(self.joins, t - horizon)

    def mean_context(self) -> float:
        """Recent mean context per sequence (EWMA over joins, ~ the last 32)."""
        return self.context_ewma

    def admit_time(self, t: float) -> float:
        """Earliest time >= t with a free batch slot (the KV memory bound)."""
        over = self.active(t) - self.max_batch + 1
        if over <= 0:
            return t
        i = bisect_right(self.finishes, t) + over - 1
        return self.finishes[min(i, len(self.finishes) - 1)]

    def add(self, join: float, finish: float, context: float, tokens: int) -> None:
        insort(self.joins, join)
        self.finishes.insert(bisect_left(self.finishes, finish), finish)
        first = len(self.joins) == 1
        self.context_ewma = context if first else 0.97 * self.context_ewma + 0.03 * context
        self.tokens += tokens
