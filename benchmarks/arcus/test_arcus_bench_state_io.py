"""Arcus (paper 12) speeds: one state operation per protocol, and a long crash-injection soak.

Run with ``pytest benchmarks/arcus``. Needs redis-server. ``ARCUS_SOAK_REQUESTS`` sets the
soak length (default 1000 crash-injected workflow requests per protocol checked).
"""

import os

import pytest

from schedlab.arcus.bench import run_bench
from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import PROTOCOLS, load_state
from schedlab.arcus.store import RedisServer, find_redis_binary
from schedlab.arcus.workloads import make_workload


@pytest.fixture(scope="module")
def platform():
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed")
    with RedisServer() as server, Platform(server.url, workers=4) as running:
        yield running


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_arcus_bench_read_then_write_request(benchmark, platform, protocol):
    """End-to-end latency of one request doing a read and a write (loopback)."""
    ns = f"bench-{protocol}"
    load_state(protocol, platform.client, ns, {"k": 0})
    PROTOCOLS[protocol].prepare(platform.client, ns, {"k": 0.5})
    arg = {"ops": [["r", "k"], ["w", "k", 1]]}
    benchmark.pedantic(platform.invoke, args=("ops", arg),
                       kwargs=dict(protocol=protocol, ns=ns), rounds=200, warmup_rounds=20)


@pytest.mark.parametrize("protocol", ["arcus", "unsafe"])
def test_arcus_bench_crash_soak(benchmark, platform, protocol):
    """Thousands of crash-injected workflow requests; arcus must stay exactly-once."""
    requests = int(os.environ.get("ARCUS_SOAK_REQUESTS", "1000"))
    workload = make_workload("ledger", requests, 7)
    result = benchmark.pedantic(run_bench, args=(platform, workload, protocol),
                                kwargs=dict(crash_rate=0.03, seed=7), rounds=1, iterations=1)
    benchmark.extra_info.update({k: result[k] for k in ("crashes", "lost_writes",
                                                        "duplicated_writes",
                                                        "inconsistent_reads")})
    if protocol == "arcus":
        assert result["violations"] == 0, result
    else:
        assert result["violations"] > 0, result


@pytest.mark.parametrize("protocol", ["arcus", "halfmoon"])
def test_arcus_bench_chaos_soak(benchmark, protocol):
    """Outside SIGKILLs + Redis restarts with 4 concurrent clients on shared accounts.

    ``ARCUS_CHAOS_KILLS`` (default 300) sets the kills per protocol; the >= 10,000-kill run is
    ``python benchmarks/arcus/long_chaos.py``.
    """
    from schedlab.arcus.chaos import ChaosConfig, run_chaos

    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed")
    kills = int(os.environ.get("ARCUS_CHAOS_KILLS", "300"))
    with RedisServer(aof="always") as server, Platform(server.url, workers=4,
                                                       lease_s=1.0) as running:
        cfg = ChaosConfig(protocol=protocol, requests=20, keyed=0.5, kill_interval_s=0.02,
                          min_kills=kills, redis_restarts=2)
        report = benchmark.pedantic(run_chaos, args=(cfg, server, running), rounds=1,
                                    iterations=1)
    found = report.to_dict()
    benchmark.extra_info.update({k: found[k] for k in ("kills", "redis_restarts", "requests",
                                                       "violations", "unfinished")})
    assert found["violations"] == 0 and found["unfinished"] == 0, found
