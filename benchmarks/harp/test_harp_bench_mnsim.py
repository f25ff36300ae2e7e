"""MNSIM 2.0 beside HARP's analog cost model (issue 58): skips unless MNSIM is installed.

Set ``MNSIM_HOME`` (a checkout of thu-nics/MNSIM-2.0) and ``MNSIM_PYTHON`` (an interpreter
with torch that can import it); see ``mnsim_side_by_side.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HOME = os.environ.get("MNSIM_HOME", "")


@pytest.mark.skipif(not HOME or not (Path(HOME) / "MNSIM").is_dir(),
                    reason="MNSIM 2.0 is not installed (set MNSIM_HOME)")
def test_harp_bench_mnsim_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "mnsim.json"
    run = subprocess.run([sys.executable, str(HERE / "mnsim_side_by_side.py"), "--mnsim", HOME,
                          "--adcs", "1,4", "--json", str(out)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(HERE.parents[1] / "src")})
    assert run.returncode == 0, run.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    # calibrated on one layer at 1 ADC, the held-out layers and ADC count stay within 10 %
    assert max(abs(r["vector_error_calibrated"]) for r in rows) < 0.10
    assert max(abs(r["energy_error_calibrated"]) for r in rows) < 0.10
