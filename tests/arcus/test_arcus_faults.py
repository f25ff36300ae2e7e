"""Fault injection from outside (Arcus, paper 12): concurrent clients, random SIGKILLs of worker
processes at arbitrary moments, Redis SIGKILL + restart, client retries with and without an
idempotency key, sagas across workers. Invariants are read straight from Redis (balance sum,
per-account journals, done-markers == 1). See :mod:`schedlab.arcus.chaos`.

One persistent (AOF always) redis-server and one 4-worker platform serve the module. Together
these tests kill several hundred workers (asserted per test) in about half a minute.
"""

import json
import os
import signal
import threading
import time

import pytest
import redis

from schedlab.arcus.apps import FUNCTIONS, lock_keys
from schedlab.arcus.chaos import ChaosConfig, run_chaos
from schedlab.arcus.fccache import FCCache, Subscriber
from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import PROTOCOLS, final_state, load_state
from schedlab.arcus.runtime import Invocation, proc_key, reply_key, workers_key
from schedlab.arcus.store import no_retry
from schedlab.core.errors import BadInputError, MissingServiceError

SAFE = [name for name, cls in PROTOCOLS.items() if cls.exactly_once]
ZERO = dict(sum_delta=0, journal_mismatches=0, duplicate_entries=0, missing_entries=0,
            marker_violations=0, unfinished=0, result_mismatches=0)


def clean(report):
    found = report.to_dict()
    return {k: found[k] for k in ZERO} == ZERO, found


@pytest.fixture(scope="module")
def platform(server):
    with Platform(server.url, workers=4, lease_s=1.0) as running:
        yield running


@pytest.mark.parametrize("protocol", SAFE)
def test_shared_accounts_under_random_sigkills(server, platform, protocol):
    """4 clients on shared accounts, transfers and sagas, a worker SIGKILL every ~25 ms."""
    report = run_chaos(ChaosConfig(protocol=protocol, clients=4, requests=20, accounts=6,
                                   kill_interval_s=0.02, min_kills=50, seed=1), server, platform)
    ok, found = clean(report)
    assert ok, found
    assert report.kills >= 50, found
    assert report.requests >= 80


def test_disjoint_accounts_under_sigkills_with_no_key_retries(server, platform):
    """The outside harness's first failure (lost journal write, requests never answered)."""
    report = run_chaos(ChaosConfig(protocol="arcus", clients=4, requests=22, accounts=8,
                                   shared=False, keyed=0.5, kill_interval_s=0.02, min_kills=60,
                                   call_timeout_s=3.0, seed=2), server, platform)
    ok, found = clean(report)
    assert ok, found
    assert report.kills >= 60, found


@pytest.mark.parametrize("protocol", ["arcus", "halfmoon"])
def test_redis_sigkill_and_restart_with_worker_kills_and_retries(server, platform, protocol):
    """Redis is SIGKILLed and restarted (AOF always) 3 times while workers are being killed
    and clients retry, by key and without one; the supervisor must keep going."""
    report = run_chaos(ChaosConfig(protocol=protocol, clients=4, requests=18, accounts=6,
                                   keyed=0.5, kill_interval_s=0.03, redis_restarts=3,
                                   min_kills=30, call_timeout_s=5.0, seed=3), server, platform)
    ok, found = clean(report)
    assert ok, found
    assert report.redis_restarts == 3 and report.kills >= 30
    assert platform._supervisor.is_alive() and platform.alive() == 4
    after = platform.invoke("write", {"key": "after", "value": 1}, protocol="arcus",
                            ns="after-restart")
    assert after["value"] is None


def test_http_clients_with_idempotency_keys_under_kills_and_a_redis_restart(server, platform):
    """The same invariants when the 4 clients go through the HTTP gateway (Idempotency-Key)."""
    report = run_chaos(ChaosConfig(protocol="arcus", clients=4, requests=12, accounts=6,
                                   kill_interval_s=0.03, min_kills=30, redis_restarts=1,
                                   http=True, seed=5), server, platform)
    ok, found = clean(report)
    assert ok, found
    assert report.kills >= 30 and report.redis_restarts == 1


def test_the_harness_has_teeth(server, platform):
    """Unsafe direct access under kills, and the bank functions without declared keys under
    concurrency, both break the invariants in the same harness."""
    unsafe = run_chaos(ChaosConfig(protocol="unsafe", requests=10, kill_interval_s=0.02,
                                   seed=4), server, platform)
    assert unsafe.violations > 0, unsafe.to_dict()
    racy = run_chaos(ChaosConfig(protocol="arcus", requests=10, accounts=3,
                                 kill_interval_s=0.0, locks=False, seed=4), server, platform)
    assert racy.violations > 0, racy.to_dict()


def test_a_retry_never_puts_a_replayed_read_into_the_cache(platform):
    """Regression (outside harness): after an acknowledged write of v1, a retry of an instance
    that had read v0 replays v0 - and used to cache it, so later reads returned v0."""
    ns = "stale"
    load_state("arcus", platform.client, ns, {"x": "v0"})
    first = platform.invoke("read", {"key": "x"}, protocol="arcus", ns=ns, instance="old")
    assert first["value"] == "v0"
    platform.invoke("write", {"key": "x", "value": "v1"}, protocol="arcus", ns=ns)
    for pid in platform.worker_pids():  # restarted workers: empty caches
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while platform.alive() < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(3):  # the retry lands on some worker(s): it must replay v0 ...
        again = platform.invoke("read", {"key": "x"}, protocol="arcus", ns=ns, instance="old")
        assert again["value"] == "v0"
    values = [platform.invoke("read", {"key": "x"}, protocol="arcus", ns=ns)["value"]
              for _ in range(20)]
    assert values == ["v1"] * 20  # ... and no later read may see it


