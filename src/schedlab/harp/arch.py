"""The heterogeneous ACIM + digital architecture HARP maps onto, as one validated config.

HARP (../shared/papers/16-harp.md) takes "arbitrary architectural parameters"; here they are a
Pydantic model so a user's JSON file is checked field by field. Every default is a published
simulator constant, cited next to it:

* PUMA = Ankit et al., ASPLOS 2019, constants in ``puma-simulator/include/constants.py`` and
  ``config.py`` (ISAAC-derived crossbar, ADC, DAC, ALU, eDRAM numbers).
* MNSIM = Zhu et al., MNSIM 2.0, ``SimConfig.ini`` (device read latency, intra-tile bandwidth).

Fields marked "(ours)" have no published counterpart for this setting and are modelling choices.
Units: ns, mW, mm^2, pJ.
"""

from __future__ import annotations

import math
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schedlab.core.errors import ConfigError
from schedlab.core.io import validate_model


class CrossbarConfig(BaseModel):
    """One analog crossbar with its converters; a static weight matrix is tiled over many."""

    model_config = ConfigDict(extra="forbid")

    rows: int = Field(128, ge=1)  # PUMA config.xbar_size = 128; MNSIM Xbar_Size = 128,128
    cols: int = Field(128, ge=1)
    cell_bits: int = Field(2, ge=1, le=8)  # PUMA config.xbar_bits = 2 (ISAAC 2-bit cells)
    weight_bits: int = Field(8, ge=1, le=32)  # (ours) 8-bit transformer weights; PUMA uses 16
    input_bits: int = Field(8, ge=1, le=32)  # (ours) 8-bit activations, bit-serial input
    dac_bits: int = Field(1, ge=1, le=8)  # PUMA config.dac_res = 1
    adc_bits: int = Field(8, ge=1, le=16)  # PUMA config.adc_res = 8
    adcs: int = Field(1, ge=0)  # ADCs per crossbar; ISAAC/PUMA share one ADC per 128 columns
    adc_sample_ns: float = Field(100.0 / 128, gt=0)  # PUMA adc_lat['8']=100 ns / 128 columns
    read_ns: float = Field(3.16, gt=0)  # MNSIM Read_Latency = 3.16 ns (device read)
    write_ns: float = Field(351_000 / 32, gt=0)  # PUMA xbar_wr_lat, whole crossbar
    write_power_mw: float = Field(676_000 / 32 / (328_000 / 32), ge=0)  # PUMA xbar_wr_pow
    power_mw: float = Field(0.3, ge=0)  # PUMA xbar_pow_dict['2']['128']
    area_mm2: float = Field(2.5e-5, ge=0)  # PUMA xbar_area_dict['2']['128']
    adc_power_mw: float = Field(1.8, ge=0)  # PUMA adc_pow_dyn_dict['8']
    adc_leak_mw: float = Field(0.2, ge=0)  # PUMA adc_pow_leak_dict['8']
    adc_area_mm2: float = Field(0.0012, ge=0)  # PUMA adc_area_dict['8']
    dac_power_mw: float = Field(0.00350625, ge=0)  # PUMA dac_pow_dyn_dict['1'], per DAC
    dac_area_mm2: float = Field(1.67e-7, ge=0)  # PUMA dac_area_dict['1'], per DAC
    shift_add_ns: float = Field(1.0, gt=0)  # PUMA sna_lat = 1 cycle at 1 ns

    @property
    def slices(self) -> int:
        """Crossbar columns one weight occupies: its bits spread over cells of cell_bits."""
        return math.ceil(self.weight_bits / self.cell_bits)

    @property
    def input_cycles(self) -> int:
        """Bit-serial input steps per vector: input bits fed dac_bits at a time."""
        return math.ceil(self.input_bits / self.dac_bits)

    @property
    def cycle_ns(self) -> float:
        """One input step: the array read or the ADCs sweeping all columns, whichever is slower.

        ISAAC/PUMA pipeline read and conversion, so the step is their maximum, not their sum.
        """
        return max(self.read_ns, math.ceil(self.cols / self.adcs) * self.adc_sample_ns)


class DigitalConfig(BaseModel):
    """A pool of identical digital units, each able to run in vector or data-parallel mode.

    Vector mode streams one token's row at a time (low latency, per-row issue overhead);
    data-parallel mode runs a batch of rows as one kernel on a wider MAC array (higher
    throughput, one setup per batch, but it needs the whole batch ready).
    """

    model_config = ConfigDict(extra="forbid")

    count: int = Field(32, ge=1)  # (ours) digital units on chip
    clock_ghz: float = Field(1.0, gt=0)  # PUMA constants.cycle_time = 1 ns
    lanes: int = Field(64, ge=1)  # (ours) vector width: MACs/elements per cycle, vector mode
    dp_macs_per_cycle: int = Field(512, ge=1)  # (ours) MAC array used in data-parallel mode
    vector_overhead_cycles: int = Field(32, ge=0)  # (ours) issue + load/store of one row
    dp_overhead_cycles: int = Field(256, ge=0)  # (ours) setup of one batched kernel
    softmax_cycles: float = Field(4.0, gt=0)  # per element per lane; (ours) exp+sum+div
    layernorm_cycles: float = Field(4.0, gt=0)  # (ours) mean, var, normalise, add residual
    gelu_cycles: float = Field(2.0, gt=0)  # PUMA act_lat = 1 per element, x2 for GELU (ours)
    alu_power_mw: float = Field(2.4 * 32 / 45, ge=0)  # PUMA alu_pow_dyn, per lane
    alu_leak_mw: float = Field(0.27 * 32 / 45, ge=0)  # PUMA alu_pow_leak, per lane
    alu_area_mm2: float = Field(0.00567 * 32 / 45, ge=0)  # PUMA alu_area, per lane

    @property
    def cycle_ns(self) -> float:
        return 1.0 / self.clock_ghz


