"""The vLLM queue and the SGLang policy hook, driven by the real CPU engine through shims that
hand them vLLM- and SGLang-shaped request objects (vLLM/SGLang need CUDA: not installable here)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedlab.core.errors import ConfigError  # noqa: E402
from schedlab.faircache.real_engine import serve  # noqa: E402
from schedlab.faircache.sglang import FairPolicy  # noqa: E402
from schedlab.faircache.vllm import HIT_READERS, FairQueue  # noqa: E402
from schedlab.faircache.vllm_shim import VLLMShim  # noqa: E402
from schedlab.llm.accounting import CostWeights  # noqa: E402
from schedlab.llm.engine import EngineOptions, request_tokens  # noqa: E402
from schedlab.llm.requests import BlockIds, Request, Trace  # noqa: E402

PRICES = CostWeights()  # compute-only prices: both sides charge identically


class SGLangShim(VLLMShim):
    """Drives FairPolicy the way SGLang's scheduler does: calc_priority, then admit the head."""

    name = "sglang-shim"

    def bind(self, view) -> None:
        self.n = view.n_tenants
        self.policy_hook = FairPolicy(
            self.policy,
            page_size=16,
            max_tenants=self.n,
            weights=PRICES,
            tenant_of=lambda r: r.sampling_params.custom_params["t"],
        )
        self.waiting: list = []
        self.reqs: dict[int, SimpleNamespace] = {}
        self.running = SimpleNamespace(reqs=[])
        self.fresh = True

    def on_arrival(self, req: Request, now: float) -> None:
        done = {"v": False}
        r = SimpleNamespace(
            rid=f"r{req.rid}",
            origin_input_ids=request_tokens(req, 16, 256),
            output_ids=[],
            prefix_indices=[],
            req=req,
            finished=lambda d=done: d["v"],
            done=done,
            sampling_params=SimpleNamespace(
                custom_params={"t": f"t{req.tenant}"}, max_new_tokens=req.output_len
            ),
        )
        self.reqs[req.rid] = r
        self.waiting.append(r)

    def pick(self, now: float):
        if self.fresh:
            self.policy_hook.calc_priority(self.waiting, self.running)
            self.fresh = False
        return self.waiting.pop(0).req if self.waiting else None

    def unpick(self, req: Request) -> None:
        self.waiting.insert(0, self.reqs[req.rid])

    def on_admit(self, req: Request, usage) -> None:
        r = self.reqs[req.rid]
        # SGLang holds the matched KV indices as a torch tensor
        r.prefix_indices = torch.arange(req.input_len - usage.computed_tokens)
        self.running.reqs.append(r)

    def on_iteration(self, out, kv, host, io) -> None:
        for r in self.running.reqs:
            r.output_ids.append(0)
        self.fresh = True

    def on_finish(self, req: Request, now: float) -> None:
        r = self.reqs.pop(req.rid)
        r.done["v"] = True
        self.running.reqs.remove(r)

    def queued(self) -> np.ndarray:
        counts = np.zeros(self.n, dtype=np.int64)
        for r in self.waiting:
            counts[r.req.tenant] += 1
        return counts


def _trace() -> Trace:
    # tenant 0 floods with a shared system prompt; tenants 1 and 2 send fewer, distinct prompts
    ids = BlockIds(1)
    system = ids.fresh(3)
    reqs = [Request(i, 0, 0.0, 80, 6, system + ids.fresh(2)) for i in range(12)]
    reqs += [Request(100 + i, 1 + i % 2, 0.0, 40, 6, ids.fresh(3)) for i in range(6)]
    return Trace(reqs, 16, "adapters", ["t0", "t1", "t2"])


OPTS = EngineOptions(max_batch=3, gpu_blocks=96)


@pytest.mark.parametrize("policy", ["vtc", "faircache"])
def test_vllm_queue_makes_the_same_decisions_as_the_scheduler(policy):
    trace = _trace()
    direct = serve(trace, policy, "lru", OPTS, weights=PRICES)
    shim = VLLMShim(policy, PRICES)
    via = serve(trace, shim, "lru", OPTS, weights=PRICES)
    assert via.requests["rid"].to_list() == direct.requests["rid"].to_list()
    # the counters it kept from vLLM-visible fields equal the engine's own accounting
    counters = shim.q.counters()
    truth = direct.tenants["compute_service" if policy == "vtc" else "unified_service"]
    assert [counters[f"t{t}"] for t in range(3)] == pytest.approx(truth.to_list())


