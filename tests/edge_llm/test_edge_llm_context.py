"""Requests beyond the model's context window are never served silently."""

import json

import polars as pl
import pytest
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.edge_llm.cli import app
from schedlab.edge_llm.config import EdgeConfig
from schedlab.edge_llm.context import fit_to_context
from schedlab.edge_llm.simulator import simulate
from schedlab.edge_llm.workloads import EdgeRequest
from schedlab.llm.costmodel import get_model

QWEN = get_model("qwen3-8b").max_context  # 32,768


def _requests(lengths: list[int]) -> list[EdgeRequest]:
    return [EdgeRequest(i, 0.05 * i, n, 64, 15.0, 15.0, 2.0, 0.08)
            for i, n in enumerate(lengths)]


LENGTHS = [512, 40_000, 1_024, 121_000, 2_048, QWEN - 64]  # two beyond, one exactly at the edge


def test_refuse_serves_only_what_fits_and_counts_the_rest():
    result = simulate(_requests(LENGTHS), "online", EdgeConfig(model="qwen3-8b"))
    assert result.summary["refused"] == 2 and result.summary["truncated"] == 0
    assert result.summary["requests"] == 4
    assert sorted(result.requests["rid"].to_list()) == [0, 2, 4, 5]


def test_truncate_serves_every_request_within_the_window():
    fit = fit_to_context(_requests(LENGTHS), QWEN, "truncate")
    assert fit.truncated == 2 and fit.refused == 0 and len(fit.requests) == len(LENGTHS)
    assert all(r.input_len + r.output_len <= QWEN for r in fit.requests)
    assert fit.longest == 121_064
    result = simulate(_requests(LENGTHS), "cloud", EdgeConfig(model="qwen3-8b", context="truncate"))
    assert result.summary["requests"] == len(LENGTHS) and result.summary["truncated"] == 2


def test_a_model_with_a_short_window_refuses_more():
    fit = fit_to_context(_requests(LENGTHS), get_model("llama-3-8b").max_context, "refuse")
    assert fit.refused == 3  # 8k: 40k, 121k and the 32k-edge prompt


def test_bad_policy_and_nothing_left_are_one_line_errors():
    with pytest.raises(ConfigError, match="context"):
        EdgeConfig(context="drop").validate()
    with pytest.raises(BadInputError, match="every request exceeds"):
        simulate(_requests([50_000, 60_000]), "online", EdgeConfig(model="qwen3-8b"))


def test_cli_says_how_many_were_refused(tmp_path):
    path = tmp_path / "reqs.csv"
    pl.DataFrame(dict(arrival=[0.05 * i for i in range(len(LENGTHS))], input_len=LENGTHS,
                      output_len=[64] * len(LENGTHS))).write_csv(path)
    res = CliRunner().invoke(app, ["simulate", "--requests", str(path), "--model", "qwen3-8b",
                                   "--policy", "online", "--json"])
    assert res.exit_code == 0, res.output
    assert "2 of 6 requests refused" in res.stderr
    assert json.loads(res.stdout)["summaries"][0]["refused"] == 2
    res = CliRunner().invoke(app, ["simulate", "--requests", str(path), "--model", "qwen3-8b",
                                   "--context", "bogus"])
    assert res.exit_code == 2 and "context" in res.output


def test_a_mooncake_csv_goes_through_trace_and_over_context_prompts_are_refused(tmp_path):
    """The vendored slice's form (timestamp_ms,input_length,output_length) is read by
    ``--trace`` (auto-detected, or ``--format mooncake-csv``); its over-context prompts are
    refused with the count said; an unknown --format is a one-line error."""
    path = tmp_path / "slice.csv"
    pl.DataFrame(dict(timestamp_ms=[50 * i for i in range(len(LENGTHS))], input_length=LENGTHS,
                      output_length=[64] * len(LENGTHS))).write_csv(path)
    for extra in ([], ["--format", "mooncake-csv"]):
        res = CliRunner().invoke(app, ["simulate", "--trace", str(path), "--model", "qwen3-8b",
                                       "--policy", "online-paper", "--json", *extra])
        assert res.exit_code == 0, res.output
        assert "2 of 6 requests refused" in res.stderr
        summary = json.loads(res.stdout)["summaries"][0]
        assert summary["refused"] == 2 and summary["requests"] == 4
    res = CliRunner().invoke(app, ["simulate", "--trace", str(path), "--format", "sharegpt"])
    assert res.exit_code == 2 and "format" in res.output
