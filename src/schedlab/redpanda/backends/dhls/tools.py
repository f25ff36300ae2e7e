"""Drivers for the open-source hardware tools: Icarus Verilog (simulation), Yosys (synthesis).

RedPanda (../shared/papers/08-redpanda.md) reports cycles, clock period and LUT/FF/DSP for its
DHLS circuits. Cycles come from simulating the generated Verilog with ``iverilog``/``vvp``;
resources from Yosys's generic synthesis to 6-input LUTs (``synth -lut 6``), with multipliers
and dividers kept as black-box macros as an FPGA flow would map them to DSP blocks and divider
cores. The clock period is estimated from Yosys's longest topological path (LUT levels, FFs
excluded) with a documented per-level delay.

Clock model (documented, not measured on a device): period = ``FF_OVERHEAD_NS`` (clock-to-Q
plus setup) + levels x ``LEVEL_NS`` (one LUT plus its share of routing), in the range of a
7-series-class FPGA. DSP blocks per multiplier: ceil(W/25) x ceil(W/18) (25x18 DSP
multipliers). A W-bit divider core costs W*W LUTs and W*W FFs (a radix-2 pipelined array).
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from schedlab.core.errors import MissingServiceError, SchedlabError

FF_OVERHEAD_NS = 0.7
LEVEL_NS = 0.5
LIBRARY = ("rp_handshake.v", "rp_control.v", "rp_units.v", "rp_share.v")
MACROS = "rp_arith.v"
MACRO_STUBS = "rp_macros_bb.v"


class ToolError(SchedlabError):
    """A hardware tool failed on Verilog we generated (a back-end bug, reported verbatim)."""


def rtl_text(name: str) -> str:
    return resources.files("schedlab.redpanda.backends.dhls").joinpath(f"rtl/{name}").read_text()


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        package = {"iverilog": "iverilog", "vvp": "iverilog", "yosys": "yosys"}.get(tool, tool)
        raise MissingServiceError(f"'{tool}' is not installed",
                                  hint=f"apt-get install {package}")
    return path


def write_library(directory: Path) -> list[Path]:
    """Copy the component library next to a generated design; returns the simulation files."""
    paths = []
    for name in (*LIBRARY, MACROS, MACRO_STUBS):
        path = directory / name
        path.write_text(rtl_text(name))
        if name != MACRO_STUBS:
            paths.append(path)
    return paths


def _run(cmd: list[str], cwd: Path, timeout: float) -> str:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ToolError(f"{Path(cmd[0]).name} ran past {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise ToolError(f"{Path(cmd[0]).name} failed: {(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


def simulate_verilog(directory: Path, top_file: Path, tb_file: Path, timeout: float = 300.0
                     ) -> str:
    """Compile with iverilog and run with vvp in ``directory``; returns vvp's output."""
    iverilog, vvp = require("iverilog"), require("vvp")
    sources = [str(directory / n) for n in (*LIBRARY, MACROS)]
    _run([iverilog, "-g2012", "-s", "tb", "-o", "sim.vvp", *sources, str(top_file),
          str(tb_file)], directory, timeout)
    return _run([vvp, "-n", "sim.vvp"], directory, timeout)


@dataclass(frozen=True)
class Resources:
    """LUT/FF/DSP estimate and clock period of one circuit."""

    luts: int
    ffs: int
    dsps: int
    levels: int
    clock_ns: float
    logic_luts: int      # LUTs Yosys mapped (excluding divider cores)
    divider_luts: int


def synthesize(directory: Path, top_file: Path, top: str, macros: list[tuple[str, int]],
               timeout: float = 600.0) -> Resources:
    """Generic Yosys synthesis to LUT6 + FFs; ``macros`` = [(fn, width)] of the black boxes."""
    yosys = require("yosys")
    sources = " ".join(str(directory / n) for n in LIBRARY)
    script = (f"read_verilog {sources} {top_file}; read_verilog -lib "
              f"{directory / MACRO_STUBS}; hierarchy -top {top}; synth -flatten -lut 6 "
              f"-top {top}; opt_clean; tee -q -o stat.log stat; tee -q -o ltp.log ltp -noff")
    _run([yosys, "-q", "-p", script], directory, timeout)
    stat = (directory / "stat.log").read_text()
    ltp = (directory / "ltp.log").read_text()
    luts = ffs = 0
    for match in re.finditer(r"^\s+(\S+)\s+(\d+)\s*$", stat, re.M):
        cell, count = match.group(1), int(match.group(2))
        if cell.startswith("$lut"):
            luts += count
        elif "DFF" in cell or "DLATCH" in cell:
            ffs += count
    found = re.search(r"length=(\d+)", ltp)
    depth = int(found.group(1)) if found else 0
    dsps = sum(math.ceil(w / 25) * math.ceil(w / 18) for fn, w in macros if fn == "mul")
    div_luts = sum(w * w for fn, w in macros if fn != "mul")
    return Resources(luts=luts + div_luts, ffs=ffs + div_luts, dsps=dsps, levels=depth,
                     clock_ns=round(FF_OVERHEAD_NS + LEVEL_NS * depth, 3), logic_luts=luts,
                     divider_luts=div_luts)
