"""The runtime with a real redis-server: every protocol, real SIGKILLs, consistency, CLI, HTTP.

Arcus (paper 12). One private redis-server and one 4-worker platform serve the whole module;
both are torn down at the end. Skips only when no redis-server binary exists.
"""

import json
import threading

import pytest
from typer.testing import CliRunner

from schedlab.arcus.bench import run_bench
from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import PROTOCOLS, final_state, load_state
from schedlab.arcus.store import RedisServer, find_redis_binary
from schedlab.arcus.workloads import make_workload
from schedlab.core.errors import MissingServiceError, SchedlabError, UnknownNameError

SAFE = [name for name, cls in PROTOCOLS.items() if cls.exactly_once]


@pytest.fixture(scope="module")
def redis_url():
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with RedisServer() as server:
        yield server.url


@pytest.fixture(scope="module")
def platform(redis_url):
    with Platform(redis_url, workers=4) as running:
        yield running


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_crash_free_runs_match_one_execution(platform, protocol):
    """Every protocol, no crashes: final state and every read equal the in-process oracle."""
    for name in ("rw", "movie", "retwis"):
        result = run_bench(platform, make_workload(name, 6, 1), protocol)
        assert result["violations"] == 0, (name, result)


@pytest.mark.parametrize("protocol", SAFE)
def test_random_sigkills_lose_and_duplicate_nothing(platform, protocol):
    crashes = 0
    for name, seed in (("ledger", 11), ("hotel", 12)):
        result = run_bench(platform, make_workload(name, 12, seed), protocol,
                           crash_rate=0.05, seed=seed)
        crashes += result["crashes"]
        assert result["violations"] == 0, (name, result)
    assert crashes > 0  # the run really crashed workers


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["arcus", "halfmoon"])
def test_many_crash_points_in_workflows(platform, protocol):
    result = run_bench(platform, make_workload("ledger", 60, 5), protocol, crash_rate=0.06,
                       seed=5)
    assert result["crashes"] >= 20 and result["violations"] == 0, result


def test_unsafe_violates_exactly_once_in_the_same_harness(platform):
    result = run_bench(platform, make_workload("ledger", 12, 11), "unsafe", crash_rate=0.05,
                       seed=11)
    assert result["crashes"] > 0
    assert result["duplicated_writes"] + result["inconsistent_reads"] > 0, result


def test_arcus_reads_hit_the_cache_and_writes_skip_the_round_trip(platform):
    result = run_bench(platform, make_workload("ledger", 10, 2), "arcus")
    baseline = run_bench(platform, make_workload("ledger", 10, 2), "cflog")
    assert result["cache_hit_rate"] > 0.3
    assert result["rtts_per_request"] < baseline["rtts_per_request"]


def test_acknowledged_writes_are_durable_and_later_requests_see_them(platform):
    """Write-behind: by the time invoke returns, Redis has the value; any worker then reads it."""
    load_state("arcus", platform.client, "ack", {})
    for i in range(25):
        platform.invoke("write", {"key": "x", "value": i}, protocol="arcus", ns="ack")
        assert final_state("arcus", platform.client, "ack", ["x"]) == {"x": i}
        assert platform.invoke("read", {"key": "x"}, protocol="arcus", ns="ack")["value"] == i


def test_concurrent_readers_never_go_backwards(platform):
    """Documented level: per-key values move forward; a read started after an ack sees it."""
    load_state("arcus", platform.client, "conc", {"x": 0})
    acked = [0]
    problems = []

    def writer():
        for i in range(1, 31):
            platform.invoke("write", {"key": "x", "value": i}, protocol="arcus", ns="conc")
            acked[0] = i

    def reader():
        last = 0
        for _ in range(30):
            floor = acked[0]
            value = platform.invoke("read", {"key": "x"}, protocol="arcus", ns="conc")["value"]
            if value < last or value < floor:
                problems.append((last, floor, value))
            last = value

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader)
                                                   for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not problems


