"""Start-up cost of whole ``schedlab`` processes (issue 22, item 3).

Targets: ``schedlab --help`` <= 0.3 s CPU, ``schedlab list`` <= 0.5 s CPU (issue 43: it reads
the generated experiments.json instead of importing every system),
``schedlab <system> --help`` <= 0.6 s CPU,
``schedlab hydra-mcs solve s20.A00 s20.B00`` (JIT cache warm) <= 0.6 s CPU for the whole
process. Wall time is what pytest-benchmark reports; the CPU time of the child (user + sys, the
steadier figure on a shared machine) is kept per round in ``extra_info`` — read it with
``--benchmark-json``. Run: ``pytest benchmarks/core/test_core_bench_cli.py``.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys

import pytest

from schedlab.core.data import data_dir

DATA = data_dir() / "mcs"
ROUNDS = 5


def _child_cpu(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _measure(benchmark, cmd: list[str]) -> None:
    _child_cpu(cmd)  # warm the page cache and any JIT cache
    cpu: list[float] = []
    benchmark.pedantic(lambda: cpu.append(_child_cpu(cmd)), rounds=ROUNDS, iterations=1)
    benchmark.extra_info["cpu_s_median"] = statistics.median(cpu)
    benchmark.extra_info["cpu_s"] = cpu


CLI = [sys.executable, "-m", "schedlab.cli"]


def test_root_help(benchmark):
    _measure(benchmark, [*CLI, "--help"])


@pytest.mark.parametrize("args", [("list",), ("data", "list")])
def test_list(benchmark, args):
    _measure(benchmark, [*CLI, *args])


@pytest.mark.parametrize("system", ["xbucket", "hydra-mcs", "redpanda", "arcus", "hip-dfpt"])
def test_system_help(benchmark, system):
    _measure(benchmark, [*CLI, system, "--help"])


@pytest.mark.skipif(not (DATA / "s20.A00").is_file(), reason="../shared/data/mcs not present")
def test_hydra_mcs_solve_whole_process(benchmark):
    _measure(benchmark, [*CLI, "hydra-mcs", "solve", str(DATA / "s20.A00"),
                         str(DATA / "s20.B00")])