@pytest.mark.parametrize("policy", ["vtc", "faircache"])
def test_vllm_queue_charges_preempted_requests_as_the_engine_does(policy):
    # a pool too small for every running request's output: the engine preempts by recompute
    # (prompt + generated tokens prefilled again); the queue, fed only vLLM-visible fields
    # (num_tokens, num_computed_tokens, prefill_stats), keeps the engine's own counters
    ids = BlockIds(1)
    system = ids.fresh(2)
    reqs = [Request(i, 0, 0.0, 40, 30, system + ids.fresh(1)) for i in range(5)]
    reqs += [Request(100 + i, 1 + i % 2, 0.0, 24, 30, ids.fresh(2)) for i in range(4)]
    trace = Trace(reqs, 16, "preempt", ["t0", "t1", "t2"])
    opts = EngineOptions(max_batch=3, gpu_blocks=10, preemption=True)
    direct = serve(trace, policy, "lru", opts, weights=PRICES)
    assert direct.summary["preemptions"] > 0 and direct.tenants["recomputed_tokens"].sum() > 0
    shim = VLLMShim(policy, PRICES)
    via = serve(trace, shim, "lru", opts, weights=PRICES)
    assert via.requests["rid"].to_list() == direct.requests["rid"].to_list()
    assert via.summary["preemptions"] == direct.summary["preemptions"]
    counters = shim.q.counters()
    truth = direct.tenants["compute_service" if policy == "vtc" else "unified_service"]
    assert [counters[f"t{t}"] for t in range(3)] == pytest.approx(truth.to_list())
    # every output token charged exactly once, recomputes as prefill
    assert direct.tenants["decode"].sum() == sum(r.output_len for r in trace.requests)


@pytest.mark.parametrize("policy", ["vtc", "faircache"])
def test_sglang_hook_charges_what_the_engine_measured_and_protects_light_tenants(policy):
    trace = _trace()
    shim = SGLangShim(policy)
    # a fixed step-time clock: the latency comparison with FCFS below is between two runs, and
    # on the measured CPU clock it moved with the machine's load (it failed once under load)
    opts = OPTS.model_copy(update={"step_time": (2e-3, 5e-5, 1e-4)})
    res = serve(trace, shim, "lru", opts, weights=PRICES)
    fcfs = serve(trace, "fcfs", "lru", opts, weights=PRICES)
    hook = shim.policy_hook
    # decode of the last step of each request is charged at the next calc_priority: flush it
    hook.calc_priority([], shim.running)
    counters = {name: float(hook.sched.counters[t]) for name, t in hook.tenants.items()}
    truth = res.tenants["compute_service" if policy == "vtc" else "unified_service"]
    assert [counters[f"t{t}"] for t in range(3)] == pytest.approx(truth.to_list())

    def light_p50(r):
        return float(r.requests.filter(r.requests["tenant"] > 0)["finish"].median())

    assert light_p50(res) < light_p50(fcfs)


def test_vllm_queue_rejects_bad_configuration(monkeypatch):
    with pytest.raises(ConfigError, match="VTC-family"):
        FairQueue("fcfs")
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_WEIGHTS", "acme")
    with pytest.raises(ConfigError, match="NAME=WEIGHT"):
        FairQueue.from_env(16)
    q = FairQueue("vtc", max_tenants=1, tenant_of=lambda r: r.t)
    q.add_request(SimpleNamespace(request_id="a", t="x", num_prompt_tokens=4))
    with pytest.raises(ConfigError, match="more than 1 tenants"):
        q.add_request(SimpleNamespace(request_id="b", t="y", num_prompt_tokens=4))
    with pytest.raises(ImportError, match="needs vLLM"):
        from schedlab.faircache.vllm import FairCacheVLLMScheduler  # noqa: F401


