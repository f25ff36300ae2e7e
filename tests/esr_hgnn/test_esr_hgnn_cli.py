"""The CLI end to end: JSON output, errors that name the problem, files written."""

from __future__ import annotations

import json

import polars as pl
from typer.testing import CliRunner

from schedlab.esr_hgnn.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def test_sample_json_reports_reads_and_time():
    result = invoke("sample", "--schema", "dblp", "--scale", "0.05", "--metapaths",
                    "APA,APCPA,APTPA", "--sampler", "naive", "--batch", "16", "--batches", "1",
                    "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["reads_per_batch"] == 16 * (11 + 20 + 11 + 20 * 3 + 11 + 20 * 3) - 16 * 0
    assert doc["metapaths"] == ["APA", "APCPA", "APTPA"]


def test_invalid_relation_is_named_and_exits_2():
    result = invoke("sample", "--schema", "dblp", "--scale", "0.05", "--metapaths", "APA,ACA")
    assert result.exit_code == 2
    assert "relation A->C does not exist" in result.output


def test_unknown_sampler_and_schema():
    assert "valid: naive, trie" in invoke("sample", "--schema", "dblp", "--sampler", "x").output
    assert "unknown schema 'ogb'" in invoke("sample", "--schema", "ogb").output


def test_generate_then_sample_from_directory(tmp_path):
    out = tmp_path / "acm"
    done = invoke("generate", "--schema", "acm", "--scale", "0.05", "--out", str(out))
    assert done.exit_code == 0
    samples = tmp_path / "s.parquet"
    result = invoke("sample", "--graph", str(out), "--metapaths", "PAP,PSP", "--batch", "8",
                    "--batches", "1", "--out", str(samples), "--json")
    assert result.exit_code == 0, result.output
    frame = pl.read_parquet(samples)
    assert set(frame["metapath"]) == {"PAP", "PSP"} and frame.height == 2 * 8 * 10
    assert invoke("sample", "--graph", str(out)).exit_code == 2  # metapaths required


def test_model_and_group_and_params_json(tmp_path):
    cfg = tmp_path / "hw.json"
    cfg.write_text('{"mlp": 16}')
    result = invoke("model", "--schema", "imdb", "--scale", "0.05", "--metapaths", "sym4",
                    "--channels", "2", "--batch", "16", "--batches", "1", "--config", str(cfg),
                    "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["config"]["mlp"] == 16
    platforms = {r["platform"] for r in doc["rows"]}
    assert {"cpu-naive", "cpu-trie", "gpu-naive", "esr-naive", "esr-trie"} <= platforms
    group = json.loads(invoke("group", "--metapaths", "APA,APAPA,APCPA", "--channels", "2",
                              "--json").stdout)
    assert {r["grouper"] for r in group} == {"round-robin", "random", "greedy", "optimal"}
    assert len(json.loads(invoke("params", "--json").stdout)) > 10


def test_group_rejects_mixed_start_types():
    result = invoke("group", "--metapaths", "APA,PAP", "--channels", "2")
    assert result.exit_code == 2 and "different node types" in result.output


def test_bad_fanouts():
    result = invoke("sample", "--schema", "acm", "--scale", "0.05", "--fanouts", "3,x")
    assert result.exit_code == 2 and "fanouts" in result.output


def test_bad_config_file_names_it(tmp_path):
    cfg = tmp_path / "hw.json"
    cfg.write_text('{"banks": -1}')
    result = invoke("model", "--schema", "acm", "--scale", "0.05", "--config", str(cfg))
    assert result.exit_code == 2 and "banks" in result.output


def test_gpu_bench_without_cuda_is_a_clear_error():
    import torch

    result = invoke("gpu-bench", "--schema", "imdb", "--scale", "0.05", "--batch", "8",
                    "--batches", "1", "--device", "cuda" if not torch.cuda.is_available()
                    else "cpu")
    if torch.cuda.is_available():
        assert result.exit_code == 0
    else:
        assert result.exit_code == 2 and "no CUDA device" in result.output


def test_infer_json():
    result = invoke("infer", "--schema", "acm", "--scale", "0.05", "--metapaths", "han",
                    "--batch", "8", "--batches", "1", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["pipeline"] for r in rows] == ["cpu-naive", "cpu-trie", "esr-trie (modelled)"]


def test_gpu_bench_unknown_device_is_one_line_error() -> None:
    for device in ("xx", "cuda:x", "meta"):
        result = invoke("gpu-bench", "--schema", "acm", "--scale", "0.01", "--device", device)
        assert result.exit_code == 2, result.output
        assert "field 'device'" in result.output
        assert "Traceback" not in result.output
