"""The real split-serving harness: two processes, real KV tensors over a shaped TCP link."""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("torch", reason="the harness needs the 'hf' extra (torch)")
pytest.importorskip("transformers", reason="the harness needs the 'hf' extra (transformers)")

from schedlab.core.errors import BadInputError, ConfigError  # noqa: E402
from schedlab.edge_llm.harness import (  # noqa: E402
    MODES,
    Harness,
    HarnessDelayModel,
    HarnessRouter,
    LinkSpec,
    StepFit,
    TinyModel,
    error_table,
    pin_plan,
    repeated,
)

LINK = LinkSpec(backhaul_mbps=40.0, backhaul_ms=5.0, wan_ms=20.0)
REQUESTS = [(0.0, 200, 6), (0.05, 64, 6), (0.1, 320, 6)]
TWO_CPUS = len(os.sched_getaffinity(0)) >= 2
ROOT = os.geteuid() == 0
NICE = -2 if ROOT else 0  # a raised priority needs root


@pytest.fixture(scope="module")
def harness():
    with Harness(TinyModel(), LINK, pin=TWO_CPUS, nice=NICE) as h:
        h.profile(lengths=(32, 128, 320), contexts=(32, 320), repeats=2)
        yield h


def test_split_decoding_continues_from_the_shipped_kv_exactly(harness):
    """Greedy tokens are identical whether one process decodes its own cache or the other
    decodes the KV tensors shipped to it, in both directions."""
    tokens = {
        mode: [r["tokens"] for r in harness.replay(REQUESTS, mode, seed=3)]
        for mode in ("cloud", "split", "mix", "disagg")
    }
    assert all(len(t) == 6 for t in tokens["cloud"])
    assert tokens["split"] == tokens["cloud"] == tokens["mix"] == tokens["disagg"]


def test_kv_transfer_is_real_and_shaped(harness):
    rows = harness.replay(REQUESTS, "split", seed=1)
    for r in rows:
        assert r["kv_bytes"] == TinyModel().kv_bytes_per_token * r["input_len"]
        wire = r["kv_bytes"] * 8 / (LINK.backhaul_mbps * 1e6) + LINK.backhaul_ms / 1e3
        assert r["kv_s"] >= 0.9 * wire  # the link really runs at the shaped rate
        # the wire time alone (what corrects the delay model's link) is part of it
        assert 0.9 * (wire - LINK.backhaul_ms / 1e3) <= r["wire_s"] <= r["kv_s"] + 1e-6
    assert harness.shaping in ("tc", "paced")


def test_link_correction_and_kv_handoff_enter_only_the_split_modes():
    prof = dict(lengths=[32, 128, 320], prefill_s=[0.01, 0.02, 0.05], contexts=[32, 320],
                decode_s=[0.001, 0.002], export_s=[0.001, 0.004], import_s=[0.002, 0.008])
    fit = StepFit.fit(prof)
    assert fit.export_s(320) == pytest.approx(0.004) and fit.import_s(32) == pytest.approx(0.002)
    bare = StepFit.fit({k: v for k, v in prof.items() if k not in ("export_s", "import_s")})
    assert bare.export_s(320) == bare.import_s(320) == 0.0
    model = HarnessDelayModel({"cloud": fit, "edge": fit}, TinyModel(), LINK)
    plain = HarnessDelayModel({"cloud": bare, "edge": bare}, TinyModel(), LINK)
    nominal = model.kv_s(320)
    for m in MODES:  # the hand-off (export there, import here) costs the split modes only
        gap = model.predict(m, 320, 6, 0.0).e2e - plain.predict(m, 320, 6, 0.0).e2e
        assert gap == pytest.approx(0.012 if m in ("split", "disagg") else 0.0, abs=1e-9)
    before = {m: model.predict(m, 320, 6, 0.0).e2e for m in MODES}
    for _ in range(60):  # the link delivers 1.5x slower than its nominal rate
        model.observe_link(1.5 * nominal, 320)
    assert model.link_scale == pytest.approx(1.5, rel=1e-3)
    for m in MODES:
        grew = model.predict(m, 320, 6, 0.0).e2e - before[m]
        assert grew == pytest.approx(0.5 * nominal if m in ("split", "disagg") else 0.0,
                                     rel=1e-3, abs=1e-9)


def test_router_drives_the_harness_and_predictions_are_reported(harness):
    rows = harness.replay(REQUESTS, HarnessRouter(), seed=2)
    assert {r["mode"] for r in rows} <= {"cloud", "split", "mix", "disagg"}
    for r in rows:
        assert 0 < r["ttft"] < r["e2e"] and math.isfinite(r["pred_e2e"])
        assert r["pred_ttft"] > 0 and r["pred_e2e"] > r["pred_ttft"]
    err = error_table(rows)
    assert set(err) == {"ttft_mape", "tpot_mape", "e2e_mape", "mean_e2e_err"}
    # the cloud is wan_ms away: its TTFT includes both WAN legs
    cloud = harness.replay([(0.0, 32, 3)], "cloud", seed=0)[0]
    assert cloud["ttft"] >= 2 * LINK.wan_ms / 1e3


