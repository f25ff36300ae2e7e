"""Run DRAMsim3 (Li et al., MEMSYS'20; github.com/umd-memsys/DRAMsim3) on a read trace.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) is modelled with our own DRAM replay
(:mod:`memsys`); this adapter feeds the same trace to DRAMsim3's ``dramsim3main`` so the two can
be compared (``benchmarks/esr_hgnn/dramsim3_crosscheck.py``). DRAMsim3 is not a package: build
it from source (``cmake .. && make dramsim3main`` in ``DRAMsim3/build``) and pass its directory.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, MissingServiceError

#: our presets and the DRAMsim3 configs they were taken from
CONFIGS = {"hbm2": "HBM2_8Gb_x128.ini", "ddr4": "DDR4_8Gb_x8_3200.ini"}


def binary(root: str | Path) -> Path:
    path = Path(root) / "build" / "dramsim3main"
    if not path.is_file():
        raise MissingServiceError(
            f"{path} is not built",
            hint="cd DRAMsim3 && mkdir build && cd build && cmake .. && make dramsim3main",
        )
    return path


def one_channel_config(root: str | Path, memory: str, out: Path) -> Path:
    """A copy of DRAMsim3's config for ``memory`` with ``channels = 1``."""
    if memory not in CONFIGS:
        raise BadInputError(
            f"unknown memory {memory!r}; valid: {', '.join(CONFIGS)}", field="memory"
        )
    src = Path(root) / "configs" / CONFIGS[memory]
    if not src.is_file():
        raise BadInputError("DRAMsim3 config not found", path=src)
    out.write_text(re.sub(r"(?m)^channels\s*=\s*\d+", "channels = 1", src.read_text()))
    return out


def run(
    root: str | Path, config: Path, addresses: np.ndarray, cycles: int, spacing: int, work: Path
) -> dict:
    """Reads ``addresses`` (one every ``spacing`` clocks from 0) for ``cycles`` clocks.

    Returns channel 0's reads done, read commands issued, row hits and mean read latency.
    """
    trace = work / "trace.txt"
    with open(trace, "w") as fh:
        for i, a in enumerate(np.asarray(addresses, dtype=np.int64)):
            fh.write(f"{int(a):#x} READ {i * spacing}\n")
    out = work / "dramsim3_out"
    out.mkdir(exist_ok=True)
    done = subprocess.run(
        [str(binary(root)), str(config), "-c", str(cycles), "-t", str(trace), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise MissingServiceError(f"dramsim3main failed: {done.stderr.strip()[:200]}")
    stats = json.loads((out / "dramsim3.json").read_text())["0"]
    return dict(
        reads_done=int(stats["num_reads_done"]),
        read_cmds=int(stats["num_read_cmds"]),
        row_hits=int(stats["num_read_row_hits"]),
        latency=float(stats["average_read_latency"]),
        cycles=int(stats["num_cycles"]),
    )
