"""Cycle-approximate model of ESR-HGNN's multi-channel sampling unit, and GPU/CPU cost models.

Paper: ESR-HGNN (../shared/papers/05-esr_hgnn.md). We have no ASIC, so the unit is *modelled*:
each of ``channels`` sampling channels walks its group's metapath trie, keeps trie frontiers in an
on-chip buffer (spilling to DRAM when they overflow) and issues its CSR reads to its own HBM
pseudo-channel, whose open-page row buffers, bank timings and shared data bus are replayed read by
read (:func:`kernels.replay_dram`). The unit finishes a batch when its slowest channel does.

GPU sampling is also modelled (no GPU on this machine): per-hop framework/kernel-launch overhead
plus random 32-byte sector traffic at a fraction of HBM bandwidth. CPU sampling is *measured*.
Every parameter has its source in :data:`SOURCES`; change them with a JSON config
(``schedlab esr-hgnn model --config file.json``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.core.io import read_json, validate_model
from schedlab.esr_hgnn.graph import WORD_BYTES
from schedlab.esr_hgnn.kernels import replay_dram
from schedlab.esr_hgnn.policies import SampleBatch


class HardwareConfig(BaseModel):
    """Parameters of the modelled sampling unit and of the GPU/CPU baselines (see SOURCES)."""

    model_config = ConfigDict(extra="forbid")

    clock_ghz: float = Field(1.0, gt=0)
    channels: int = Field(8, ge=1, le=64)
    trie_buffer_kib: float = Field(64.0, ge=0)
    row_bytes: int = Field(1024, ge=64)
    banks: int = Field(16, ge=1)
    t_cl: int = Field(14, ge=1)
    t_rcd: int = Field(14, ge=1)
    t_rp: int = Field(14, ge=1)
    t_burst: int = Field(2, ge=1)
    t_ccd: int = Field(2, ge=1)
    burst_bytes: int = Field(32, ge=4)
    mlp: int = Field(32, ge=1)
    hop_setup_cycles: int = Field(20, ge=0)
    dram_pj_per_bit: float = Field(3.9, ge=0)
    activate_nj: float = Field(0.9, ge=0)
    sram_pj_per_access: float = Field(10.0, ge=0)
    channel_static_mw: float = Field(50.0, ge=0)
    cpu_power_w: float = Field(15.0, gt=0)
    gpu_power_w: float = Field(250.0, gt=0)
    gpu_hop_overhead_us: float = Field(20.0, ge=0)
    gpu_bandwidth_gbs: float = Field(1555.0, gt=0)
    gpu_random_efficiency: float = Field(0.3, gt=0, le=1)
    gpu_sector_bytes: int = Field(32, ge=4)


SOURCES: dict[str, str] = {
    "clock_ghz": "1 GHz, the clock of HGNN/GNN accelerators such as HyGCN (HPCA'20) and HiHGNN",
    "channels": "8 sampling channels, one per HBM2 pseudo-channel group (paper: multi-channel)",
    "trie_buffer_kib": "64 KiB on-chip trie buffer per channel (assumption; SRAM size of GNN "
                       "accelerator buffers is tens to hundreds of KiB)",
    "row_bytes": "HBM2 page size 1 KiB per pseudo-channel (JEDEC JESD235)",
    "banks": "16 banks per HBM2 pseudo-channel (JESD235)",
    "t_cl": "tCL ~14 ns (HBM2 datasheets, e.g. Samsung Aquabolt), in 1 GHz cycles",
    "t_rcd": "tRCD ~14 ns (HBM2 datasheets)",
    "t_rp": "tRP ~14 ns (HBM2 datasheets)",
    "t_burst": "32 B burst on a 64-bit pseudo-channel at 2 Gb/s/pin = 2 ns",
    "t_ccd": "tCCD 2 ns (column-to-column, HBM2)",
    "burst_bytes": "32 B access granularity of an HBM2 pseudo-channel (BL4 x 64 bit)",
    "mlp": "32 outstanding reads per channel (assumption, typical MSHR count of an accelerator "
           "memory interface)",
    "hop_setup_cycles": "pipeline fill when a channel starts a trie edge (assumption)",
    "dram_pj_per_bit": "HBM2 ~3.9 pJ/bit (O'Connor et al., Fine-Grained DRAM, MICRO'17)",
    "activate_nj": "~0.9 nJ per 1 KiB row activation (O'Connor et al., MICRO'17)",
    "sram_pj_per_access": "~10 pJ per 32-bit access of a 64 KiB SRAM at 28 nm (CACTI 7)",
    "channel_static_mw": "50 mW logic + leakage per channel (assumption, 28 nm)",
    "cpu_power_w": "15 W: one busy server core with its share of uncore/DRAM (RAPL-typical; the "
                   "CPU time it multiplies is measured on one core)",
    "gpu_power_w": "250 W, NVIDIA A100 PCIe board power",
    "gpu_hop_overhead_us": "20 us per sampled hop: op dispatch + kernel launch of DGL/PyG "
                           "sample_neighbors on GPU (measured tens of us in those frameworks)",
    "gpu_bandwidth_gbs": "A100 40 GB HBM2 bandwidth 1,555 GB/s",
    "gpu_random_efficiency": "30% of peak for random 32 B sector reads (assumption)",
    "gpu_sector_bytes": "32 B L2 sector, the GPU's random-access granularity",
}


def load_config(path: str | Path | None = None, **overrides: float) -> HardwareConfig:
    """Defaults, then a JSON file's fields, then keyword overrides; errors name the field."""
    fields: dict = {}
    if path is not None:
        path = Path(path)
        fields = read_json(path)
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return validate_model(HardwareConfig, fields, path)