def test_vllm_queue_charges_a_preempted_request_again_and_peeks_without_charging():
    q = FairQueue("vtc", max_tenants=2, tenant_of=lambda r: r.t)
    a = SimpleNamespace(
        request_id="a",
        t="x",
        num_prompt_tokens=40,
        num_computed_tokens=0,
        prefill_stats=SimpleNamespace(num_cached_tokens=0),
        sampling_params=None,
    )
    b = SimpleNamespace(
        request_id="b",
        t="y",
        num_prompt_tokens=10,
        num_computed_tokens=0,
        prefill_stats=SimpleNamespace(num_cached_tokens=0),
        sampling_params=None,
    )
    q.add_request(a)
    q.add_request(b)
    assert len(q) == 2 and {r.request_id for r in q} == {"a", "b"}
    assert q.peek_request() is a and q.counters()["x"] == 0.0  # a peek charges nothing
    assert q.pop_request() is a and q.counters()["x"] == 40.0  # provisional, at pop
    a.num_computed_tokens = 40
    q.on_step({"a": 40}, {"a": a})  # settled: 40 prefill + 1 token (w_out 2)
    assert q.counters()["x"] == 42.0
    a.num_output_tokens = 1  # update_from_output appended the sampled token
    q.prepend_request(a)  # preempted: its KV is freed, prompt + that token are recomputed
    a.num_computed_tokens = 0
    assert q.pop_request() is b  # y has the smaller counter now
    assert q.pop_request() is a
    a.num_computed_tokens = 41
    q.on_step({"a": 41, "b": 10}, {"a": a, "b": b})
    # the recompute (40 prompt + 1 generated token) is prefill, its next token one output;
    # the token generated before the preemption is not charged as output again
    assert q.counters()["x"] == 42.0 + 41.0 + 2.0
    assert not q


def test_vllm_queue_reads_the_prefix_hit_at_peek_before_vllm_allocates():
    # vLLM's schedule(): peek -> get_computed_blocks -> allocate_slots (registers the request's
    # own prompt blocks in the prefix cache) -> pop. A lookup at pop would see the request's
    # own fresh blocks as a hit and charge almost nothing.
    cache = {"a": 16}  # a 16-token prefix of a's 64-token prompt is cached when it is peeked
    q = FairQueue(
        "vtc", max_tenants=2, tenant_of=lambda r: r.t, cached_tokens=lambda r: cache[r.request_id]
    )
    a = SimpleNamespace(
        request_id="a", t="x", num_prompt_tokens=64, num_computed_tokens=0, sampling_params=None
    )
    q.add_request(a)
    assert q.peek_request() is a
    cache["a"] = 48  # allocate_slots cached a's own full prompt blocks
    assert q.pop_request() is a
    assert q.counters()["x"] == 64 - 16


def test_vllm_queue_tells_faircache_when_an_admitted_request_finishes():
    # FairCache prepays running-KV memory at admission and refunds what is left when the
    # tenant has nothing running: the queue must report finishes, or the refund never comes
    q = FairQueue(
        "faircache", max_tenants=1, tenant_of=lambda r: "x", weights=CostWeights(p_kv=1.0)
    )

    def req(rid):
        sp = SimpleNamespace(max_tokens=4, extra_args=None)
        return SimpleNamespace(
            request_id=rid,
            num_prompt_tokens=8,
            num_computed_tokens=8,
            sampling_params=sp,
            prefill_stats=SimpleNamespace(num_cached_tokens=0),
        )

    a, b = req("a"), req("b")
    q.add_request(a)
    q.pop_request()
    q.on_step({"a": 8}, {"a": a}, kv_byte_s={"a": 3.0})  # 3 of memory per generated token
    q.on_finished("a")
    q.add_request(b)
    q.pop_request()
    q.on_step({"b": 8}, {"b": b}, kv_byte_s={"b": 0.0})
    assert q.sched.prepaid[0] > 0 and q.sched.in_flight[0] == 1
    q.on_finished("b")
    assert q.sched.in_flight[0] == 0 and q.sched.prepaid[0] == 0.0


def _vllm032_request(rid, tenant, prompt, cached=None, computed=0):
    """A request shaped like vLLM 0.32's: the hit lives in prefill_stats, not num_cached_tokens."""
    stats = None if cached is None else SimpleNamespace(num_cached_tokens=cached)
    return SimpleNamespace(
        request_id=rid,
        t=tenant,
        num_prompt_tokens=prompt,
        num_computed_tokens=computed,
        prefill_stats=stats,
        sampling_params=SimpleNamespace(max_tokens=4, extra_args=None),
    )


