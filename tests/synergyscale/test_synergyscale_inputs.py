"""Readers and options: malformed input is a BadInputError naming file/line/field, never a crash."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.synergyscale import BUILTIN_MODELS, GPTConfig, load_config, text_batches
from schedlab.synergyscale.cli import app, parse_size
from schedlab.synergyscale.tiers import (
    BudgetExceededError,
    MemoryTier,
    NvmeStore,
    aligned_host_buffer,
)

runner = CliRunner()
tmp_settings = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@tmp_settings
@given(text=st.text(max_size=80))
def test_model_config_fuzz(tmp_path: Path, text: str) -> None:
    path = tmp_path / "model.json"
    path.write_text(text, encoding="utf-8")
    try:
        cfg = load_config(path)
    except BadInputError as exc:
        assert exc.path == path
    else:
        assert isinstance(cfg, GPTConfig)


@tmp_settings
@given(data=st.dictionaries(st.sampled_from(["vocab", "d_model", "n_head", "bogus", "seq"]),
                            st.one_of(st.integers(-3, 70), st.text(max_size=3), st.none())))
def test_model_config_fields_fuzz(tmp_path: Path, data: dict) -> None:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    try:
        load_config(path)
    except BadInputError as exc:
        assert exc.path == path and exc.field is not None


def test_model_config_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"d_model": 65, "n_head": 4}')
    with pytest.raises(BadInputError, match="divisible") as info:
        load_config(path)
    assert info.value.field == "n_head"
    path.write_text('{"d_model": 64,\n "n_head": }')
    with pytest.raises(BadInputError) as info:
        load_config(path)
    assert info.value.line == 2
    with pytest.raises(BadInputError, match="unknown model"):
        load_config("gpt-huge")


def test_text_data(tmp_path: Path) -> None:
    cfg = BUILTIN_MODELS["gpt-tiny"]
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"abc")
    with pytest.raises(BadInputError, match="one sequence needs") as info:
        text_batches(path, cfg, 2, 0)
    assert info.value.path == path
    path.write_bytes(bytes(range(256)) * 4)
    tokens, targets = text_batches(path, cfg, 2, 0)[0]
    assert tokens.shape == (cfg.batch, cfg.seq) and torch.equal(tokens[:, 1:], targets[:, :-1])
    with pytest.raises(BadInputError, match="vocab"):
        text_batches(path, GPTConfig(vocab=100), 1, 0)


@given(st.text(max_size=12))
def test_parse_size_fuzz(text: str) -> None:
    try:
        assert parse_size(text, "x") >= 1
    except ConfigError as exc:
        assert exc.field == "x"


def test_parse_size_units() -> None:
    assert parse_size("2GiB", "x") == 2 * 2**30
    assert parse_size("1.5e9", "x") == 1_500_000_000
    assert parse_size("512 MB", "x") == 512_000_000


@settings(max_examples=20)
@given(numel=st.integers(1, 5000))
def test_nvme_roundtrip(tmp_path_factory, numel: int) -> None:
    store = NvmeStore(tmp_path_factory.mktemp("nvme"))
    src = aligned_host_buffer(numel)
    src.copy_(torch.randn(src.numel()))
    store.write("k", src)
    dst = aligned_host_buffer(numel)
    store.read("k", dst)
    assert torch.equal(src, dst)
    assert store.bytes_read == store.bytes_written == src.numel() * 4
    store.cleanup()


def test_nvme_truncated_file_is_reported(tmp_path: Path) -> None:
    store = NvmeStore(tmp_path, direct=False)
    store.write("k", aligned_host_buffer(2048))
    os.truncate(store.files["k"], 100)
    with pytest.raises(BadInputError, match="shorter") as info:
        store.read("k", aligned_host_buffer(2048))
    assert info.value.path == store.files["k"]


def test_nvme_preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "file"
    afile.write_text("x")
    with pytest.raises(BadInputError, match="not a directory"):
        NvmeStore(afile).preflight(1)
    with pytest.raises(BadInputError, match="free but the plan needs"):
        NvmeStore(tmp_path).preflight(10**18)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(BadInputError, match="read-only") as info:
        NvmeStore(tmp_path / "sub").preflight(1)
    assert info.value.field == "nvme"


def test_nvme_full_is_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(BadInputError, match="is full"):
        NvmeStore(tmp_path).preflight(1)


def test_memory_tier_budget() -> None:
    tier = MemoryTier("device", 1000)
    tier.alloc("a", 200)
    with pytest.raises(BudgetExceededError) as info:
        tier.alloc("b", 100)
    assert info.value.field == "device_budget"
    tier.free("a")
    tier.alloc("b", 100)
    assert tier.used == 400 and tier.peak == 800


def test_cli_train_and_plan_json(tmp_path: Path) -> None:
    import json as _json

    result = runner.invoke(app, ["train", "--device-budget", "1.8MB", "--host-budget", "2MB",
                                 "--steps", "2", "--nvme", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    doc = _json.loads(result.stdout[result.stdout.index("{"):])
    assert doc["summary"]["chunks_nvme"] > 0 and len(doc["losses"]) == 2
    result = runner.invoke(app, ["plan", "--params", "114e9", "--gpu", "a100-80g", "--json"])
    assert result.exit_code == 0
    assert _json.loads(result.stdout)["params"] > 100e9


@pytest.mark.parametrize("args, message", [
    (["train", "--device-budget", "100kB"], "cannot hold even one layer"),
    (["train", "--device-budget", "lots"], "cannot read"),
    (["train", "--model", "nope.json"], "no such model config"),
    (["plan", "--gpu", "v100"], "unknown gpu"),
])
def test_cli_errors_are_one_line(args: list[str], message: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("params", ["nan", "inf", "-inf", "1e30"])
def test_plan_rejects_non_finite_or_huge_params(params: str) -> None:
    result = runner.invoke(app, ["plan", "--params", params])
    assert result.exit_code == 2
    assert "field 'params'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", [["hardware"], ["train", "--steps", "1"]])
def test_nvme_path_that_is_a_file_is_one_line_error(tmp_path: Path, command: list[str]) -> None:
    afile = tmp_path / "not-a-dir"
    afile.write_text("x")
    result = runner.invoke(app, [*command, "--nvme", str(afile)])
    assert result.exit_code == 2, result.output
    assert "field 'nvme'" in result.output and "not a directory" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_executor_without_cuda_is_one_line_error() -> None:
    result = runner.invoke(app, ["train", "--executor", "cuda", "--steps", "1"])
    assert result.exit_code == 2
    assert "field 'executor'" in result.output and "CUDA" in result.output
