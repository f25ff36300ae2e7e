"""Speed of importing real models (torch.export + mask probe) and of streamed evaluation."""

from __future__ import annotations

import pytest

from schedlab.harp import ArchConfig, build_workload, evaluate

PUMA = ArchConfig.model_validate({"max_crossbars": 17_664})


def test_harp_bench_import_hf_bert_base(benchmark) -> None:
    hf = pytest.importorskip("transformers")
    from schedlab.harp.transformers import from_config

    work = benchmark.pedantic(from_config, args=(hf.BertConfig(),), kwargs={"tokens": 128},
                              rounds=2, iterations=1)
    assert work.tokens == 128
    # exact counts at full size (moved here from tests/harp to keep its time from growing)
    t, d, f = 128, 768, 3072
    assert work.macs("static") == 12 * t * (4 * d * d + 2 * d * f) + d * d  # + pooler, 1 row
    assert work.macs("dynamic") == 12 * 2 * t * t * d
    counts = work.op_counts()
    assert {k: counts.get(k, 0) for k in ("static", "dynamic", "softmax", "layernorm",
                                          "gelu")} == {"static": 73, "dynamic": 24,
                                                       "softmax": 12, "layernorm": 25, "gelu": 12}


def test_harp_bench_streamed_bert_base_puma(benchmark) -> None:
    work = build_workload("bert-base")
    report = benchmark.pedantic(evaluate, args=(work, PUMA, "area", "harp"), rounds=3,
                                iterations=1)
    assert report.groups > 1