def test_vllm_queue_charges_only_what_vllm_computed_when_the_hit_is_in_prefill_stats():
    # issue 47: vLLM 0.32 keeps the hit in request.prefill_stats.num_cached_tokens; the adapter
    # read request.num_cached_tokens (gone) through getattr -> 0 and charged the whole prompt
    q = FairQueue("vtc", max_tenants=2, tenant_of=lambda r: r.t)
    a = _vllm032_request("a", "x", 288, cached=256)
    q.add_request(a)
    assert q.pop_request() is a
    a.num_computed_tokens = 288  # schedule(): the 256 cached plus 32 computed
    q.on_step({"a": 32}, {"a": a})
    assert q.counters()["x"] == 32 + 2  # 32 prefill tokens, one sampled token (w_out 2)


def test_vllm_queue_refuses_a_request_without_a_known_hit_field():
    q = FairQueue("vtc", max_tenants=1, tenant_of=lambda r: r.t)
    a = _vllm032_request("a", "x", 64, cached=None)  # no prefill_stats: not a silent 0
    q.add_request(a)
    q.pop_request()
    a.num_computed_tokens = 64
    with pytest.raises(ConfigError, match="prefill_stats.num_cached_tokens"):
        q.on_step({"a": 64}, {"a": a})
    legacy = FairQueue(
        "vtc", max_tenants=1, tenant_of=lambda r: r.t, prefix_hit=HIT_READERS["num_cached_tokens"]
    )
    b = SimpleNamespace(**vars(_vllm032_request("b", "x", 64)), num_cached_tokens=-1)
    legacy.add_request(b)
    legacy.pop_request()
    b.num_computed_tokens = 64
    with pytest.raises(ConfigError, match="no num_cached_tokens"):
        legacy.on_step({"b": 64}, {"b": b})


def test_vllm_kv_holding_queue_is_fair_and_charges_only_what_is_left_to_compute():
    # vLLM 0.32 drains kv_holding_waiting (requests already holding KV) before waiting; a
    # plain FCFS queue there let those requests bypass fairness
    q = FairQueue("vtc", max_tenants=2, tenant_of=lambda r: r.t)
    hold = q.holding()
    x1 = _vllm032_request("x1", "x", 100, cached=0, computed=96)  # e.g. a finished KV load
    x2 = _vllm032_request("x2", "x", 100, cached=0, computed=96)
    y1 = _vllm032_request("y1", "y", 100, cached=0, computed=96)
    q.add_request(_vllm032_request("w", "x", 50, cached=0))  # x has a counter already
    w = q.pop_request()
    w.num_computed_tokens = 50
    q.on_step({"w": 50}, {"w": w})
    for r in (x1, x2, y1):
        hold.add_request(r)
    assert len(hold) == 3 and {r.request_id for r in hold} == {"x1", "x2", "y1"}
    assert hold.peek_request() is y1 and hold.pop_request() is y1  # y has less service
    assert q.counters()["y"] == 4.0  # provisional: 100 tokens, 96 already held
    hold.prepend_request(y1)  # skipped: the provisional charge is returned
    assert q.counters()["y"] == 0.0 and hold.peek_request() is y1
    hold.pop_request()
    y1.num_computed_tokens = 100
    q.on_step({"y1": 4}, {"y1": y1})
    assert q.counters()["y"] == 4.0 + 2.0
    hold.remove_request(x2)
    assert hold.pop_request() is x1 and not hold


def test_vllm_layout_names_what_it_does_not_know():
    from dataclasses import dataclass

    from schedlab.faircache.vllm_layout import hit_field, queue_names

    @dataclass
    class PrefillStats:
        num_cached_tokens: int = 0

    class New:
        def __init__(self):
            self.prefill_stats = PrefillStats()

    class Old:
        def __init__(self):
            self.num_cached_tokens = -1

    class Neither:
        def __init__(self):
            self.num_computed_tokens = 0

    assert hit_field(New, PrefillStats, "0.32.0") == "prefill_stats"
    assert hit_field(Old, None, "0.10.0") == "num_cached_tokens"
    with pytest.raises(ConfigError, match="vLLM 9.9: Request has neither"):
        hit_field(Neither, PrefillStats, "9.9")

    class Queue:
        pass

    sched = SimpleNamespace(waiting=Queue(), kv_holding_waiting=Queue(), running=[])
    assert queue_names(sched, Queue, "0.32.0") == ("waiting", "kv_holding_waiting")
    sched.swap_waiting = Queue()
    with pytest.raises(ConfigError, match="requests in 'swap_waiting' would bypass fairness"):
        queue_names(sched, Queue, "9.9")


