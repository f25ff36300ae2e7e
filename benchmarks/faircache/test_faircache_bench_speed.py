"""Speed targets of issue 3: 100k-request 16-tenant shared-prefix simulation (< 30 s), a pick
with 1,000 backlogged tenants (< 20 us), eviction O(log n)."""

import pytest

from schedlab.faircache import EngineConfig, simulate
from schedlab.faircache.overhead import backlogged_scheduler, full_manager
from schedlab.llm import shared_prefix


@pytest.fixture(scope="module")
def big_trace():
    return shared_prefix(
        groups=64,
        prompts_per_group=100_000 // 64 + 1,
        system_len=1024,
        question_len=128,
        output_len=64,
        tenants=16,
        rate=40.0,
        seed=0,
        block_tokens=32,
    )


def test_faircache_bench_100k_requests(benchmark, big_trace):
    result = benchmark.pedantic(
        simulate,
        args=(big_trace, "faircache", "faircache", EngineConfig(host_gb=8)),
        rounds=1,
        iterations=1,
    )
    assert result.summary["requests"] == len(big_trace) >= 100_000


@pytest.mark.parametrize("tenants", [10, 100, 1000])
@pytest.mark.parametrize("name", ["vtc", "faircache", "dlpm"])
def test_faircache_bench_pick(benchmark, name, tenants):
    sched = backlogged_scheduler(name, tenants)

    def pick_unpick():
        sched.unpick(sched.pick(0.0))

    benchmark(pick_unpick)


@pytest.mark.parametrize("blocks", [1_000, 10_000, 100_000])
@pytest.mark.parametrize("name", ["lru", "lfu", "cost-aware", "faircache"])
def test_faircache_bench_eviction(benchmark, name, blocks):
    mgr, new_node = full_manager(name, blocks)
    now = blocks * 1e-3

    def evict_one():
        node = new_node(now)
        victims = mgr.admit(node, now)
        node.host = victims is not None
        for v in victims or ():
            v.host = False

    benchmark(evict_one)
