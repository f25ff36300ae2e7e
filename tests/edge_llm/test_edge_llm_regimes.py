"""Regime sweep, the Alibaba arrival adapter, real trace readers and the step calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.data import data_dir
from schedlab.core.errors import BadInputError
from schedlab.edge_llm import EdgeConfig, simulate
from schedlab.edge_llm.alibaba import read_arrivals, window
from schedlab.edge_llm.calibration import correction_for
from schedlab.edge_llm.sweep import BASELINES, sweep, versus_best
from schedlab.edge_llm.workloads import from_trace

LLM_DATA = Path(__file__).resolve().parents[1] / "llm" / "data"
VIDUR = data_dir() / "vidur_profiles"


def test_sweep_compares_online_with_every_baseline_on_the_same_requests():
    frame = sweep(40, 0, axes=("cloud_sm",))
    assert set(frame["policy"]) == {*BASELINES, "online"}
    vs = versus_best(frame)
    assert vs.height == 4  # one row per point
    for row in vs.iter_rows(named=True):
        point = frame.filter((frame["axis"] == row["axis"]) & (frame["value"] == row["value"]))
        base = point.filter(point["policy"].is_in(list(BASELINES)))
        assert row["best_e2e"] == pytest.approx(base["mean_e2e"].min())
        assert row["n_cloud"] + row["n_split"] + row["n_mix"] + row["n_disagg"] == 40
        # the paired interval brackets the point estimate
        assert row["gain_lo"] <= row["gain_pct"] + 1e-9 <= row["gain_hi"] + 2e-9


def test_paired_gain_interval_tells_a_tie_from_a_loss():
    import polars as pl

    from schedlab.edge_llm.sweep import paired_gain_ci

    rng = np.random.default_rng(0)
    peer = pl.DataFrame({"rid": range(200), "e2e": rng.uniform(1.0, 5.0, 200)})
    assert paired_gain_ci(peer, peer) == (0.0, 0.0)
    # the same requests each 1% slower: significantly worse, although the workload's own
    # spread (1-5 s) dwarfs the difference
    slower = peer.with_columns(pl.col("e2e") * 1.01)
    lo, hi = paired_gain_ci(slower, peer)
    assert hi < 0 and lo == pytest.approx(-1.0, abs=0.01)
    # a few requests worse, a few better, by the same amounts: a tie (0 inside the interval)
    noisy = peer.with_columns(pl.col("e2e") + rng.normal(0.0, 0.2, 200))
    lo, hi = paired_gain_ci(noisy, peer)
    assert lo < 0 < hi


def test_trace_readers_drive_a_replay():
    """The schedlab.llm readers (Azure, Mooncake formats) feed the edge replay."""
    from schedlab.llm.traces import read_trace

    for name in ("sample_azure.csv", "sample_mooncake.jsonl"):
        trace = read_trace(LLM_DATA / name)
        reqs = from_trace(trace, seed=0)
        res = simulate(reqs, "online", EdgeConfig(cloud_sm_budget=0.3))
        assert res.summary["requests"] == len(reqs) > 10
        assert [r.input_len for r in reqs] == [max(1, int(r.input_len)) for r in trace]


def test_alibaba_arrivals_bad_rows_name_line_and_field(tmp_path):
    path = tmp_path / "genai.csv"
    path.write_text("gmt_create,x\n2024-11-15 16:57:50,1\nyesterday,2\n")
    with pytest.raises(BadInputError, match=r"genai.csv:3: field .gmt_create."):
        read_arrivals(path)
    path.write_text("when,x\n1,2\n")
    with pytest.raises(BadInputError, match="gmt_create"):
        read_arrivals(path)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 10_000), min_size=3, max_size=60),
    st.floats(0.1, 20.0),
    st.integers(0, 100),
)
def test_window_keeps_order_count_and_rate(stamps, rate, seed):
    arrivals = np.sort(np.asarray(stamps, dtype=float))
    n = len(stamps) - 1
    t = window(arrivals, n, rate, seed)
    assert t.size == n and t[0] == 0.0 and np.all(np.diff(t) >= 0)
    assert (n - 1) / t[-1] == pytest.approx(rate)


def test_step_correction_maps_every_deployment_gpu_to_a_profile():
    for gpu, model in (("a800", "llama-3-8b"), ("a6000", "qwen3-8b"), ("h200", "llama-3-8b")):
        corr = correction_for(gpu, model)
        assert corr is not None and 0.5 < corr.factor(256) < 1.5
    assert correction_for("a800", "llama-3-8b").source == "vidur:a100-80g/llama-3-8b"
    assert correction_for("a6000", "llama-3-8b").source == "vidur:a40/llama-2-7b"


@pytest.mark.skipif(not VIDUR.is_dir(), reason="Vidur profiles not in ../shared/data")
def test_corrected_steps_match_vidur_on_the_shapes_the_delay_model_runs():
    from schedlab.edge_llm.calibration import fit

    _, rows = fit(VIDUR)
    run = [r for r in rows if r["tokens"] in (1, 4, 16, 64, 128, 256, 512)]
    assert max(abs(r["error"]) for r in run) <= 0.10
    held = [r for r in rows if r["held_out"]]
    assert np.mean([abs(r["error"]) for r in held]) < np.mean([abs(r["llm_error"]) for r in held])


def test_an_arrival_on_a_window_boundary_does_not_stall_the_replay():
    """8.26 / 0.02 rounds to 412.999...: the window must still contain the request (a
    Mooncake trace with millisecond stamps hung the engine before)."""
    from schedlab.edge_llm.workloads import generate

    reqs = generate(3, 1.0, 0)
    for r, t in zip(reqs, (8.24, 8.26, 8.28), strict=True):
        r.arrival = t
    assert simulate(reqs, "cloud", EdgeConfig()).summary["requests"] == 3


def test_paced_sender_holds_the_rate_without_tc():
    """The fallback shaping (no root/tc): a paced sender keeps the link rate."""
    import socket
    import threading
    import time

    from schedlab.edge_llm.harness import recv_msg, send_msg

    a, b = socket.socketpair()
    got = {}

    def read():
        got["msg"] = recv_msg(b)

    reader = threading.Thread(target=read)
    reader.start()
    payload = bytes(100_000)
    t0 = time.monotonic()
    send_msg(a, dict(op="kv", rid=1), payload, pace_bps=8e6)  # 100 kB at 8 Mbit/s = 0.1 s
    reader.join(10)
    assert time.monotonic() - t0 >= 0.09
    assert got["msg"] == (dict(op="kv", rid=1), payload)
    a.close()
    b.close()


def test_hopper_sites_launch_hopper_kernels_with_derived_smem():
    from schedlab.edge_llm.hopper import BARRIER_BYTES, get_kernel, kernels
    from schedlab.edge_llm.sites import make_sites
    from schedlab.llm import occupancy as occ

    site = make_sites(EdgeConfig(cloud_gpu="h100"))["cloud"]
    assert site.arch.name == "sm90"
    assert all(k.name.startswith("sm90_") for k in site.prefill_kernels + site.decode_kernels)
    big = get_kernel(site.prefill_kernels[0].name)
    assert big.smem == 4 * (128 + 256) * 64 * 2 + 4 * BARRIER_BYTES and big.threads == 384
    assert kernels("sm80", "prefill", "gemm") == occ.kernels("sm80", "prefill", "gemm")
    with pytest.raises(BadInputError, match="kernel"):
        get_kernel("no_such_kernel")
