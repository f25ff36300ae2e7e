"""Bad architectures, model files and CLI input fail with the file/field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.harp import ArchConfig, build_workload, load_arch, load_model
from schedlab.harp.arch import arch_from_dict
from schedlab.harp.cli import app

runner = CliRunner()


@pytest.mark.parametrize(("data", "field"), [
    ({"crossbar": {"adcs": 0}}, "crossbar.adcs"),
    ({"crossbar": {"cols": 2}}, "crossbar.cols"),  # smaller than one weight's cell slices
    ({"crossbar": {"adcs": 999}}, "crossbar.adcs"),
    ({"digital": {"count": 0}}, "digital.count"),
    ({"crossbar": {"read_ns": -1}}, "crossbar.read_ns"),
    ({"nonsense": 1}, "nonsense"),
])
def test_invalid_architectures_name_the_field(data: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        arch_from_dict(data)
    assert info.value.field == field


def test_partial_arch_file_overrides_defaults(tmp_path: Path) -> None:
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"crossbar": {"rows": 256, "cols": 256}}))
    arch = load_arch(path)
    assert arch.crossbar.rows == 256 and arch.digital.count == ArchConfig().digital.count


@given(st.binary(max_size=200))
def test_fuzzed_arch_files_raise_bad_input(tmp_path_factory, blob: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "arch.json"
    path.write_bytes(blob)
    try:
        load_arch(path)
    except BadInputError as exc:
        assert exc.path == path
    # a blob that happens to be a valid (partial) architecture is fine too


@given(st.dictionaries(st.sampled_from(["layers", "d_model", "heads", "d_ff", "tokens", "x"]),
                       st.one_of(st.integers(-5, 5000), st.text(max_size=3), st.none()),
                       max_size=6))
def test_fuzzed_model_files_raise_bad_input(tmp_path_factory, data: dict) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "model.json"
    path.write_text(json.dumps(data))
    try:
        work = load_model(path)
    except BadInputError as exc:
        assert exc.path == path
    else:
        assert work.tokens >= 1 and work.ops


def test_model_file_and_heads_check(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({"layers": 2, "d_model": 60, "heads": 7, "d_ff": 128,
                                "tokens": 16}))
    with pytest.raises(ConfigError, match="divisible") as info:
        load_model(path)
    assert info.value.path == path and info.value.field == "heads"


def test_workload_classifies_ops() -> None:
    work = build_workload("bert-base")
    kinds = {op.name.split(".")[-1]: op.kind for op in work.ops}
    assert {kinds[n] for n in ("q", "k", "v", "o", "ffn1", "ffn2")} == {"static"}
    assert kinds["qk"] == kinds["av"] == "dynamic"
    assert {kinds[n] for n in ("softmax", "ln1", "gelu", "ln2")} == {"nonlinear"}
    assert work.weights() == 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    assert dict(build_workload("gpt2-small").op("L0.qk").inputs)["L0.k"] == "prefix"


def test_cli_estimate_json_and_errors(tmp_path: Path) -> None:
    result = runner.invoke(app, ["estimate", "--model", "gpt2-small", "--tokens", "16",
                                 "--strategy", "balanced", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["latency_us"] > 0 and doc["area_mm2"] > 0 and doc["energy_uj"] > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"crossbar": {"adcs": 0}}))
    result = runner.invoke(app, ["estimate", "--arch", str(bad)])
    assert result.exit_code == 2
    assert "crossbar.adcs" in result.output
    result = runner.invoke(app, ["estimate", "--strategy", "fastest"])
    assert result.exit_code == 2


def test_cli_compare_and_sweep(tmp_path: Path) -> None:
    result = runner.invoke(app, ["compare", "-m", "bert-base", "--tokens", "16", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["scheduler"] for r in rows} >= {"harp", "non-pipelined", "single-vector"}
    out, plot = tmp_path / "sweep.csv", tmp_path / "pareto.png"
    result = runner.invoke(app, ["sweep", "--crossbar", "128,256", "--adcs", "1,4",
                                 "--units", "8", "--tokens", "16", "--out", str(out),
                                 "--plot", str(plot), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["points"]) == 4 and doc["pareto"]
    assert out.stat().st_size > 0 and plot.read_bytes()[:4] == b"\x89PNG"
    result = runner.invoke(app, ["sweep", "--adcs", "1,x"])
    assert result.exit_code == 2 and "adcs" in result.output
