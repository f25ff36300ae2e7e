"""One setting finds the data: --data / $SCHEDLAB_DATA, the user cache dir, ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schedlab import cli
from schedlab.core import data
from schedlab.core.errors import ConfigError
from schedlab.core.executors import LocalExecutor


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An empty cache dir and a repository fallback that holds data; no $SCHEDLAB_DATA."""
    cache, repo = tmp_path / "cache" / "data", tmp_path / "shared" / "data"
    (repo / "eua").mkdir(parents=True)
    monkeypatch.setenv(data.ENV, "")  # recorded, so restored even where it was unset before
    monkeypatch.delenv(data.ENV)
    monkeypatch.setattr(data, "cache_dir", lambda: cache)
    monkeypatch.setattr(data, "REPO_FALLBACK", repo)
    return dict(cache=cache, repo=repo, tmp=tmp_path)


def test_fallback_is_the_repository_copy_while_the_cache_is_empty(places):
    assert data.data_dir() == places["repo"]
    places["cache"].mkdir(parents=True)  # an empty cache does not count
    assert data.data_dir() == places["repo"]
    assert data.data_path("eua", "u.csv") == places["repo"] / "eua" / "u.csv"


def test_a_cache_holding_data_wins_over_the_fallback_path_by_path(places):
    (places["cache"] / "burstgpt").mkdir(parents=True)
    assert data.data_dir() == places["cache"]
    assert data.data_path("burstgpt") == places["cache"] / "burstgpt"
    # what only the repository's copy has stays found: no silent stand-in after one fetch
    assert data.data_path("eua") == places["repo"] / "eua"
    (places["cache"] / "eua").mkdir()
    assert data.data_path("eua") == places["cache"] / "eua"
    assert data.data_path("mcs", "s20.A00") == places["cache"] / "mcs" / "s20.A00"  # nowhere


def test_the_environment_wins_over_everything(places, monkeypatch):
    (places["cache"] / "eua").mkdir(parents=True)
    mine = places["tmp"] / "mine"
    monkeypatch.setenv(data.ENV, str(mine))  # even a directory that does not exist yet
    assert data.data_dir() == mine and data.download_dir() == mine
    assert data.data_path("eua") == mine / "eua"  # exclusive: no fallback to the repo's copy


def test_with_no_data_anywhere_the_cache_dir_is_named(places, monkeypatch):
    monkeypatch.setattr(data, "REPO_FALLBACK", places["tmp"] / "nowhere")
    assert data.data_dir() == places["cache"]
    assert data.download_dir() == places["cache"]  # fetch never writes into ../shared/data


def test_use_data_dir_sets_the_environment_and_rejects_a_non_directory(places, monkeypatch):
    target = places["tmp"] / "d"
    with pytest.raises(ConfigError, match="not a directory"):
        data.use_data_dir(target)
    target.mkdir()
    monkeypatch.setenv(data.ENV, "")  # monkeypatch restores the variable afterwards
    assert data.use_data_dir(target) == target.resolve()
    assert os.environ[data.ENV] == str(target.resolve()) and data.data_dir() == target.resolve()


def test_spawned_workers_inherit_the_setting(places, monkeypatch):
    target = places["tmp"] / "d"
    target.mkdir()
    monkeypatch.setenv(data.ENV, "")
    data.use_data_dir(target)
    pool = LocalExecutor(jobs=2)
    try:
        seen = dict(pool.map_unordered(os.getenv, [data.ENV, data.ENV]))
    finally:
        pool.close()
    assert set(seen.values()) == {str(target.resolve())}


def test_reproduce_data_option(places, monkeypatch, tmp_path):
    runner = CliRunner()
    monkeypatch.setenv(data.ENV, "")
    bad = runner.invoke(cli.app, ["reproduce", "core", "--quick", "--data",
                                  str(tmp_path / "missing"), "--out", str(tmp_path / "r")])
    assert bad.exit_code == 2 and "missing is not a directory" in bad.stderr
    assert "Traceback" not in bad.output
    target = tmp_path / "d"
    target.mkdir()
    ok = runner.invoke(cli.app, ["reproduce", "core", "--quick", "--seeds", "1", "--jobs", "1",
                                 "--data", str(target), "--out", str(tmp_path / "r")])
    assert ok.exit_code == 0, ok.output
    assert os.environ[data.ENV] == str(target.resolve())


def test_no_module_finds_data_by_its_place_in_the_source_tree():
    """Every reader asks schedlab.core.data; only that module knows ../shared/data."""
    src = Path(data.__file__).resolve().parents[1]
    offenders = [str(p.relative_to(src)) for p in src.rglob("*.py")
                 if p.name != "data.py" and '"shared" / "data"' in p.read_text(encoding="utf-8")]
    assert offenders == []


def test_readers_ask_the_resolver_when_called_not_at_import(tmp_path, monkeypatch):
    from schedlab.couchsurfer.interference import shared_measurements
    from schedlab.edge_llm.alibaba import default_path
    from schedlab.mec_coalition.experiment import eua_dir
    from schedlab.traces.alibaba_gpu2023 import shared_trace
    from schedlab.xbucket.experiment import real_traces

    monkeypatch.setenv(data.ENV, str(tmp_path))  # after the imports: must still count
    assert shared_trace() is None and shared_measurements() is None and eua_dir() is None
    assert real_traces() == {}
    assert default_path() == tmp_path / "alibaba" / "genai_lora_request_trace.csv"
    (tmp_path / "xbucket").mkdir()
    (tmp_path / "xbucket" / "w.txt").write_text(
        "taskid -- core -- memory -- virtual_memory -- disk -- time -- average_cores -- tag\n"
        "1 -- 1 -- 92 -- 661 -- 318 -- 12.3 -- 0.18 -- 1\n")
    assert list(real_traces()) == ["w"]
