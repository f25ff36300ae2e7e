"""Exactly-once across the API (Arcus, paper 12): idempotency keys (Python and HTTP), async
submit + status, the protocol bound to a namespace, log GC, and ``schedlab arcus serve`` as a
real process (user module, persistent Redis that is restarted, clean shutdown on SIGTERM)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from typer.testing import CliRunner

from schedlab.arcus.platform import Platform, instance_for_key
from schedlab.arcus.policies import final_state, load_state
from schedlab.arcus.store import RedisServer, find_redis_binary
from schedlab.core.errors import BadInputError, ConfigError

LEDGER = {"counter": "c", "list": "l", "id": "1"}


@pytest.fixture(scope="module")
def platform():
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with RedisServer() as server, Platform(server.url, workers=2) as running:
        yield running


def test_idempotency_key_makes_a_retry_the_same_instance(platform):
    ns = "idem"
    first = platform.invoke("ledger", LEDGER, ns=ns, idempotency_key="order-1")
    again = platform.invoke("ledger", LEDGER, ns=ns, idempotency_key="order-1")
    other = platform.invoke("ledger", {**LEDGER, "id": "2"}, ns=ns, idempotency_key="order-2")
    assert first["value"] == again["value"] == {"count": 1, "length": 1}
    assert first["id"] == again["id"] == instance_for_key("order-1") != other["id"]
    assert final_state("arcus", platform.client, ns, ["c", "l"]) == {"c": 2, "l": ["1", "2"]}
    with pytest.raises(BadInputError, match="different request"):
        platform.invoke("ledger", {**LEDGER, "id": "9"}, ns=ns, idempotency_key="order-1")
    with pytest.raises(BadInputError, match="idempotency key"):
        platform.invoke("ledger", LEDGER, ns=ns, idempotency_key="")


def test_submit_and_status(platform):
    ns = "async"
    instance = platform.submit("ledger", LEDGER, ns=ns, idempotency_key="job-1")
    deadline = time.monotonic() + 10
    while platform.status(instance, ns)["state"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert platform.status(instance, ns) == {"id": instance, "state": "done",
                                             "value": {"count": 1, "length": 1}}
    assert platform.submit("ledger", LEDGER, ns=ns, idempotency_key="job-1") == instance
    time.sleep(0.2)
    assert final_state("arcus", platform.client, ns, ["c"]) == {"c": 1}
    assert platform.status("nope", ns)["state"] == "unknown"


def test_a_namespace_is_bound_to_one_protocol(platform):
    platform.invoke("write", {"key": "k", "value": 1}, protocol="arcus", ns="bound")
    with pytest.raises(ConfigError, match="bound to protocol 'arcus'"):
        platform.invoke("read", {"key": "k"}, protocol="halfmoon", ns="bound")
    with Platform(platform.url, workers=2) as other:  # the binding lives in Redis
        with pytest.raises(ConfigError, match="bound"):
            other.invoke("read", {"key": "k"}, protocol="cflog", ns="bound")
    with pytest.raises(ConfigError, match="bound"):
        load_state("beldi", platform.client, "bound", {"k": 2})


@pytest.mark.parametrize("protocol", ["arcus", "halfmoon", "beldi"])
def test_log_gc_removes_finished_instances_with_their_children(platform, protocol):
    ns = f"gc-{protocol}"
    load_state(protocol, platform.client, ns, {})
    first = platform.invoke("ledger_flow", {**LEDGER, "list2": "m"}, protocol=protocol, ns=ns,
                            idempotency_key="flow")
    root = instance_for_key("flow")
    platform.client.zadd(f"{ns}:done", {"orphan.1": 0})  # a child whose root never finished
    assert platform.gc(ns, retention_s=3600) == 0  # too young
    with pytest.raises(ConfigError, match="shorter than the lease"):
        platform.gc(ns, retention_s=0)
    done = {m.decode(): 0 for m in platform.client.zrange(f"{ns}:done", 0, -1)}
    platform.client.zadd(f"{ns}:done", done)  # finished long ago
    removed = platform.gc(ns, retention_s=platform.lease_s)
    assert removed == 3  # the root and its two children
    leftovers = [k.decode() for k in platform.client.scan_iter(f"{ns}:*")]
    # logs and the fence are gone; only the keyed request's answer stays (with an expiry)
    assert [k for k in leftovers if root in k] == [f"{ns}:req:{root}"], leftovers
    assert platform.client.ttl(f"{ns}:req:{root}") > 3600
    assert platform.client.zscore(f"{ns}:done", "orphan.1") is not None
    # state stays; a retry with the key after GC gets the first answer and runs nothing
    again = platform.invoke("ledger_flow", {**LEDGER, "list2": "m"}, protocol=protocol, ns=ns,
                            idempotency_key="flow")
    assert again["stats"]["rtts"] == 0 and again["value"] == first["value"]
    assert final_state(protocol, platform.client, ns, ["c"]) == {"c": 2}


def test_a_named_platform_hands_queued_work_to_its_successor(platform):
    """serve uses a fixed name: what a stopped gateway left queued runs after a restart."""
    with Platform(platform.url, workers=2, name="handover") as first:
        first.invoke("write", {"key": "k", "value": 0}, ns="handover")
    left = Platform(platform.url, workers=2, name="handover")
    left.client = platform.client  # enqueue as a gateway would, with no worker running
    left.bound["handover"] = "arcus"
    job = left.submit("write", {"key": "k", "value": 5}, ns="handover", idempotency_key="j")
    with Platform(platform.url, workers=2, name="handover") as second:
        deadline = time.monotonic() + 10
        while second.status(job, "handover")["state"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    assert final_state("arcus", platform.client, "handover", ["k"]) == {"k": 5}
    for key in platform.client.scan_iter("handover:*"):
        platform.client.delete(key)


def test_bad_api_arguments_are_named(platform):
    with pytest.raises(BadInputError, match="JSON"):
        platform.invoke("write", {"key": "k", "value": {1, 2}})
    with pytest.raises(BadInputError, match="namespace"):
        platform.invoke("read", {"key": "k"}, ns="a:b")
    with pytest.raises(ConfigError, match="not both"):
        platform.invoke("read", {"key": "k"}, instance="i", idempotency_key="k")
    with pytest.raises(ConfigError, match="lease_s"):
        Platform(platform.url, lease_s=0)
    with pytest.raises(ConfigError, match="retention 0.5 s is shorter than the lease 1 s"):
        Platform(platform.url, lease_s=1.0, retention_s=0.5)


def test_http_idempotency_key_submit_and_status(platform):
    from fastapi.testclient import TestClient

    from schedlab.arcus.gateway import make_app

    client = TestClient(make_app(platform))
    body = {"arg": LEDGER, "ns": "http-idem"}
    first = client.post("/invoke/ledger", json=body, headers={"Idempotency-Key": "pay-1"})
    again = client.post("/invoke/ledger", json=body, headers={"Idempotency-Key": "pay-1"})
    assert first.status_code == again.status_code == 200
    assert first.json()["value"] == again.json()["value"] == {"count": 1, "length": 1}
    changed = client.post("/invoke/ledger", json={**body, "arg": {**LEDGER, "id": "x"}},
                          headers={"Idempotency-Key": "pay-1"})
    assert changed.status_code == 422 and "different request" in changed.json()["detail"]
    too_long = client.post("/invoke/ledger", json=body, headers={"Idempotency-Key": "x" * 300})
    assert too_long.status_code == 422
    accepted = client.post("/submit/ledger", json={**body, "arg": {**LEDGER, "id": "2"}},
                           headers={"Idempotency-Key": "pay-2"})
    assert accepted.status_code == 202
    url = accepted.json()["status_url"]
    deadline = time.monotonic() + 10
    while client.get(url).json()["state"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.get(url).json()["value"] == {"count": 2, "length": 2}
    assert client.get("/status/nothing?ns=http-idem").status_code == 404
    mixed = client.post("/invoke/read", json={"arg": {"key": "c"}, "ns": "http-idem",
                                              "protocol": "boki"})
    assert mixed.status_code == 409


# --- serve as a real process -------------------------------------------------------------------
APP = '''
from schedlab.arcus import function

@function("greet", keys=("who",))
def greet(ctx, arg):
    n = (ctx.read("count:" + arg["who"]) or 0) + 1
    ctx.write("count:" + arg["who"], n)
    return n
'''


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TOKEN = "test-token-0123456789abcdef"


def _post(port, path, body, key=None, token=TOKEN):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST",
                                     data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def _descendants(pid):
    import psutil

    return psutil.Process(pid).children(recursive=True)


def test_serve_loads_a_module_keeps_redis_persistent_and_reaps_everything(tmp_path):
    psutil = pytest.importorskip("psutil")
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed")
    (tmp_path / "my_app.py").write_text(APP)
    (tmp_path / "tokens").write_text(f"# clients\n{TOKEN}\nsecond-client-token-000000\n")
    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "schedlab.cli", "arcus", "serve", "--port", str(port),
         "--workers", "2", "--module", str(tmp_path / "my_app.py"), "--lease", "1",
         "--token-file", str(tmp_path / "tokens")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                if serve.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"serve did not come up: {serve.communicate()[1][-2000:]}")
                time.sleep(0.2)
        assert _post(port, "/invoke/greet", {"arg": {"who": "ann"}}, key="g1")["value"] == 1
        _probe_exposure(port)
        children = _descendants(serve.pid)
        redis_procs = [p for p in children if "redis-server" in p.name()]
        assert len(redis_procs) == 1
        import re

        import redis

        title = " ".join(redis_procs[0].cmdline())  # redis-server sets it to "... host:port"
        redis_port = int(re.search(r"127\.0\.0\.1:(\d+)", title).group(1))
        config = redis.Redis(port=redis_port).config_get("append*")
        assert config["appendonly"] == "yes" and config["appendfsync"] == "always"
        redis_procs[0].kill()  # the private Redis dies: serve restarts it, the AOF has it all
        time.sleep(1.0)
        deadline = time.monotonic() + 30
        while True:
            try:
                again = _post(port, "/invoke/greet", {"arg": {"who": "ann"}}, key="g1")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        assert again["value"] == 1  # same key, same instance, after the restart
        assert _post(port, "/invoke/greet", {"arg": {"who": "ann"}})["value"] == 2
        children = _descendants(serve.pid)
        assert sum("redis-server" in p.name() for p in children) == 1
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=30)
        gone, alive = psutil.wait_procs(children, timeout=10)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def _status(port, path, body=None, token=TOKEN, method="POST"):
    """The HTTP status of one request (urllib raises on >= 400)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                     data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _probe_exposure(port):
    """Issue 44: only the module's functions, only with a token."""
    assert _post(port, "/invoke/greet", {"arg": {"who": "bo"}},
                 token="second-client-token-000000")["value"] == 1  # a per-client token
    for fn in ("write", "read", "bank_transfer", "ops", "hotel_book", "nothere"):
        code, text = _status(port, f"/invoke/{fn}", {"arg": {"key": "count:ann", "value": 9}})
        assert code == 404, (fn, code, text)
        assert text.endswith('valid: greet"}'), text  # the demos' names are not revealed
        assert _status(port, f"/submit/{fn}", {"arg": {}})[0] == 404
    for token in (None, "wrong-token-0123456789", TOKEN + "x", TOKEN[:-1]):
        assert _status(port, "/invoke/greet", {"arg": {"who": "ann"}}, token=token)[0] == 401
        assert _status(port, "/submit/greet", {"arg": {"who": "ann"}}, token=token)[0] == 401
        assert _status(port, "/status/x", token=token, method="GET")[0] == 401
        assert _status(port, "/invoke/write", {"arg": {}}, token=token)[0] == 401
    for path in ("/docs", "/openapi.json"):
        assert _status(port, path, method="GET")[0] == 404
    assert _post(port, "/invoke/greet", {"arg": {"who": "ann"}}, key="g1")["value"] == 1


