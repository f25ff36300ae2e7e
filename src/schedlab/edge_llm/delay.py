"""The fine-grained delay model: OFDMA radio, KV-cache backhaul and GPU planning chunks.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md), delay model. Each term is a closed form the scheduler can
evaluate in microseconds and the simulator executes exactly:

* radio: user k with b_k resource blocks of B Hz at SNR_k gets r_k = b_k·B·log2(1 + SNR_k);
  prompt bits go up, tokens come down, each direction adds a fixed air-interface latency;
* backhaul: a KV cache of 2·layers·kv_heads·head_dim·dtype bytes per token is serialised over
  the cloud-to-edge link (``transfer_ms`` + bytes/bandwidth, FIFO, so overlapping transfers
  queue);
* GPU: a prefill runs in planning chunks of ``chunk_tokens``; each chunk re-reads the weights
  (``prefill_a`` of schedlab.llm's roofline) and computes its tokens, padded to the tile's M;
  the chosen kernel's relative efficiency divides the compute. Decode iterations are
  schedlab.llm's memory-bound ``decode_ms``.
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
    """Prefill/decode times of one model on one GPU with an SM budget (seconds)."""

    def __init__(self, cost: CostModel, sm_budget: float, chunk_tokens: int,
                 decode_saturation: float) -> None:
        self.cost = cost
        self.budget = sm_budget
        self.chunk = chunk_tokens
        self.saturation = decode_saturation

    def prefill_s(self, lengths: list[int], pad_to: int, tile_m: int, efficiency: float,
                  speed: float = 1.0) -> float:
        """A padded batch: every prompt padded to ``pad_to``; the GEMM M-dimension of each
        planning chunk rounded up to ``tile_m``."""
        n = len(lengths)
        if n == 0:
            return 0.0
        total = n * pad_to
        chunks = max(1, math.ceil(total / self.chunk))
        m_padded = 0
        for c in range(chunks):
            rows = min(self.chunk, total - c * self.chunk)
            m_padded += math.ceil(rows / tile_m) * tile_m
        c = self.cost
        compute_ms = (c.prefill_b * m_padded + c.prefill_c * n * pad_to * pad_to) / efficiency
        ms = chunks * c.prefill_a + compute_ms / self.budget
        return ms / 1e3 / speed

    def chunk_s(self, tile_m: int, efficiency: float) -> float:
        """One full planning chunk: the longest a time-sliced decode iteration can stall."""
        rows = math.ceil(self.chunk / tile_m) * tile_m
        ms = self.cost.prefill_a + self.cost.prefill_b * rows / efficiency / self.budget
        return ms / 1e3

    def decode_iter_s(self, batch: int, context_tokens: float, decode_share: float = 1.0
                      ) -> float:
        """One decode iteration; memory-bound, so it only slows when the SMs it holds fall
        below ``decode_saturation`` of the GPU."""
        speed = min(1.0, self.budget * decode_share / self.saturation)
        return self.cost.decode_ms(context_tokens, max(1, batch)) / 1e3 / speed


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
