"""Per-call cost of the LD_PRELOAD shim in front of the stand-in driver (ns/call).

The probe times its own loop (200k calls) with CLOCK_MONOTONIC, so process start-up is not in the
figure; pytest-benchmark times the whole run and ``extra_info`` carries the per-call numbers.
"""

from __future__ import annotations

import pytest

from schedlab.gpooling.native import build, run_probe, shim_environment

CALLS = 200_000


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return build(root=tmp_path_factory.mktemp("gpooling-bench"))


@pytest.mark.parametrize("mode", ["direct", "quota", "quota+timeslice"])
@pytest.mark.parametrize("op", ["bench-alloc", "bench-launch"])
def test_shim_overhead(benchmark, native, mode: str, op: str) -> None:
    env = {"direct": None,
           "quota": shim_environment(native, memory_limit=1 << 40, stand_in=True),
           "quota+timeslice": shim_environment(native, memory_limit=1 << 40, share=0.999,
                                               stand_in=True)}[mode]
    out = benchmark.pedantic(run_probe, args=(native, [op, str(CALLS)], env), rounds=5,
                             iterations=1)
    key = "ns_per_pair" if op == "bench-alloc" else "ns_per_call"
    per_call = out[0][key] / (2 if op == "bench-alloc" else 1)
    benchmark.extra_info["ns_per_call"] = per_call
