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


def test_harp_bench_streamed_bert_base_puma(benchmark) -> None:
    work = build_workload("bert-base")
    report = benchmark.pedantic(evaluate, args=(work, PUMA, "area", "harp"), rounds=3,
                                iterations=1)
    assert report.groups > 1