def test_bad_names_are_clear_errors(platform):
    with pytest.raises(UnknownNameError, match="valid: "):
        platform.invoke("no_such_fn", {}, protocol="arcus")
    with pytest.raises(UnknownNameError, match="protocol"):
        platform.invoke("read", {"key": "a"}, protocol="nope")
    with pytest.raises(SchedlabError, match="failed"):
        platform.invoke("read", {"wrong": 1}, protocol="arcus")  # KeyError inside the function


def test_http_gateway(platform):
    from fastapi.testclient import TestClient

    from schedlab.arcus.gateway import make_app

    client = TestClient(make_app(platform))
    ok = client.post("/invoke/ledger", json={"arg": {"counter": "c", "list": "l", "id": "1"},
                                             "ns": "http"})
    assert ok.status_code == 200 and ok.json()["value"] == {"count": 1, "length": 1}
    assert client.post("/invoke/nope", json={"arg": 1}).status_code == 404
    assert client.post("/invoke/read", json={"arg": 1, "protocol": "x"}).status_code == 400
    assert client.post("/invoke/read", json={"args": 1}).status_code == 422
    assert client.post("/invoke/read", content=b"{oops").status_code == 422
    assert client.get("/health").json()["workers_alive"] == 4


def test_cli_bench_json_and_errors(redis_url):
    from schedlab.arcus.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["bench", "--workload", "ledger", "--protocol", "arcus",
                             "--requests", "4", "--crash-rate", "0.05", "--workers", "2",
                             "--redis-url", redis_url, "--json"])
    assert ok.exit_code == 0, ok.output
    document = json.loads(ok.stdout)
    assert document["violations"] == 0 and {"lost_writes", "duplicated_writes",
                                            "inconsistent_reads"} <= set(document)
    bad = runner.invoke(app, ["bench", "--protocol", "nope"])
    assert bad.exit_code == 2 and "valid: arcus" in bad.output
    down = runner.invoke(app, ["bench", "--redis-url", "redis://127.0.0.1:1/0"])
    assert down.exit_code == 2 and "cannot reach Redis" in down.output


def test_unreachable_redis_fails_requests_instead_of_acknowledging():
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed")
    server = RedisServer().start()
    try:
        with Platform(server.url, workers=2, reply_timeout=5) as running:
            running.invoke("write", {"key": "k", "value": 1}, protocol="arcus", ns="down")
            server.stop()
            with pytest.raises(MissingServiceError, match="not acknowledged"):
                running.invoke("write", {"key": "k", "value": 2}, protocol="arcus", ns="down")
    finally:
        server.stop()


@pytest.mark.parametrize("arg", ['"x"', "[1, 2, 3]"])
def test_cli_bench_request_argument_of_the_wrong_shape_is_named(tmp_path, arg):
    # regression: {"fn": "write", "arg": "x"} used to end in a TypeError from apps.py;
    # it is rejected before any worker or redis-server starts
    from schedlab.arcus.cli import app

    requests = tmp_path / "reqs.jsonl"
    requests.write_text('{"fn": "write", "arg": {"key": "a", "value": 1}}\n'
                        f'{{"fn": "write", "arg": {arg}}}\n')
    result = CliRunner().invoke(app, ["bench", "--requests-file", str(requests),
                                      "--redis-url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2, result.output
    assert "reqs.jsonl" in result.output and "request #2" in result.output
    assert "'arg'" in result.output


def test_cli_serve_port_in_use_and_bad_host_are_named():
    # regression: uvicorn used to exit 3 after starting redis and the workers
    import socket

    from schedlab.arcus.cli import app

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--demo", "--port", str(port),
                                          "--duration", "1",
                                          "--redis-url", "redis://127.0.0.1:1/0"])
    assert result.exit_code == 2, result.output
    assert "port" in result.output and "cannot listen" in result.output
    result = CliRunner().invoke(app, ["serve", "--demo", "--host", "999.1.1.1",
                                      "--duration", "1"])
    assert result.exit_code == 2 and "host" in result.output
