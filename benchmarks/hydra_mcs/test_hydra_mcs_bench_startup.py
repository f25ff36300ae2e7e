"""Whole-process cost of one ``schedlab hydra-mcs solve`` call (issue 22 item 3, issue 27 item 1).

Each round runs the real CLI in a fresh process and records its CPU time (user + sys of the
child, as ``/usr/bin/time -f %U+%S`` reports it) in ``extra_info``; pytest-benchmark's own
figure is the wall time. ``aot`` is the default path (the kernel compiled ahead of time, no
Numba in the process); ``jit`` forces Numba's dispatcher with a warm on-disk cache. With
HYDRA_MCS_REF set to the reference McSplit binary its whole call is measured the same way.
No timed assertions: the figures go in docs/systems/hydra_mcs.md.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from schedlab.core.data import data_dir
from schedlab.hydra_mcs import aot

DATA = data_dir() / "mcs"
PAIRS = ["s20.?00", "s20.?01"]
ROUNDS = 5


def _child_cpu(cmd: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _schedlab() -> list[str]:
    exe = shutil.which("schedlab")
    return [exe] if exe else [sys.executable, "-m", "schedlab.cli"]


@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.parametrize("kind", ["aot", "jit"])
def test_bench_solve_process(benchmark, pair, kind):
    if not DATA.is_dir():
        pytest.skip("../shared/data/mcs is not present")
    if kind == "aot":
        try:
            aot.build()
        except aot.AotUnavailable as exc:
            pytest.skip(str(exc))
    a, b = (str(DATA / pair.replace("?", x)) for x in "AB")
    env = {**os.environ, aot.KIND_ENV: kind}
    cmd = [*_schedlab(), "hydra-mcs", "solve", a, b]
    _child_cpu(cmd, env)  # warm the page cache (and the JIT cache for "jit")
    cpu: list[float] = []
    benchmark.pedantic(lambda: cpu.append(_child_cpu(cmd, env)), rounds=ROUNDS, iterations=1)
    benchmark.extra_info.update(cpu_median_s=statistics.median(cpu), cpu_s=cpu, kernel=kind)


@pytest.mark.parametrize("pair", PAIRS)
def test_bench_reference_mcsplit_process(benchmark, pair):
    binary = os.environ.get("HYDRA_MCS_REF")
    if not binary or not Path(binary).is_file() or not DATA.is_dir():
        pytest.skip("set HYDRA_MCS_REF to the reference McSplit binary (mcsp)")
    a, b = (str(DATA / pair.replace("?", x)) for x in "AB")
    cmd = [binary, "min_max", a, b]
    _child_cpu(cmd, dict(os.environ))
    cpu: list[float] = []
    benchmark.pedantic(
        lambda: cpu.append(_child_cpu(cmd, dict(os.environ))), rounds=ROUNDS, iterations=1
    )
    benchmark.extra_info.update(cpu_median_s=statistics.median(cpu), cpu_s=cpu)