def test_messages_of_a_worker_whose_lease_expired_are_redelivered(platform):
    """A processing list left behind by a worker no supervisor knows of (a dead gateway's)."""
    ns = "lease"
    load_state("arcus", platform.client, ns, {})
    inv = Invocation(call_id="stuck1", instance="stuck-instance", fn="write",
                     arg={"key": "k", "value": 7}, protocol="arcus", ns=ns, plat=platform.plat,
                     slots=platform.workers, gen="g1")
    platform.client.set(f"{ns}:gen:stuck-instance", "g1")  # admitted, as a gateway does
    ghost = "1-ghost"
    platform.client.rpush(proc_key(platform.plat, ghost), inv.wire())
    platform.client.sadd(workers_key(platform.plat), ghost)
    got = platform.client.blpop([reply_key(platform.plat, "stuck1")], timeout=15)
    assert got is not None and "error" not in json.loads(got[1])
    assert final_state("arcus", platform.client, ns, ["k"]) == {"k": 7}
    assert not platform.client.sismember(workers_key(platform.plat), ghost)


def test_supervisor_survives_a_redis_outage_with_a_worker_dying_in_it(server):
    with Platform(server.url, workers=2, lease_s=1.0) as running:
        ns = "outage"
        load_state("cflog", running.client, ns, {})
        done = {}

        def slow_client():  # retries, with its key, until acknowledged
            while "reply" not in done:
                try:
                    done["reply"] = running.invoke(
                        "ledger", {"counter": "c", "list": "l", "id": "a"}, protocol="cflog",
                        ns=ns, idempotency_key="a", timeout=30)
                except MissingServiceError:
                    time.sleep(0.05)

        server.kill()
        caller = threading.Thread(target=slow_client)
        caller.start()
        os.kill(running.worker_pids()[0], signal.SIGKILL)  # recovery now needs Redis
        time.sleep(1.0)
        assert running._supervisor.is_alive()
        server.restart()
        caller.join(timeout=40)
        assert done.get("reply", {}).get("value") == {"count": 1, "length": 1}
        assert running._supervisor.is_alive() and running.alive() == 2
        assert final_state("cflog", running.client, ns, ["c", "l"]) == {"c": 1, "l": ["a"]}


def test_subscriber_is_healthy_on_the_subscribe_confirmation_and_after_a_restart(server):
    client = redis.Redis.from_url(server.url, retry=no_retry())
    cache = FCCache()
    subscriber = Subscriber(client, cache)
    subscriber.start()
    try:
        deadline = time.monotonic() + 5
        while not cache.healthy and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cache.healthy  # no publication needed
        cache.install("k", cache.applied, '"old"')
        server.kill()
        while cache.healthy and time.monotonic() < deadline + 5:
            time.sleep(0.01)
        assert not cache.healthy and cache.get("k", 0, 0.0) is None
        server.restart()
        deadline = time.monotonic() + 10
        while not cache.healthy and time.monotonic() < deadline:
            time.sleep(0.02)
        assert cache.healthy and subscriber.subscriptions >= 2
        assert cache.get("k", 0, 0.0) is None  # everything cached before the break is gone
    finally:
        subscriber.stop()
        subscriber.join(timeout=3)
        client.close()


def test_a_failed_background_flush_is_never_acknowledged(server, monkeypatch):
    """Write-behind with a pipelined flusher thread (Arcus's default; the inline variant is
    tested in test_arcus_inline_flush.py): if a queued batch fails, finish must not log a
    result without it."""
    from schedlab.arcus.arcus_io import Arcus
    from schedlab.arcus.iobase import Env
    from schedlab.arcus.runtime import WorkerResources
    from schedlab.arcus.store import IOStats, Store

    client = redis.Redis.from_url(server.url)
    resources = WorkerResources(client, 0)
    store = Store(client, IOStats())
    client.set("flushfail:gen:inst", "g")  # admitted, as a gateway does
    io = Arcus(store, Env("inst", "flushfail", resources=resources, gen="g"))
    real = store.script_now
    calls = []

    def failing(script, keys, args):
        calls.append(args)
        if len(calls) == 1:
            raise redis.ConnectionError("injected")
        return real(script, keys, args)

    monkeypatch.setattr(store, "script_now", failing)
    io.write(1, "a", 1)
    deadline = time.monotonic() + 10
    while io.error is None:  # the background flush ran and failed
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(redis.RedisError):
        io.finish("ok")
    assert client.hget("flushfail:log:inst", "res") is None
    resources.close()
    client.close()


def test_declared_keys():
    transfer = FUNCTIONS["bank_transfer"]
    assert lock_keys(transfer, {"src": "b", "dst": "a", "id": "r"}) == [
        "a", "b", "done:r", "journal:a", "journal:b"]
    assert lock_keys(FUNCTIONS["read"], {"key": "x"}) == []
    with pytest.raises(BadInputError, match="keys"):
        lock_keys(transfer, {"src": "a"})
