"""Typed configuration of a device/edge/cloud deployment, checked before anything runs.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). Every number here is a modelled parameter of the testbed we do
not have (one A800 in the cloud, one A6000 at the edge, an OFDMA cell); defaults are stated
with their reasoning so a user can replace them with their own measurements.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from schedlab.core.errors import ConfigError
from schedlab.llm.costmodel import get_gpu, get_model
from schedlab.llm.occupancy import gpu_arch
from schedlab.llm.requests import CONTEXT_POLICIES

#: SNR range a link-level model is meaningful over (LTE/NR CQI tables span about -10..30 dB)
SNR_DB_RANGE = (-10.0, 40.0)
#: LTE/NR numerology 0 resource block: 12 subcarriers x 15 kHz
RB_HZ = 180e3


def _positive(value: float, name: str, allow_zero: bool = False) -> None:
    bad = value < 0 if allow_zero else value <= 0
    if not isinstance(value, int | float) or not math.isfinite(value) or bad:
        kind = "non-negative" if allow_zero else "positive"
        raise ConfigError(f"must be a finite {kind} number, got {value!r}", field=name)


def check_snr(snr_db: float, name: str = "snr_db") -> None:
    """SNR outside the link-level model's range is a configuration error, not a clamp."""
    low, high = SNR_DB_RANGE
    if not isinstance(snr_db, int | float) or not math.isfinite(snr_db) \
            or not low <= snr_db <= high:
        raise ConfigError(f"SNR {snr_db!r} dB is outside [{low:g}, {high:g}] dB", field=name)


@dataclass(frozen=True)
class Wireless:
    """OFDMA cell: uplink/downlink bandwidth split into resource blocks (RBs)."""

    uplink_mhz: float = 20.0
    downlink_mhz: float = 40.0
    bits_per_token: float = 32.0  # ~4 bytes of UTF-8 text per token
    air_ms: float = 4.0  # scheduling request + grant + HARQ, per direction

    def validate(self) -> None:
        _positive(self.uplink_mhz, "uplink_mhz")
        _positive(self.downlink_mhz, "downlink_mhz")
        _positive(self.bits_per_token, "bits_per_token")
        _positive(self.air_ms, "air_ms", allow_zero=True)

    @property
    def uplink_rbs(self) -> int:
        return max(1, int(self.uplink_mhz * 1e6 // RB_HZ))

    @property
    def downlink_rbs(self) -> int:
        return max(1, int(self.downlink_mhz * 1e6 // RB_HZ))


@dataclass(frozen=True)
class Backhaul:
    """Cloud-to-edge link that carries KV caches (serialised, FIFO) and the WAN hop."""

    gbps: float = 10.0
    transfer_ms: float = 2.0  # per-transfer setup (connection, RDMA registration)
    wan_ms: float = 30.0  # one-way edge<->cloud latency for prompts and streamed tokens

    def validate(self) -> None:
        _positive(self.gbps, "backhaul_gbps")
        _positive(self.transfer_ms, "transfer_ms", allow_zero=True)
        _positive(self.wan_ms, "wan_ms", allow_zero=True)


@dataclass(frozen=True)
class EdgeConfig:
    """A whole deployment: model, the two GPUs, the cell, the backhaul and planner knobs."""

    model: str = "llama-3-8b"
    cloud_gpu: str = "a800"
    edge_gpu: str = "a6000"
    edge_sm_budget: float = 1.0  # share of edge SMs the LLM may use
    cloud_sm_budget: float = 1.0
    window_ms: float = 20.0  # windowed admission period
    chunk_tokens: int = 512  # planning chunk of a prefill (Sarathi-Serve's tight-TPOT size)
    delta: float = 0.25  # delta-similar bucketing
    decode_saturation: float = 0.35  # SM share beyond which memory-bound decode stops speeding up
    duty_horizon_s: float = 2.0
    context: str = "refuse"  # requests beyond the model's window: refuse (drop, count) | truncate
    wireless: Wireless = field(default_factory=Wireless)
    backhaul: Backhaul = field(default_factory=Backhaul)

    def validate(self) -> EdgeConfig:
        get_model(self.model)
        for name in (self.cloud_gpu, self.edge_gpu):
            get_gpu(name)
            gpu_arch(name)
        for name in ("edge_sm_budget", "cloud_sm_budget", "decode_saturation"):
            value = getattr(self, name)
            _positive(value, name)
            if value > 1:
                raise ConfigError(f"is a share of SMs and must be in (0, 1], got {value}",
                                  field=name)
        _positive(self.window_ms, "window_ms")
        if self.context not in CONTEXT_POLICIES:
            raise ConfigError(f"must be one of {', '.join(CONTEXT_POLICIES)}, got "
                              f"{self.context!r}", field="context")
        _positive(self.duty_horizon_s, "duty_horizon_s")
        _positive(self.delta, "delta", allow_zero=True)
        if not isinstance(self.chunk_tokens, int) or self.chunk_tokens < 16:
            raise ConfigError("must be an integer >= 16", field="chunk_tokens")
        self.wireless.validate()
        self.backhaul.validate()
        return self

    def with_(self, **changes: object) -> EdgeConfig:
        """A copy with top-level fields or ``uplink_mhz``/``backhaul_gbps`` changed."""
        wireless = dict(uplink_mhz=changes.pop("uplink_mhz", None),
                        downlink_mhz=changes.pop("downlink_mhz", None))
        backhaul = dict(gbps=changes.pop("backhaul_gbps", None),
                        wan_ms=changes.pop("wan_ms", None))
        cfg = replace(self, **changes)  # type: ignore[arg-type]
        w = {k: v for k, v in wireless.items() if v is not None}
        b = {k: v for k, v in backhaul.items() if v is not None}
        return replace(cfg, wireless=replace(cfg.wireless, **w),
                       backhaul=replace(cfg.backhaul, **b))
