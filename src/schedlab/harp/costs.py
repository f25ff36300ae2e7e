"""Per-op time, energy and area on the modelled hardware (ISAAC/PUMA-style analytical costs).

Why analytical: HARP's point is an estimator fast enough for design-space exploration and NAS,
so a GEMM's cost is closed-form in the crossbar tiling, converter counts and digital rates
(all in :mod:`schedlab.harp.arch`), the way PUMA's and MNSIM's models are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schedlab.harp.arch import ArchConfig
from schedlab.harp.workloads import Op, Workload


@dataclass(frozen=True)
class Tiling:
    """How one static K x N weight is cut into crossbars (one copy)."""

    row_tiles: int
    col_tiles: int

    @property
    def crossbars(self) -> int:
        return self.row_tiles * self.col_tiles


def row_share(op: Op, tokens: int) -> float:
    """Fraction of the workload's rows ``op`` really processes (1 unless ``op.rows`` is set)."""
    return op.rows / tokens if op.rows else 1.0


#: digital cost class of each non-linear function the importers produce
FUNC_CLASS = {"softmax": "softmax", "layernorm": "layernorm", "rmsnorm": "layernorm",
              "gelu": "gelu", "silu": "gelu"}


def tiling(op: Op, arch: ArchConfig) -> Tiling:
    """K rows over crossbar rows; N outputs x weight slices over crossbar columns."""
    xbar = arch.crossbar
    return Tiling(math.ceil(op.k / xbar.rows), math.ceil(op.n * xbar.slices / xbar.cols))


def analog_row_ns(op: Op, arch: ArchConfig) -> float:
    """Time for one copy of a static weight to multiply one token's vector.

    Bit-serial input over ``input_cycles`` pipelined read/convert steps (plus one step to drain
    the pipeline), a shift-and-add tree over row tiles and weight slices, and moving the N
    outputs over the interconnect. All tiles of a copy work in parallel.
    """
    xbar, mem = arch.crossbar, arch.memory
    tiles = tiling(op, arch)
    mvm = (xbar.input_cycles + 1) * xbar.cycle_ns
    reduce = math.ceil(math.log2(max(tiles.row_tiles * xbar.slices, 1)) + 1) * xbar.shift_add_ns
    move = op.n * mem.activation_bits / mem.interconnect_gbps  # Gbps = bits per ns
    return mvm + reduce + move


def digital_row_cycles(op: Op, arch: ArchConfig, data_parallel: bool) -> tuple[float, float]:
    """(cycles per row, extra cycles per (t+1) of causal growth) on one digital unit.

    Dynamic GEMMs use ``lanes`` MACs/cycle in vector mode and the wider ``dp_macs_per_cycle``
    array in data-parallel mode; non-linear ops cost ``<func>_cycles`` per element per lane.
    """
    dig = arch.digital
    if op.kind == "dynamic":
        rate = dig.dp_macs_per_cycle if data_parallel else dig.lanes
        return op.macs / rate, op.macs_growth / rate
    if op.kind == "nonlinear":
        per = {"softmax": dig.softmax_cycles, "layernorm": dig.layernorm_cycles,
               "gelu": dig.gelu_cycles}.get(FUNC_CLASS.get(op.func, ""), 1.0)
        return op.elems * per / dig.lanes, op.elems_growth * per / dig.lanes
    raise ValueError(f"op {op.name} is static; it runs on crossbars")


def row_sum(tokens: int, causal_growth: float, base: float) -> float:
    """Sum over rows t=0..T-1 of base + growth*(t+1)."""
    return base * tokens + causal_growth * tokens * (tokens + 1) / 2


def dynamic_energy_pj(work: Workload, arch: ArchConfig) -> dict[str, float]:
    """Energy of one inference that does not depend on the schedule, by component.

    Analog: per vector and copy-tile, each input step reads the array, converts every column
    once and drives every row DAC. Replication does not change this: each token still visits
    one copy. Digital: every MAC/element-cycle at PUMA's per-lane ALU power for one cycle.
    Memory: every activation moved through a buffer once in and once out.
    """
    xbar, dig, mem = arch.crossbar, arch.digital, arch.memory
    analog = adc = 0.0
    digital = moved_bits = 0.0
    for op in work.ops:
        rows = work.rows_of(op)
        if op.kind == "static":
            count = tiling(op, arch).crossbars * xbar.input_cycles * rows
            analog += count * (xbar.power_mw * xbar.cycle_ns + xbar.rows * xbar.dac_power_mw)
            adc += count * xbar.cols * xbar.adc_power_mw * xbar.adc_sample_ns
            moved_bits += (op.k + op.n) * rows * mem.activation_bits
        else:
            base, grow = digital_row_cycles(op, arch, data_parallel=False)
            lane_cycles = row_sum(rows, grow, base) * dig.lanes
            digital += lane_cycles * dig.alu_power_mw * dig.cycle_ns
            width = op.elems or (op.macs + op.macs_growth * rows) ** 0.5
            moved_bits += 2 * width * rows * mem.activation_bits
    memory = moved_bits * mem.buffer_pj_per_bit
    return {"crossbar": analog, "adc": adc, "digital": digital, "memory": memory}


def leakage_mw(crossbars: int, arch: ArchConfig) -> float:
    """Static power of the allocated hardware, paid for as long as an inference runs."""
    xbar, dig, mem = arch.crossbar, arch.digital, arch.memory
    tiles = math.ceil(crossbars / mem.crossbars_per_tile)
    return (crossbars * xbar.adcs * xbar.adc_leak_mw
            + dig.count * dig.lanes * dig.alu_leak_mw
            + tiles * (mem.buffer_leak_mw + mem.tile_extra_leak_mw))


def area_mm2(crossbars: int, arch: ArchConfig) -> dict[str, float]:
    """Chip area of a mapping by component: crossbars with converters, digital units, buffers."""
    xbar, dig, mem = arch.crossbar, arch.digital, arch.memory
    tiles = math.ceil(crossbars / mem.crossbars_per_tile)
    return {
        "crossbar": crossbars * (xbar.area_mm2 + xbar.rows * xbar.dac_area_mm2),
        "adc": crossbars * xbar.adcs * xbar.adc_area_mm2,
        "digital": dig.count * dig.lanes * dig.alu_area_mm2,
        "buffer": tiles * mem.buffer_area_mm2,
        "other": tiles * mem.tile_extra_area_mm2,
    }


def program_cost(crossbars: int, arch: ArchConfig) -> tuple[float, float]:
    """(ns, pJ) to write all weights once, one tile's crossbars at a time per tile in parallel.

    This one-off cost is why weights stay resident and are reused across tokens and inferences.
    """
    xbar, mem = arch.crossbar, arch.memory
    per_tile = min(crossbars, mem.crossbars_per_tile)
    return per_tile * xbar.write_ns, crossbars * xbar.write_ns * xbar.write_power_mw
