"""Speed of the analog noise model (one 768x768 crossbar-mapped GEMM) and the MNSIM baseline."""

from __future__ import annotations

import pytest

from schedlab.harp import ArchConfig, build_workload, make_mapper, simulate
from schedlab.harp.policies import MnsimScheduler


def test_harp_bench_analog_linear_768(benchmark) -> None:
    torch = pytest.importorskip("torch")
    from schedlab.harp.noise import AnalogLinear, NoiseConfig

    g = torch.Generator().manual_seed(0)
    layer = AnalogLinear(torch.randn(768, 768, generator=g), None, NoiseConfig(), g)
    x = torch.randn(32, 768, generator=g)
    y = benchmark.pedantic(layer, args=(x,), rounds=3, iterations=1)
    assert y.shape == (32, 768)


def test_harp_bench_mnsim_pipeline_bert_base(benchmark) -> None:
    arch = ArchConfig()
    work = build_workload("bert-base")
    mapping = make_mapper("latency", "levels").map(work, arch)
    plan = MnsimScheduler().plan(work, mapping, arch)
    result = benchmark.pedantic(simulate, args=(plan,), rounds=3, iterations=1)
    assert result.latency_ns > 0
