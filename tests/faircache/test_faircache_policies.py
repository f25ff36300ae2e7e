"""Every scheduler and cache manager through the same engine invariants, plus FairCache's
accounting properties (VTC bound, conservation, order invariance, max-min isolation/Pareto)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.faircache import (
    CACHE_MANAGERS,
    SCHEDULERS,
    AdmitUsage,
    Engine,
    EngineConfig,
    PrefixLedger,
    make_manager,
    make_scheduler,
    maxmin_shares,
    simulate,
)
from schedlab.faircache.metrics import service_difference, vtc_bound
from schedlab.faircache.overhead import backlogged_scheduler
from schedlab.faircache.workloads import free_riding, host_memory
from schedlab.llm import shared_prefix, vtc_scenario
from schedlab.llm.radix import Node

SMALL = EngineConfig(kv_tokens=6000, host_gb=0.3, max_batch=32)


def _run(sched, mgr, trace, config=SMALL):
    engine = Engine(trace, make_scheduler(sched), make_manager(mgr), config)
    return engine, engine.run()


@pytest.mark.parametrize("mgr", sorted(CACHE_MANAGERS))
@pytest.mark.parametrize("sched", sorted(SCHEDULERS))
def test_engine_invariants_hold_for_every_policy(sched, mgr):
    trace = shared_prefix(
        groups=6,
        prompts_per_group=8,
        system_len=512,
        question_len=64,
        output_len=16,
        tenants=3,
        rate=30.0,
        seed=1,
    )
    engine, res = _run(sched, mgr, trace)
    assert res.requests.height == len(trace)  # nobody is lost or served twice
    assert sorted(res.requests["rid"].to_list()) == sorted(r.rid for r in trace)
    assert (res.requests["first_token"] >= res.requests["arrival"]).all()
    assert (res.requests["finish"] >= res.requests["first_token"]).all()
    cache = engine.cache
    assert engine.private_used == 0  # every reservation released
    assert 0 <= cache.gpu_used <= engine.gpu_blocks
    assert cache.evictable_gpu() == cache.gpu_used  # nothing left pinned
    assert 0 <= engine.host_used <= engine.host_blocks
    assert engine.manager.usage().sum() == engine.host_used  # manager and engine agree
    tb = res.tenants
    hits = tb["gpu_hit_tokens"] + tb["host_hit_tokens"] + tb["miss_tokens"]
    assert (hits == tb["input_tokens"]).all()
    assert tb["decode"].sum() == sum(r.output_len for r in trace)


@pytest.mark.parametrize("sched", sorted(SCHEDULERS))
def test_schedulers_are_work_conserving(sched):
    """Whenever requests wait and the batch has room, the engine is running something."""
    trace = vtc_scenario("overload-multi", duration=20, seed=2)
    engine = Engine(
        trace,
        make_scheduler(sched),
        make_manager("lru"),
        EngineConfig(kv_tokens=8000, prefix_cache=False),
    )
    idle_with_queue = []
    original = engine._fill_batch

    def checked(running, finishing, it):
        admitted = original(running, finishing, it)
        if engine.scheduler.queued().any() and not running:
            idle_with_queue.append(engine.now)
        return admitted

    engine._fill_batch = checked
    engine.run()
    assert idle_with_queue == []


def test_vtc_counter_lift_and_min_pick():
    sched = backlogged_scheduler("vtc", 3, per_tenant=1)
    sched.counters[:] = [5.0, 1.0, 3.0]
    assert sched.pick(0.0).tenant == 1
    from schedlab.llm import Request

    sched.on_arrival(Request(99, 1, 0.0, 1, 1, ()), 0.0)  # tenant 1 becomes backlogged again
    assert sched.counters[1] == 3.0  # lifted to min over backlogged (tenants 0 and 2)


@settings(max_examples=6)
@given(
    st.integers(0, 10_000),
    st.sampled_from(["overload", "overload-multi", "on-off", "proportional", "short-long"]),
)
def test_vtc_and_faircache_stay_within_vtc_bound(seed, scenario):
    trace = vtc_scenario(scenario, duration=15, seed=seed)
    config = EngineConfig(gpu="a10g", kv_tokens=4000, prefix_cache=False, sample_every=0.5)
    bound = vtc_bound(max(r.input_len for r in trace), 4000)
    for sched in ("vtc", "faircache"):
        res = simulate(trace, sched, "lru", config)
        assert service_difference(res.samples)[0] <= bound


@given(st.integers(2, 5), st.integers(0, 10_000))
def test_shared_prefix_charges_are_order_invariant_and_conserve(k, seed):
    rng = np.random.default_rng(seed)
    charges = []
    for _ in range(3):
        order = [int(t) for t in rng.permutation(k)]
        res = simulate(free_riding(order, prefix_len=1024), "faircache", "lru", EngineConfig())
        tb = res.tenants
        assert tb["attributed"].sum() == pytest.approx(tb["executed"].sum())
        charges.append(tb["attributed"].to_numpy())
        share = (tb["attributed"] - (tb["input_tokens"] - 1024)).to_numpy() / 1024
        assert share == pytest.approx(np.full(k, 1 / k))
    assert np.allclose(charges[0], charges[1]) and np.allclose(charges[0], charges[2])


def test_faircache_scheduler_charges_sum_to_consumed_unified_cost():
    trace = shared_prefix(
        groups=4,
        prompts_per_group=10,
        system_len=1024,
        question_len=64,
        output_len=16,
        tenants=4,
        rate=20.0,
        seed=0,
    )
    config = EngineConfig(kv_tokens=8000, host_gb=0.5)
    engine = Engine(trace, make_scheduler("faircache"), make_manager("faircache"), config)
    res = engine.run()
    assert engine.scheduler.charged.sum() == pytest.approx(res.tenants["unified_service"].sum())
    assert engine.scheduler.charged == pytest.approx(res.tenants["unified_service"].to_numpy())


def _node(uid, computer, cost=16.0):
    node = Node(uid, None, uid, 0)
    node.computer, node.cost = computer, cost
    return node


@given(st.lists(st.integers(0, 5), min_size=1, max_size=30))
def test_ledger_refunds_sum_to_cost(users):
    ledger = PrefixLedger(6)
    node = _node(1, users[0])
    total = ledger.charge(users[0], [node], [])
    for u in users[1:]:
        total += ledger.charge(u, [], [node])
    distinct = list(dict.fromkeys(users))
    assert total.sum() == pytest.approx(16.0)
    for u in distinct:
        assert total[u] == pytest.approx(16.0 / len(distinct))


@given(st.lists(st.floats(0, 100), min_size=1, max_size=12), st.floats(0, 500))
def test_maxmin_shares_are_isolating_and_pareto(demands, capacity):
    d = np.array(demands)
    s = maxmin_shares(d, capacity)
    assert (s <= d + 1e-9).all() and (s >= -1e-12).all()
    assert s.sum() == pytest.approx(min(capacity, d.sum()), abs=1e-6)  # Pareto: none idle
    fair = capacity / d.size
    assert (s >= np.minimum(d, fair) - 1e-9).all()  # isolation: at least min(demand, C/N)
    unmet = s < d - 1e-9  # max-min: an unmet tenant gets at least anyone else's share
    if unmet.any():
        assert s[unmet].min() >= s.max() - 1e-6


def test_maxmin_matches_brute_force_on_a_grid():
    for d in itertools.product(range(0, 7, 2), repeat=3):
        for cap in range(0, 13, 3):
            s = maxmin_shares(np.array(d, float), cap)
            best = max(
                (g for g in itertools.product(*[range(x + 1) for x in d]) if sum(g) <= cap),
                key=lambda g: (sorted(g), sum(g)),
            )
            assert sorted(s) == pytest.approx(sorted(best), abs=1.0)  # integer grid vs fluid


def test_splitting_identities_gains_at_most_the_documented_share():
    """Strategy-proofness (documented limit): k identities get at most k·C/(N+k-1) of host
    memory, and never pay less for a shared prefix than one identity would."""
    capacity, n = 120.0, 4
    demands = np.full(n, 100.0)
    alone = maxmin_shares(demands, capacity)[0]
    for k in (2, 3):
        split = np.concatenate([np.full(k, 100.0 / k), np.full(n - 1, 100.0)])
        gained = maxmin_shares(split, capacity)[:k].sum()
        assert gained <= k * capacity / (n + k - 1) + 1e-9
        assert gained - alone <= k * capacity / (n + k - 1) - capacity / n + 1e-9
    one = PrefixLedger(3)
    node = _node(1, 0)
    base = one.charge(0, [node], [])[0] + one.charge(1, [], [node])[0]
    many = PrefixLedger(4)
    node2 = _node(2, 0)
    paid = many.charge(0, [node2], []) + many.charge(2, [], [node2]) + many.charge(1, [], [node2])
    assert base == pytest.approx(8.0)
    assert paid[0] + paid[2] >= base - 1e-9  # the split pair pays at least the single identity


def test_faircache_manager_protects_shares_against_streaming_tenants():
    trace = host_memory(duration=40, seed=0)
    hits = {}
    for mgr in ("isolated", "faircache", "static"):
        _, res = _run("faircache", mgr, trace, EngineConfig(kv_tokens=16384, host_gb=4))
        hits[mgr] = res.tenants["hit_rate"].to_numpy()
    assert (hits["faircache"] >= hits["isolated"] - 0.02).all()


def test_usage_objects_are_usable_outside_the_engine():
    sched = backlogged_scheduler("faircache", 8)
    req = sched.pick(0.0)
    sched.on_admit(req, AdmitUsage(req.tenant, 100))
    sched.on_iteration(np.ones(8), np.zeros(8), np.zeros(8), np.zeros(8))
    sched.on_finish(req, 1.0)
    assert sched.charged[req.tenant] >= 100


def test_memory_prepayment_moves_charges_to_admission_and_keeps_totals():
    """Prepaid running-KV memory: counters are ahead while requests run, equal at the end."""
    from schedlab.faircache.policies import AdmitUsage, FairCacheScheduler
    from schedlab.llm import Request
    from schedlab.llm.accounting import CostWeights

    class View:
        n_tenants = 2
        weights = CostWeights(p_kv=1e-3)

        def cached_tokens(self, req):
            return 0

    scheds = {p: FairCacheScheduler(prepay_memory=p) for p in (True, False)}
    for s in scheds.values():
        s.bind(View())
    kv = np.array([500.0, 300.0])
    for s in scheds.values():  # a first request each, to learn the KV charge per token
        for t in (0, 1):
            r = Request(t, t, 0.0, 8, 4, ())
            s.on_arrival(r, 0.0)
            s.on_admit(s.pick(0.0), AdmitUsage(t, 8))
        for _ in range(4):
            s.on_iteration(np.ones(2), kv, np.zeros(2), np.zeros(2))
        for t in (0, 1):
            s.on_finish(Request(t, t, 0.0, 8, 4, ()), 1.0)
    before = {p: s.counters.copy() for p, s in scheds.items()}
    assert before[True] == pytest.approx(before[False])
    for s in scheds.values():
        r = Request(9, 0, 2.0, 8, 4, ())
        s.on_arrival(r, 2.0)
        s.on_admit(s.pick(2.0), AdmitUsage(0, 8))
    # at admission the prepaid counter already holds the request's expected memory
    assert scheds[True].counters[0] > scheds[False].counters[0]
    for s in scheds.values():
        for _ in range(4):
            s.on_iteration(np.array([1.0, 0.0]), np.array([700.0, 0.0]), np.zeros(2), np.zeros(2))
        s.on_finish(Request(9, 0, 2.0, 8, 4, ()), 3.0)
    assert scheds[True].counters == pytest.approx(scheds[False].counters)
    assert scheds[True].charged == pytest.approx(scheds[False].charged)


def test_engine_time_price_charges_each_tenants_modelled_forward():
    """compute priced by engine time (issue 47, item 3 on the CPU engine): per step a tenant
    pays (c0 + c_tok·T + c_seq·S) / c_tok units for its own forward, T = its prefill tokens +
    one per continuing sequence, S = its sequences; prefill paid at admission is not paid twice,
    and w_out is not charged on top (brute-force recount, step by step)."""
    from schedlab.faircache.policies import AdmitUsage, FairCacheScheduler
    from schedlab.llm import Request
    from schedlab.llm.accounting import CostWeights
    from schedlab.llm.stepfit import StepFit

    class View:
        n_tenants = 2
        weights = CostWeights()

        def cached_tokens(self, req):
            return 0

    c0, c_tok, c_seq = 4e-3, 1e-4, 4e-4
    timed = FairCacheScheduler(step_time=StepFit(c0, c_tok, c_seq))
    tokens = FairCacheScheduler()
    for s in (timed, tokens):
        s.bind(View())
    expect = np.zeros(2)
    # step 1: tenant 0 admits two requests (100 and 20 executed tokens), tenant 1 one (300)
    for rid, (t, n) in enumerate([(0, 100), (0, 20), (1, 300)]):
        for s in (timed, tokens):
            s.on_arrival(Request(rid, t, 0.0, n, 3, ()), 0.0)
            s.on_admit(s.pick(0.0), AdmitUsage(t, n))
    for s in (timed, tokens):
        s.on_iteration(np.array([2.0, 1.0]), np.zeros(2), np.zeros(2), np.zeros(2))
    expect += [(c0 + c_tok * 120 + c_seq * 2) / c_tok, (c0 + c_tok * 300 + c_seq) / c_tok]
    assert timed.charged == pytest.approx(expect)
    # step 2: decodes only, one token per running sequence
    for s in (timed, tokens):
        s.on_iteration(np.array([2.0, 1.0]), np.zeros(2), np.zeros(2), np.zeros(2))
    expect += [(c0 + c_tok * 2 + c_seq * 2) / c_tok, (c0 + c_tok + c_seq) / c_tok]
    assert timed.charged == pytest.approx(expect)
    # VTC's prices (no step time): w_in per prefill token, w_out = 2 per output token
    assert tokens.charged == pytest.approx([120 + 2 * 4, 300 + 2 * 2])
    with pytest.raises(BadInputError, match="c_tok"):
        FairCacheScheduler(step_time=(1e-3, 0.0, 0.0))


def test_the_default_memory_price_is_read_from_the_hardware():
    # issue 47: hbm_share = the KV pool's share of the GPU's memory, not a chosen 0.5
    from schedlab.faircache.simulator import EngineConfig, simulate
    from schedlab.faircache.workloads import hit_bias

    trace = hit_bias(duration=5.0, seed=0)
    derived = simulate(trace, "faircache", "lru", EngineConfig(gpu="a10g", kv_tokens=40_000))
    assert derived.summary["hbm_share"] == pytest.approx(0.1092, abs=1e-4)
    chosen = simulate(
        trace, "faircache", "lru", EngineConfig(gpu="a10g", kv_tokens=40_000, hbm_share=0.5)
    )
    assert chosen.summary["hbm_share"] == 0.5
    from schedlab.core.errors import ConfigError

    with pytest.raises(ConfigError, match="hbm_share"):
        EngineConfig(hbm_share=-0.1)


def test_backlogged_hit_bias_workload_shares_only_tenant_zeros_prefix():
    """engine_hit_bias's trace: tenant 0's prompts all start with one system prompt, tenant 1's
    share no block with anything; both arrive at the same rate over the whole window."""
    from collections import Counter

    from schedlab.faircache.engine_experiments import HB_OWN, HB_PREFIX, hit_bias_workload

    trace = hit_bias_workload(rate=40.0, duration=2.0, seed=3)
    reqs = trace.requests
    by = {t: [r for r in reqs if r.tenant == t] for t in (0, 1)}
    assert all(len(v) > 40 for v in by.values())
    assert max(r.arrival for r in reqs) > 1.8 and min(r.arrival for r in reqs) < 0.2
    uses = Counter(b for r in reqs for b in r.blocks)
    k = HB_PREFIX // 16
    prefix = by[0][0].blocks[:k]
    assert all(r.blocks[:k] == prefix for r in by[0])
    assert all(uses[b] == len(by[0]) for b in prefix)
    assert all(uses[b] == 1 for r in reqs for b in r.blocks if b not in prefix)
    assert all(r.input_len == HB_PREFIX + HB_OWN == 16 * len(r.blocks) for r in reqs)
