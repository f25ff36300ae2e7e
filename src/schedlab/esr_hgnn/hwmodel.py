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
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.core.io import read_json, validate_model
from schedlab.esr_hgnn.graph import WORD_BYTES
from schedlab.esr_hgnn.memsys import preset, replay_channels
from schedlab.esr_hgnn.policies import SampleBatch


class HardwareConfig(BaseModel):
    """Parameters of the modelled sampling unit and of the GPU/CPU baselines (see SOURCES)."""

    model_config = ConfigDict(extra="forbid")

    clock_ghz: float = Field(1.0, gt=0)
    channels: int = Field(8, ge=1, le=64)
    trie_buffer_kib: float = Field(64.0, ge=0)
    memory: Literal["hbm2", "ddr4"] = "hbm2"
    placement: Literal["partitioned", "replicated"] = "partitioned"
    memory_channels: int = Field(0, ge=0, le=256)
    interleave_bytes: int = Field(256, ge=4)
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
    cpu_issue_ns: float = Field(2.5, ge=0)
    cpu_hop_us: float = Field(5.0, ge=0)
    cpu_l2_kib: int = Field(1024, ge=1)
    cpu_l3_mib: int = Field(32, ge=1)
    cpu_l2_ns: float = Field(4.7, ge=0)
    cpu_l3_ns: float = Field(16.7, ge=0)
    cpu_dram_ns: float = Field(90.0, ge=0)
    cpu_mlp: int = Field(20, ge=1)