class MemoryConfig(BaseModel):
    """Tile buffers and the interconnect carrying activations between units."""

    model_config = ConfigDict(extra="forbid")

    crossbars_per_tile: int = Field(128, ge=1)  # PUMA: 8 IMAs x 2 matrices x 8 physical xbars
    buffer_kb: int = Field(64, ge=1)  # PUMA/ISAAC eDRAM 64 KB per tile
    buffer_area_mm2: float = Field(0.086, ge=0)  # PUMA edram_area_dict['64']
    buffer_leak_mw: float = Field(0.46, ge=0)  # PUMA edram_pow_leak_dict['64']
    buffer_pj_per_bit: float = Field(17.2 / 256, ge=0)  # PUMA: 0.0172 nJ per 256-bit access
    interconnect_gbps: float = Field(1024.0, gt=0)  # MNSIM Intra_Tile_Bandwidth = 1024 Gbps
    activation_bits: int = Field(8, ge=1)  # (ours) activations moved as 8-bit values
    tile_extra_area_mm2: float = Field(0.0, ge=0)  # (ours: 0) other per-tile hardware a
    tile_extra_leak_mw: float = Field(0.0, ge=0)  # calibration adds (PUMA: memories, bus, NoC)
    offchip_gbps: float = Field(2048.0, gt=0)  # one HBM2 stack, 256 GB/s (JESD235); streamed
    # weights are fetched at this rate while crossbars are rewritten


class ReprogramConfig(BaseModel):
    """Chips smaller than the model: weights streamed into the crossbars per layer group.

    Each inference writes every group's weights (PUMA's whole-crossbar write, ``write_ns`` and
    ``write_power_mw`` in :class:`CrossbarConfig`), every tile writing its crossbars one after
    another, all tiles in parallel, while the weights arrive over ``offchip_gbps``.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True  # (ours) stream weights instead of refusing a model that does not fit
    overlap: str = Field("auto", pattern="^(auto|sequential|double-buffered)$")
    # sequential: the whole chip holds one group, write then compute; double-buffered: half the
    # chip computes group g while the other half is written with group g+1; auto: the faster
    endurance_writes: float = Field(1e6, gt=0)  # (ours) write cycles a cell survives: the
    # conservative end of the 1e6-1e12 reported for ReRAM (1e12: TaOx, Lee et al., Nature
    # Materials 10:625, 2011); multi-level cells are at the low end
    inferences_per_load: int = Field(1, ge=1)  # (ours) inferences (a batch) per weight load


class ArchConfig(BaseModel):
    """The whole chip: crossbars (with a count budget), digital units and memory."""

    model_config = ConfigDict(extra="forbid")

    name: str = "puma-mnsim-default"
    crossbar: CrossbarConfig = Field(default_factory=CrossbarConfig)
    digital: DigitalConfig = Field(default_factory=DigitalConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    max_crossbars: int = Field(131_072, ge=1)  # (ours) fits BERT-large/GPT-2 medium at r=1
    max_replication: int = Field(16, ge=1)  # (ours) cap on copies of one weight matrix
    reprogram: ReprogramConfig = Field(default_factory=ReprogramConfig)

    @model_validator(mode="after")
    def _physical(self) -> ArchConfig:
        xbar = self.crossbar
        if xbar.adcs == 0:
            raise ValueError("crossbar.adcs: is 0, but an analog crossbar needs at least one ADC")
        if xbar.adcs > xbar.cols:
            raise ValueError(f"crossbar.adcs: {xbar.adcs} exceeds the {xbar.cols} columns")
        if xbar.cols < xbar.slices:
            raise ValueError(
                f"crossbar.cols: {xbar.cols} columns, but one {xbar.weight_bits}-bit weight needs "
                f"{xbar.slices} cell slices of {xbar.cell_bits} bits"
            )
        if xbar.dac_bits > xbar.input_bits:
            raise ValueError("crossbar.dac_bits: exceeds crossbar.input_bits")
        return self


def arch_from_dict(data: object, path: str | Path | None = None) -> ArchConfig:
    """Validate a dict as an ArchConfig, naming the first offending field on failure."""
    if not isinstance(data, dict):
        raise ConfigError("an architecture must be a JSON object", path=path)
    return validate_model(ArchConfig, data, path)