@dataclass(frozen=True)
class UnitEstimate:
    """One batch on the modelled unit."""

    seconds: float
    energy_j: float
    reads: int
    row_hits: int
    row_misses: int
    spill_bytes: float
    channel_seconds: tuple[float, ...]


def _channel_cycles(batch: SampleBatch, cfg: HardwareConfig) -> tuple[int, int, int, float]:
    """Cycles, hits, misses and spilled bytes of one channel's batch."""
    if batch.trace is None:
        raise BadInputError("the hardware model needs a sampled trace (trace=True)", field="trace")
    cycles, hits, misses = replay_dram(batch.trace, cfg.row_bytes, cfg.banks, cfg.t_cl,
                                       cfg.t_rcd, cfg.t_rp, cfg.t_burst, cfg.t_ccd, cfg.mlp)
    buffer = cfg.trie_buffer_kib * 1024
    # a frontier larger than the buffer is written out and read back, sequentially
    spill = sum(max(0.0, n * WORD_BYTES - buffer) for n in batch.frontier_entries) * 2
    spill_cycles = spill / cfg.burst_bytes * cfg.t_burst
    total = int(cycles) + int(np.ceil(spill_cycles)) + cfg.hop_setup_cycles * batch.hops
    return total, int(hits), int(misses), spill


def estimate_unit(channel_batches: Sequence[SampleBatch], cfg: HardwareConfig) -> UnitEstimate:
    """Time and energy of the unit for one mini-batch whose channels sampled ``channel_batches``."""
    if len(channel_batches) > cfg.channels:
        raise ConfigError(f"{len(channel_batches)} channel groups but the unit has "
                          f"{cfg.channels} channels", field="channels")
    results = [_channel_cycles(b, cfg) for b in channel_batches]
    seconds = tuple(c / (cfg.clock_ghz * 1e9) for c, _, _, _ in results)
    unit_seconds = max(seconds) if seconds else 0.0
    reads = sum(b.reads for b in channel_batches)
    hits = sum(h for _, h, _, _ in results)
    misses = sum(m for _, _, m, _ in results)
    spill = sum(s for _, _, _, s in results)
    bursts = reads + spill / cfg.burst_bytes
    sram = sum(2 * sum(b.frontier_entries) for b in channel_batches)  # write, then read
    energy = (bursts * cfg.burst_bytes * 8 * cfg.dram_pj_per_bit * 1e-12
              + misses * cfg.activate_nj * 1e-9
              + sram * cfg.sram_pj_per_access * 1e-12
              + cfg.channels * cfg.channel_static_mw * 1e-3 * unit_seconds)
    return UnitEstimate(unit_seconds, energy, reads, hits, misses, spill, seconds)


def gpu_seconds(reads: float, hops: float, cfg: HardwareConfig) -> float:
    """Modelled GPU sampling time of one batch (no GPU here): launches + random sector traffic."""
    traffic = reads * cfg.gpu_sector_bytes / (cfg.gpu_bandwidth_gbs * 1e9
                                              * cfg.gpu_random_efficiency)
    return hops * cfg.gpu_hop_overhead_us * 1e-6 + traffic


def gpu_energy(seconds: float, cfg: HardwareConfig) -> float:
    return seconds * cfg.gpu_power_w


def cpu_energy(seconds: float, cfg: HardwareConfig) -> float:
    return seconds * cfg.cpu_power_w