SOURCES: dict[str, str] = {
    "clock_ghz": "1 GHz, the clock of HGNN/GNN accelerators such as HyGCN (HPCA'20) and HiHGNN",
    "channels": "8 sampling channels, one per HBM2 pseudo-channel group (paper: multi-channel)",
    "trie_buffer_kib": "64 KiB on-chip trie buffer per channel (assumption; SRAM size of GNN "
                       "accelerator buffers is tens to hundreds of KiB)",
    "memory": "DRAM timing preset: hbm2 = DRAMsim3 configs/HBM2_8Gb_x128.ini (CL/tRCD/tRP 14 "
              "ns, tRAS 34, tFAW 30, 64 B per access, 32 GB/s per channel; Ramulator HBM.h has "
              "the same 14 ns), ddr4 = DRAMsim3 configs/DDR4_8Gb_x8_3200.ini (22 clocks of "
              "625 ps, 8 KiB rows, 25.6 GB/s bus, tCCD_L 8); see memsys.PRESETS",
    "placement": "partitioned: one copy of the graph interleaved over all memory channels, "
                 "every sampling channel contends for every memory channel; replicated: a full "
                 "copy per sampling channel in its own memory channel",
    "memory_channels": "memory channels behind the unit (0 = as many as sampling channels)",
    "interleave_bytes": "address interleaving granule across memory channels (256 B, a "
                        "typical controller mapping; assumption)",
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
    "cpu_issue_ns": "CPU cost model (the load-independent baseline): 2.5 ns of core work per "
                    "CSR read: a PCG64 uniform (NumPy, ~1 ns) and ~5 instructions at IPC ~1, "
                    "3 GHz (assumption)",
    "cpu_hop_us": "5 us per hop: Python dispatch of the Numba kernel and the uniforms' "
                  "allocation (assumption)",
    "cpu_l2_kib": "1 MiB private L2 per core (AMD Zen 4, as on this machine: lscpu)",
    "cpu_l3_mib": "32 MiB shared L3 (one Zen 4 CCD, as on this machine: lscpu)",
    "cpu_l2_ns": "L2 hit ~14 cycles at 3 GHz (AMD Zen 4 L2 load-to-use latency)",
    "cpu_l3_ns": "L3 hit ~50 cycles at 3 GHz (AMD Zen 4 L3 load-to-use latency)",
    "cpu_dram_ns": "90 ns DRAM load-to-use latency of a server core (typical DDR4/DDR5 "
                   "measurements, 80-110 ns)",
    "cpu_mlp": "20 cache misses in flight per core (L1D miss buffers: 16-24 on AMD Zen 2-4 and "
               "Intel Golden Cove; assumption within that range); misses overlap this much",
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
    placement: str = "partitioned"
    graph_copies: int = 1
    merged_reads: int = 0


def estimate_unit(channel_batches: Sequence[SampleBatch], cfg: HardwareConfig) -> UnitEstimate:
    """Time and energy of the unit for one mini-batch whose channels sampled ``channel_batches``.

    All channels' traces are replayed together on the memory channels (``cfg.placement``), so a
    channel's time includes waiting for banks and buses other channels hold; then each channel
    adds its trie-buffer spills and per-hop set-up. The unit finishes with its slowest channel.
    """
    if len(channel_batches) > cfg.channels:
        raise ConfigError(f"{len(channel_batches)} channel groups but the unit has "
                          f"{cfg.channels} channels", field="channels")
    for b in channel_batches:
        if b.trace is None:
            raise BadInputError("the hardware model needs a sampled trace (trace=True)",
                                field="trace")
    timing = preset(cfg.memory)
    mem = replay_channels([b.trace for b in channel_batches], timing, cfg.placement,
                          cfg.memory_channels or cfg.channels, cfg.interleave_bytes,
                          round(1000 / cfg.clock_ghz), cfg.mlp)
    buffer = cfg.trie_buffer_kib * 1024
    cycle_s = 1 / (cfg.clock_ghz * 1e9)
    seconds, spill_total = [], 0.0
    for b, dram_s in zip(channel_batches, mem["channel_seconds"], strict=True):
        # a frontier larger than the buffer is written out and read back, sequentially
        spill = sum(max(0.0, n * WORD_BYTES - buffer) for n in b.frontier_entries) * 2
        spill_total += spill
        seconds.append(dram_s + spill / (timing.peak_gbs * 1e9)
                       + cfg.hop_setup_cycles * b.hops * cycle_s)
    unit_seconds = max(seconds) if seconds else 0.0
    reads = sum(b.reads for b in channel_batches)
    bursts = mem["row_hits"] + mem["row_misses"] + spill_total / timing.burst_bytes
    sram = sum(2 * sum(b.frontier_entries) for b in channel_batches)  # write, then read
    energy = (bursts * timing.burst_bytes * 8 * cfg.dram_pj_per_bit * 1e-12
              + mem["row_misses"] * cfg.activate_nj * 1e-9
              + sram * cfg.sram_pj_per_access * 1e-12
              + cfg.channels * cfg.channel_static_mw * 1e-3 * unit_seconds)
    return UnitEstimate(unit_seconds, energy, reads, mem["row_hits"], mem["row_misses"],
                        spill_total, tuple(seconds), cfg.placement, mem["copies"],
                        mem["merged"])


def gpu_seconds(reads: float, hops: float, cfg: HardwareConfig) -> float:
    """Modelled GPU sampling time of one batch (no GPU here): launches + random sector traffic."""
    traffic = reads * cfg.gpu_sector_bytes / (cfg.gpu_bandwidth_gbs * 1e9
                                              * cfg.gpu_random_efficiency)
    return hops * cfg.gpu_hop_overhead_us * 1e-6 + traffic


def gpu_energy(seconds: float, cfg: HardwareConfig) -> float:
    return seconds * cfg.gpu_power_w


def cpu_model_seconds(trace: np.ndarray, hops: int, cfg: HardwareConfig,
                      warm: bool = True) -> float:
    """Load-independent CPU sampling time of one batch: counted reads x cited latencies.

    The read trace (byte addresses of every CSR read, as the unit replays it) goes through an
    LRU model of the core's L2 and L3 (64 B lines, 8- and 16-way); each read costs
    ``cpu_issue_ns`` of core work, L2/L3 hits and DRAM misses their latency divided by the
    misses a core keeps in flight (``cpu_mlp``), and each hop ``cpu_hop_us``. With ``warm``
    the trace runs once before it is counted, as the measured CPU time is the best of repeated
    runs of the same batch. Nothing here depends on what else the machine runs, unlike
    measured CPU time.
    """
    from schedlab.esr_hgnn.kernels import cache_levels

    l2_sets = max(1, cfg.cpu_l2_kib * 1024 // 64 // 8)
    l3_sets = max(1, cfg.cpu_l3_mib * 1024 * 1024 // 64 // 16)
    lines = np.ascontiguousarray(trace, dtype=np.int64) // 64
    l2_hits, l3_hits, dram = cache_levels(lines, l2_sets, 8, l3_sets, 16, warm)
    n = lines.size
    return float(n * cfg.cpu_issue_ns + hops * cfg.cpu_hop_us * 1e3
                 + (l2_hits * cfg.cpu_l2_ns + l3_hits * cfg.cpu_l3_ns
                    + dram * cfg.cpu_dram_ns) / cfg.cpu_mlp) * 1e-9


def cpu_energy(seconds: float, cfg: HardwareConfig) -> float:
    return seconds * cfg.cpu_power_w