def test_vllm_charges_experiment_says_what_ran_and_its_claims_hold(monkeypatch):
    from schedlab.faircache import vllm_experiment

    monkeypatch.setattr(vllm_experiment, "find_vllm_python", lambda: None)
    res = vllm_experiment.vllm_charges(n=8, seed=0)
    assert "vLLM not installed" in res.ran_with and res.ran_with in res.notes
    assert all(c.holds for c in res.claims), [(c.statement, c.measured) for c in res.claims]
    assert res.frame.filter(pl.col("tenant") == "A")["prefill_computed"][0] < 288 * 8


def _job(rid, src, dst):
    return SimpleNamespace(req_id=rid, src_spec=src, dst_spec=dst)


def test_vllm_host_io_goes_to_the_tenant_that_caused_it_even_a_step_after_it_finished():
    from schedlab.faircache.vllm import connector_io

    gpu = type("GPULoadStoreSpec", (), {})
    cpu = type("CPULoadStoreSpec", (), {})

    def spec(cls, n, groups=None):
        s = cls()
        s.block_ids, s.group_sizes = list(range(n)), groups
        return s

    group_bytes = [1000.0, 10.0]  # two KV groups (e.g. full and sliding-window attention)
    meta = SimpleNamespace(
        load_jobs={1: _job("a", spec(cpu, 3), spec(gpu, 3, [2, 1]))},
        store_jobs={
            2: _job("b", spec(gpu, 4, [4, 0]), spec(cpu, 4)),
            3: _job("a", spec(gpu, 1), spec(cpu, 1)),
        },
    )
    assert connector_io(meta, group_bytes) == {"a": [2010.0, 1000.0], "b": [0.0, 4000.0]}
    q = FairQueue(
        "faircache", max_tenants=2, tenant_of=lambda r: r.t, weights=CostWeights(p_io=0.01)
    )
    a, b = _vllm032_request("a", "x", 64, cached=0), _vllm032_request("b", "y", 64, cached=0)
    for r in (a, b):
        q.add_request(r)
        q.pop_request()
        r.num_computed_tokens = 64
    q.on_step({"a": 64, "b": 64}, {"a": a, "b": b})
    before = q.counters()
    q.on_finished("b")  # vLLM's connector stores a finished request's blocks the next step
    q.on_step({"a": 1}, {"a": a}, io=connector_io(meta, group_bytes))
    assert q.io_loaded == {"x": 2010.0, "y": 0.0} and q.io_stored == {"x": 1000.0, "y": 4000.0}
    after = q.counters()
    assert after["y"] - before["y"] == pytest.approx(0.01 * 4000)  # b's store, b's tenant
    assert after["x"] - before["x"] == pytest.approx(2 + 0.01 * 3010)  # a token + a's I/O
    with pytest.raises(ConfigError, match="never saw"):
        q.on_step({}, {}, io={"zz": [1.0, 0.0]})
    meta.load_jobs[1].dst_spec = spec(cpu, 3)  # a layout the adapter does not know
    with pytest.raises(ConfigError, match="not the GPULoadStoreSpec"):
        connector_io(meta, group_bytes)


def test_vllm_a_kv_connector_whose_transfers_are_unknown_fails_at_start(monkeypatch):
    from schedlab.faircache.vllm_layout import connector_name

    lmcache = SimpleNamespace(connector=type("LMCacheConnectorV1", (), {})())
    monkeypatch.delenv("SCHEDLAB_FAIRCACHE_UNPRICED_IO", raising=False)
    with pytest.raises(ConfigError, match="LMCacheConnectorV1 .* host I/O would go uncharged"):
        connector_name(lmcache, "0.32.0")
    monkeypatch.setenv("SCHEDLAB_FAIRCACHE_UNPRICED_IO", "1")  # said, not silent
    assert connector_name(lmcache, "0.32.0") is None
    offload = SimpleNamespace(connector=type("OffloadingConnector", (), {})())
    assert connector_name(offload, "0.32.0") == "OffloadingConnector"
    assert connector_name(SimpleNamespace(connector=None), "0.32.0") is None
