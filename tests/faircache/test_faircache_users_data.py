"""Users' data: tenant assignment on Mooncake-shaped traces, context-length checks, tenant
weights and the per-tenant fairness report (real simulator, real CLI, real files)."""

import json
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.faircache import EngineConfig, simulate
from schedlab.faircache.cli import app
from schedlab.faircache.report import build_report, difference_over_time, load_result
from schedlab.llm import assign_tenants, read_mooncake
from schedlab.llm.requests import fit_context

runner = CliRunner()


def _mooncake(path, n=120, apps=8, sessions=13, long_prompt=None):
    """Mooncake's shape: every prompt starts with the same system-prompt blocks (0, 1, 2),
    then one of ``apps`` application prompts, then private blocks."""
    lines, nxt = [], 1000
    for k in range(n):
        hashes = [0, 1, 2, 10 + k % apps, nxt, nxt + 1]
        nxt += 2
        lines.append(
            dict(
                timestamp=k * 40,
                input_length=len(hashes) * 512,
                output_length=16,
                hash_ids=hashes,
                session_id=f"s{k % sessions}",
            )
        )
    if long_prompt:
        lines.append(
            dict(
                timestamp=n * 40,
                input_length=long_prompt,
                output_length=100,
                hash_ids=list(range(50_000, 50_000 - (-long_prompt // 512))),
            )
        )
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_prefix_assignment_skips_the_global_system_prompt(tmp_path):
    trace = read_mooncake(_mooncake(tmp_path / "m.jsonl"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no collapse warning
        used = assign_tenants(trace.requests, 4, "prefix")
    assert used == 4
    by_app = {}
    for r in trace:  # every application prompt stays on one tenant
        assert by_app.setdefault(r.blocks[3], r.tenant) == r.tenant
    counts = np.bincount([r.tenant for r in trace], minlength=4)
    assert counts.min() == counts.max() == 30  # 8 apps dealt out evenly


def test_session_assignment_and_collapse_warning(tmp_path):
    trace = read_mooncake(_mooncake(tmp_path / "m.jsonl"))
    assert {r.session for r in trace} == set(range(13))
    assert assign_tenants(trace.requests, 4, "session") == 4
    by_session = {}
    for r in trace:
        assert by_session.setdefault(r.session, r.tenant) == r.tenant
    # a trace whose prompts are all one prefix collapses onto one tenant: a warning says so
    same = read_mooncake(_mooncake(tmp_path / "one.jsonl", n=10, apps=1))
    for r in same:
        r.blocks = r.blocks[:4]
        r.input_len = 4 * 512
    with pytest.warns(UserWarning, match="one tenant"):
        assert assign_tenants(same.requests, 4, "prefix") == 1
    plain = read_mooncake(tmp_path / "one.jsonl")
    for r in plain:
        r.session = -1
    with pytest.raises(BadInputError, match="no session"):
        assign_tenants(plain.requests, 4, "session")


def test_long_prompt_is_refused_with_file_and_line(tmp_path):
    path = _mooncake(tmp_path / "long.jsonl", n=5, long_prompt=87_000)
    trace = read_mooncake(path)
    with pytest.raises(BadInputError) as info:
        simulate(trace, "vtc", "lru", EngineConfig(model="llama-3-8b"))
    text = str(info.value)
    assert "long.jsonl:6" in text and "input_length" in text and "8192" in text
    result = runner.invoke(app, ["simulate", "--trace", str(path), "--assign", "prefix"])
    assert result.exit_code == 2 and "long.jsonl:6" in result.output


def test_long_prompt_truncated_on_request(tmp_path):
    trace = read_mooncake(_mooncake(tmp_path / "long.jsonl", n=5, long_prompt=200_000))
    res = simulate(trace, "vtc", "lru", EngineConfig(model="llama-3-8b", context="truncate"))
    assert res.summary["truncated"] == 1 and res.summary["requests"] == 6
    last = max(trace.requests, key=lambda r: r.rid)
    assert last.input_len + last.output_len == 8192
    assert len(last.blocks) == -(-last.input_len // 512)
    with pytest.raises(BadInputError):
        fit_context(trace, 8192, "llama-3-8b", "chop")


@pytest.mark.parametrize("scheduler", ["vtc", "faircache"])
@pytest.mark.parametrize("weights", [(2.0, 1.0), (1.0, 3.0)])
def test_tenant_weights_give_proportional_service(scheduler, weights):
    # VTC's weighted fairness: while both tenants are backlogged, service ∝ weight
    from schedlab.faircache.metrics import backlogged_window
    from schedlab.llm import vtc_scenario

    trace = vtc_scenario("overload", duration=60, seed=0, rate=12)
    res = simulate(trace, scheduler, "lru", EngineConfig(tenant_weights=weights, kv_tokens=4096))
    served = backlogged_window(res.samples, "compute_service")
    assert served[0] / served[1] == pytest.approx(weights[0] / weights[1], rel=0.05)


def test_bad_tenant_weights():
    from schedlab.llm import vtc_scenario

    trace = vtc_scenario("overload", duration=10, seed=0)
    with pytest.raises(ConfigError, match="tenant_weights"):
        EngineConfig(tenant_weights=(1.0, 0.0))
    with pytest.raises(ConfigError, match="2 tenants"):
        simulate(trace, "vtc", "lru", EngineConfig(tenant_weights=(1.0, 1.0, 1.0)))


def test_report_on_both_yardsticks(tmp_path):
    path = _mooncake(tmp_path / "m.jsonl", n=200)
    out = tmp_path / "res"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(path),
            "--assign",
            "session",
            "--tenants",
            "4",
            "--weights",
            "t0=2",
            "--scheduler",
            "faircache",
            "--cache",
            "lru",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "4 of 4 tenants" in result.output
    result = runner.invoke(app, ["report", str(out), "--plot", str(out / "d.png"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert [t["weight"] for t in doc["tenants"]] == [2.0, 1.0, 1.0, 1.0]
    assert set(doc["fairness"]) == {"compute", "unified"}
    for f in doc["fairness"].values():
        assert 0 < f["jain"] <= 1 and sum(f["shares"]) == pytest.approx(1.0)
    assert all(t["ttft_p99"] >= t["ttft_p50"] for t in doc["tenants"])
    assert (out / "d.png").read_bytes()[:4] == b"\x89PNG"
    tenants, requests, samples, summary = load_result(out)
    again = build_report(tenants, requests, samples, summary)
    assert again["fairness"]["compute"]["jain"] == pytest.approx(doc["fairness"]["compute"]["jain"])
    times, diff = difference_over_time(
        samples, "compute_service", {t["tenant"]: t["weight"] for t in doc["tenants"]}
    )
    assert len(times) == len(diff) and (diff >= 0).all()
    table = runner.invoke(app, ["report", str(out)])
    assert table.exit_code == 0 and "unified" in table.stdout and "Jain" in table.stdout


@pytest.mark.parametrize(
    "weights, message",
    [
        ("t9=2", "unknown tenant"),
        ("t0=-1", "> 0"),
        ("1,2", "2 weights for 4"),
        ("t0=2,3", "mixes"),
        ("t0=x", "not a number"),
    ],
)
def test_bad_weights_are_one_line_errors(tmp_path, weights, message):
    path = _mooncake(tmp_path / "m.jsonl", n=20)
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(path),
            "--assign",
            "session",
            "--tenants",
            "4",
            "--weights",
            weights,
        ],
    )
    assert result.exit_code == 2 and message in result.output and "weights" in result.output


def test_report_bad_folders(tmp_path):
    result = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such folder" in result.output
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "tenants.csv").write_text("tenant\nt0\n")
    result = runner.invoke(app, ["report", str(tmp_path / "r")])
    assert result.exit_code == 2 and "missing requests.parquet" in result.output


def test_empty_session_id_names_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1],'
        ' "session_id": "a"}\n{"timestamp": 1, "input_length": 5, "output_length":'
        ' 1, "hash_ids": [1], "user_id": " "}\n'
    )
    with pytest.raises(BadInputError) as info:
        read_mooncake(bad)
    assert "bad.jsonl:2" in str(info.value) and "user_id" in str(info.value)


def test_price_sweep_reports_both_yardsticks():
    from schedlab.core.experiment import get_experiment
    from schedlab.faircache.experiment import price_sweep

    assert get_experiment("faircache.price_sweep") is not None
    res = price_sweep(duration=6.0, seed=0)  # structure and defaults only (was 20 s: 3.6x the CPU)
    frame = res.frame
    assert {"compute_ratio", "unified_ratio", "jain_compute", "jain_unified"} <= set(frame.columns)
    fc = frame.filter(frame["scheduler"] == "faircache")
    assert "hardware" in fc["prices"].to_list() and fc.height == 10
    # the default (issue 47) is hbm_share read from the hardware: the KV pool's share of the
    # A10G's memory, 0.109, and the simulator uses it when none is given
    default = fc.filter(fc["prices"].str.starts_with("default"))
    assert default["hbm_share"].item() == pytest.approx(0.109, abs=0.001)
    hw = fc.filter(fc["prices"] == "hardware")
    assert hw["hbm_share"].item() == pytest.approx(default["hbm_share"].item(), abs=1e-4)
    assert res.claims == []  # report only: the paper gives no prices