def test_bad_input_is_one_line(harness):
    with pytest.raises(BadInputError, match="unknown mode"):
        harness.replay(REQUESTS, "edge-only")
    with pytest.raises(BadInputError, match="request 0"):
        harness.replay([(0.0, 0, 4)], "cloud")
    with pytest.raises(ConfigError, match="backhaul_mbps"):
        LinkSpec(backhaul_mbps=-1).validate()
    with pytest.raises(ConfigError, match="shaping"):
        LinkSpec(shaping="netem").validate()
    with pytest.raises(ConfigError, match="heads"):
        TinyModel(hidden=250).validate()


def test_paced_fallback_then_a_dead_site_fails_fast_and_close_leaves_nothing(harness):
    """The shaping used without root/ip/tc (a paced sender) keeps the link rate and gives the
    same tokens; a site that dies fails the replay with one line (never a hang); close leaves
    no site process, namespace or temporary directory behind."""
    link = LinkSpec(backhaul_mbps=40.0, backhaul_ms=5.0, wan_ms=20.0, shaping="paced")
    h = Harness(TinyModel(), link).__enter__()
    try:
        assert h.shaping == "paced" and h.ns is None
        h.fits = dict(harness.fits)  # same model on the same machine: skip profiling
        rows = h.replay(REQUESTS, "split", seed=3)
        for r in rows:
            wire = r["kv_bytes"] * 8 / (link.backhaul_mbps * 1e6) + link.backhaul_ms / 1e3
            assert r["kv_s"] >= 0.9 * wire
        assert [r["tokens"] for r in rows] == [
            r["tokens"] for r in harness.replay(REQUESTS, "split", seed=3)
        ]
        h.procs["edge"].kill()
        h.procs["edge"].wait(10)
        with pytest.raises(ConfigError, match="edge site"):
            h.replay(REQUESTS, "split", seed=0)
    finally:
        h.close()
    assert all(p.poll() is not None for p in h.procs.values())
    assert not h.workdir.exists()


@pytest.mark.skipif(not TWO_CPUS, reason="pinning needs two CPUs")
def test_each_site_runs_on_its_own_core(harness):
    """Pinned: the cloud and the edge process are each bound to one core, never the same."""
    cores = {role: os.sched_getaffinity(proc.pid) for role, proc in harness.procs.items()}
    assert cores == {"cloud": {harness.cpus["cloud"]}, "edge": {harness.cpus["edge"]}}
    assert harness.cpus["cloud"] != harness.cpus["edge"]
    with pytest.raises(ConfigError, match="1 thread"):
        pin_plan({"cloud": 2, "edge": 1})


@pytest.mark.skipif(not ROOT, reason="a raised priority needs root")
def test_sites_run_at_the_raised_priority_in_their_own_scheduler_group(harness):
    """--nice: each site runs at that nice value, and where the kernel groups threads by
    session (autogroups, in which a plain nice value ranks nothing against other sessions) each
    site is its own session whose group carries the nice value; the client gets its own
    priority back on close."""
    for proc in harness.procs.values():
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == NICE
        assert os.getsid(proc.pid) == proc.pid
        group = f"/proc/{proc.pid}/autogroup"
        if os.path.exists(group):
            with open(group) as f:
                assert f.read().split()[-1] == str(NICE)
    with pytest.raises(ConfigError, match="nice"):
        Harness(TinyModel(), LINK, nice=-30)


def test_repeats_report_prediction_error_per_mode_with_intervals(harness):
    """Each repeat is its own seeded stream with the policy order rotated; per mode the mean
    and 95% CI over repeats of measured E2E and of the prediction error; online against the
    best fixed mode of the same repeat; the sites' CPU share says how contended they were."""
    out = repeated(2, n=3, rate=20.0, policies=("cloud", "online"), harness=harness)
    assert [(r["repeat"], r["policy"]) for r in out["runs"]] == [
        (0, "cloud"), (0, "online"), (1, "online"), (1, "cloud")]
    for policy in ("cloud", "online"):
        stats = out["per_mode"][policy]
        for key in ("mean_e2e", "mean_e2e_err", "e2e_mape", "ttft_mape", "tpot_mape"):
            mean, half = stats[key]
            assert math.isfinite(mean) and half >= 0
        assert 0.0 < stats["cpu_share"][0] <= 1.05
    assert len(out["online"]["gain_vs_best_fixed"]) == 2
    assert out["pinned"] == harness.cpus
    with pytest.raises(BadInputError, match="repeats"):
        repeated(0, harness=harness)