def _start_serve(port, *extra):
    serve = subprocess.Popen(
        [sys.executable, "-m", "schedlab.cli", "arcus", "serve", "--port", str(port),
         "--workers", "2", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return serve
        except OSError:
            if serve.poll() is not None or time.monotonic() > deadline:
                serve.kill()
                pytest.fail(f"serve did not come up: {serve.communicate()[1][-2000:]}")
            time.sleep(0.2)


def test_serve_killed_with_sigkill_leaves_no_orphans():
    psutil = pytest.importorskip("psutil")
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    serve = _start_serve(port, "--aof", "off", "--demo", "--no-auth")
    try:
        assert _post(port, "/invoke/write", {"arg": {"key": "k", "value": 1}},
                     token=None)["value"] is None
        children = _descendants(serve.pid)
        assert len(children) >= 4  # redis-server, fork server, 2 workers (+ tracker)
        serve.kill()
        serve.wait(timeout=10)
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert not alive, [p.cmdline()[:3] for p in alive]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()


def test_serve_rejects_a_module_without_main_guard_and_bad_options(tmp_path):
    from schedlab.arcus.cli import app

    bad = tmp_path / "unguarded.py"
    bad.write_text("from schedlab.arcus import Platform\nPlatform('redis://127.0.0.1:1/0')\n")
    runner = CliRunner()
    result = runner.invoke(app, ["serve", "--module", str(bad), "--port", str(_free_port()),
                                 "--redis-url", "redis://127.0.0.1:1/0"])
    # the Redis check comes first when it is unreachable; with a private Redis the guard speaks
    assert result.exit_code == 2
    result = runner.invoke(app, ["serve", "--module", str(bad), "--port", str(_free_port())])
    assert result.exit_code == 2 and "__main__" in result.output, result.output
    result = runner.invoke(app, ["serve", "--module", "no_such_module_here",
                                 "--port", str(_free_port())])
    assert result.exit_code == 2 and "cannot import module" in result.output
    result = runner.invoke(app, ["serve", "--aof", "sometimes", "--port", str(_free_port())])
    assert result.exit_code == 2 and "valid: always" in result.output
    result = runner.invoke(app, ["serve", "--port", str(_free_port())])
    assert result.exit_code == 2 and "--module my_app" in result.output
    assert "--demo" in result.output
    result = runner.invoke(app, ["serve", "--demo", "--no-auth", "--host", "0.0.0.0"])
    assert result.exit_code == 2 and "--no-auth on 0.0.0.0" in result.output
    result = runner.invoke(app, ["serve", "--demo", "--retention", "1", "--lease", "5"])
    assert result.exit_code == 2 and "retention 1 s is shorter than the lease 5 s" in result.output
    tokens = tmp_path / "tokens"
    tokens.write_text("# a comment\nshort\n")
    result = runner.invoke(app, ["serve", "--demo", "--token-file", str(tokens)])
    assert result.exit_code == 2 and "tokens:2" in result.output and "16" in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert os.path.exists(bad)


def test_cli_bench_runs_user_functions_from_a_module(tmp_path):
    if find_redis_binary() is None:
        pytest.skip("redis-server is not installed")
    from schedlab.arcus.cli import app

    (tmp_path / "bench_app.py").write_text(APP.replace('"greet"', '"greet_bench"'))
    requests = tmp_path / "reqs.jsonl"
    requests.write_text('{"fn": "greet_bench", "arg": {"who": "a"}}\n' * 3)
    result = CliRunner().invoke(app, ["bench", "--module", str(tmp_path / "bench_app.py"),
                                      "--requests-file", str(requests), "--workers", "2",
                                      "--crash-rate", "0.1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["violations"] == 0


def test_module_by_dotted_name_resolves_from_the_working_directory(tmp_path, monkeypatch):
    """Regression: `serve --module my_app` run next to my_app.py could not import it."""
    from schedlab.arcus.apps import FUNCTIONS
    from schedlab.arcus.platform import load_modules

    (tmp_path / "cwd_app.py").write_text(APP.replace('"greet"', '"greet_cwd"'))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "cwd_app", raising=False)
    names, paths = load_modules(["cwd_app"])
    assert names == ("cwd_app",) and str(tmp_path) in paths and "greet_cwd" in FUNCTIONS


def test_module_file_named_like_a_loaded_module_is_refused(tmp_path, monkeypatch):
    """Regression: `--module json.py` silently imported the standard library's json."""
    from schedlab.arcus.platform import load_modules

    (tmp_path / "json.py").write_text(APP.replace('"greet"', '"greet_json"'))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(BadInputError, match="rename the file") as info:
        load_modules([str(tmp_path / "json.py")])
    assert "json.py" in str(info.value) and "module" in str(info.value)


def test_http_body_sent_as_curl_d_form_is_read_as_json(platform):
    """Regression: `curl -d '{...}'` (form content type, as in the docs) answered a 422."""
    from fastapi.testclient import TestClient

    from schedlab.arcus.gateway import make_app

    client = TestClient(make_app(platform))
    form = {"Content-Type": "application/x-www-form-urlencoded", "Idempotency-Key": "form-1"}
    body = b'{"arg": {"key": "k", "value": 3}, "ns": "form"}'
    first = client.post("/invoke/write", content=body, headers=form)
    again = client.post("/invoke/write", content=body, headers=form)
    assert first.status_code == again.status_code == 200
    assert first.json()["id"] == again.json()["id"]
    broken = client.post("/invoke/write", content=b'{"arg": ', headers=form)
    assert broken.status_code == 422 and broken.json()["detail"][0]["type"] == "json_invalid"
