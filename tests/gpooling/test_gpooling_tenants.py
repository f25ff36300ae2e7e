"""The control plane as tenants meet it: a real uvicorn server on 127.0.0.1, driven with plain
HTTP requests (what curl would send), jobs held by real processes under the shim.

Targets (issue 24): 401 without a token, 403 on another tenant's virtual device, 409 on release
or shrink while processes are attached unless forced by the owner, processes told on a forced
release, and no physical over-commit while a released device's processes still hold memory.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from schedlab.core.errors import BadInputError
from schedlab.gpooling import shm
from schedlab.gpooling.agent import ControlPlane, run_in_vdev
from schedlab.gpooling.api import create_app, read_tokens
from schedlab.gpooling.devices import GIB, StaticBackend
from schedlab.gpooling.native import build, shim_environment
from schedlab.gpooling.pool import ConflictError, ForbiddenError, Pool

ALICE, BOB, ADMIN = "alice-token-0123456789", "bob-token-0123456789ab", "admin-token-0123456789"
TOKENS = {ALICE: "alice", BOB: "bob", ADMIN: "admin"}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return build(root=tmp_path_factory.mktemp("gpooling-build"))


@pytest.fixture
def server(tmp_path: Path, native, monkeypatch, serve_app):
    monkeypatch.setenv("GPOOLING_BUILD_DIR", str(native.root.parent))
    pool = Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path / "regions")
    with httpx.Client(base_url=serve_app(create_app(pool, TOKENS)), timeout=10) as client:
        yield client, pool


def _hold(native, vdev: dict, first: int, then: int) -> subprocess.Popen:
    """A job holding ``first`` bytes that asks for ``then`` more after 1.5 s."""
    env = shim_environment(native, region=Path(vdev["region"]), stand_in=True)
    process = subprocess.Popen([str(native.probe), "alloc", str(first), "sleep", "1500", "alloc",
                                str(then)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert '"rc":0' in process.stdout.readline()
    return process


def test_no_token_is_401(server) -> None:
    client, _ = server
    for method, path in [("GET", "/vdevs"), ("GET", "/devices"), ("GET", "/stats"),
                         ("POST", "/vdevs"), ("DELETE", "/vdevs/vdev-1")]:
        assert client.request(method, path).status_code == 401
        assert client.request(method, path, headers=_auth("wrong-token-000000000")
                              ).status_code == 401
    assert client.get("/vdevs", headers={"Authorization": ALICE}).status_code == 401  # no scheme


def test_other_tenants_device_is_403(server) -> None:
    client, _ = server
    made = client.post("/vdevs", json=dict(memory="4GiB", compute=0.3), headers=_auth(ALICE))
    assert made.status_code == 201 and made.json()["owner"] == "alice"
    vid = made.json()["id"]
    assert client.get(f"/vdevs/{vid}", headers=_auth(BOB)).status_code == 403
    assert client.patch(f"/vdevs/{vid}", json=dict(compute=0.1), headers=_auth(BOB)
                        ).status_code == 403
    assert client.delete(f"/vdevs/{vid}?force=true", headers=_auth(BOB)).status_code == 403
    assert client.post(f"/vdevs/{vid}/usage", json=dict(usage={}), headers=_auth(BOB)
                       ).status_code == 403
    assert client.get("/vdevs", headers=_auth(BOB)).json() == []
    unknown = client.get("/vdevs/vdev-999", headers=_auth(BOB))
    assert unknown.status_code == 404 and vid not in unknown.text  # no other tenant's ids
    assert [v["id"] for v in client.get("/vdevs", headers=_auth(ADMIN)).json()] == [vid]
    assert client.get(f"/vdevs/{vid}", headers=_auth(ALICE)).status_code == 200
    assert client.delete(f"/vdevs/{vid}", headers=_auth(ALICE)).status_code == 200


def test_release_and_shrink_with_processes_attached(server, native) -> None:
    client, pool = server
    vdev = client.post("/vdevs", json=dict(memory="10GiB", compute=0.5),
                       headers=_auth(ALICE)).json()
    vid = vdev["id"]
    job = _hold(native, vdev, 8 * GIB, 1 << 20)
    try:
        assert client.delete(f"/vdevs/{vid}", headers=_auth(ALICE)).status_code == 409
        shrink = dict(memory="9GiB")
        assert client.patch(f"/vdevs/{vid}", json=shrink, headers=_auth(ALICE)).status_code == 409
        assert client.patch(f"/vdevs/{vid}", json=dict(memory="4GiB"),  # below use: never
                            headers=_auth(ALICE), params=dict(force="true")).status_code == 409
        assert client.patch(f"/vdevs/{vid}", json=dict(memory="12GiB"),
                            headers=_auth(ALICE)).status_code == 200  # growing is fine
        assert client.patch(f"/vdevs/{vid}", json=shrink, headers=_auth(ALICE),
                            params=dict(force="true")).status_code == 200
        # the card (16 GiB) is still held: nobody gets a whole device while the job lives
        gone = client.delete(f"/vdevs/{vid}", headers=_auth(ALICE), params=dict(force="true"))
        assert gone.status_code == 200 and gone.json()["state"] == "revoked"
        whole = dict(memory="16GiB", compute=1.0)
        assert client.post("/vdevs", json=whole, headers=_auth(BOB)).status_code == 409
        out, err = job.communicate(timeout=30)
        assert '"rc":2' in out  # the job was told: its next allocation is refused ...
        assert f"{vid} was released by its owner" in err  # ... and why
    finally:
        job.kill()
        job.wait()
    # the last process is gone: the capacity comes back, exactly once
    made = client.post("/vdevs", json=whole, headers=_auth(BOB))
    assert made.status_code == 201, made.text
    assert client.get(f"/vdevs/{vid}", headers=_auth(ALICE)).status_code == 404
    stats = client.get("/stats", headers=_auth(BOB)).json()
    assert stats["compute_allocated"] == 1.0 and stats["memory_allocated"] == 1.0


def test_killed_holder_keeps_capacity_booked_until_reaped(server, native) -> None:
    client, pool = server
    vdev = client.post("/vdevs", json=dict(memory="8GiB", compute=0.5),
                       headers=_auth(ALICE)).json()
    job = _hold(native, vdev, 8 * GIB, 1)
    client.delete(f"/vdevs/{vdev['id']}", headers=_auth(ALICE), params=dict(force="true"))
    other = client.post("/vdevs", json=dict(memory="10GiB", compute=0.5), headers=_auth(BOB))
    assert other.status_code == 409  # 8 GiB still physically held + 10 GiB > 16 GiB
    job.kill()  # SIGKILL: no destructor; the reaper gives its bytes back
    job.wait()
    assert client.post("/vdevs", json=dict(memory="10GiB", compute=0.5),
                       headers=_auth(BOB)).status_code == 201


def test_agent_tells_and_stops_its_job_on_forced_release(server, native, tmp_path) -> None:
    client, pool = server
    plane = ControlPlane(str(client.base_url), token=ALICE)
    vdev = plane.create(4 * GIB, 0.5)
    outcome: dict = {}

    def run() -> None:
        outcome["run"] = run_in_vdev(vdev, [str(native.probe), "alloc", str(GIB), "sleep",
                                            "20000"], native, stand_in=True,
                                     refresh=lambda: plane.get(vdev["id"]), interval=0.2,
                                     stdout=subprocess.DEVNULL)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.time() + 20
    while pool.attached(vdev["id"]) == 0 and time.time() < deadline:
        time.sleep(0.1)
    with pytest.raises(BadInputError, match="409"):
        plane.release(vdev["id"])
    assert plane.release(vdev["id"], force=True)["state"] == "revoked"
    thread.join(timeout=30)
    assert not thread.is_alive()
    result = outcome["run"]
    assert result.revoked and result.returncode != 0  # SIGTERM from its agent
    assert result.usage["memory_used"] == 0
    assert plane.list() == []  # drained and gone


def test_library_refusals_are_typed(tmp_path: Path) -> None:
    pool = Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path)
    vdev = pool.create(GIB, 0.5, owner="alice")
    with pytest.raises(ForbiddenError):
        pool.release(vdev.id, tenant="bob")
    assert pool.release(vdev.id, tenant="alice").state == "released"
    with pytest.raises(BadInputError, match="positive"):
        pool.create(0, 0.5)
    assert issubclass(ConflictError, BadInputError)


@pytest.mark.parametrize("text, message", [
    ("alice short\n", "shorter than 16"),
    ("alice a-very-long-token-1\nbob a-very-long-token-1\n", "two tenants"),
    ("alice\n", "expected 'tenant token'"),
    ('{"alice": 3}', "must be a string"),
    ("{not json", "not valid JSON"),
    ("# nothing\n", "no tokens"),
])
def test_bad_tokens_file_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tokens"
    path.write_text(text)
    with pytest.raises(BadInputError, match=message) as caught:
        read_tokens(path)
    assert str(path) in str(caught.value)


def test_tokens_file_formats(tmp_path: Path) -> None:
    lines = tmp_path / "t.txt"
    lines.write_text("# tenants\nalice a-very-long-token-1\nbob   b-very-long-token-2  # x\n")
    assert read_tokens(lines) == {"a-very-long-token-1": "alice", "b-very-long-token-2": "bob"}
    doc = tmp_path / "t.json"
    doc.write_text('{"alice": "a-very-long-token-1"}')
    assert read_tokens(doc) == {"a-very-long-token-1": "alice"}
    with pytest.raises(BadInputError, match="token"):
        create_app(Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path / "r"), {})
    assert shm.VERSION == 2


def test_serve_with_a_bad_tokens_file_is_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from schedlab.gpooling.cli import app

    bad = tmp_path / "tokens"
    bad.write_text("alice short\n")
    done = CliRunner().invoke(app, ["serve", "--inventory", "T4:1", "--tokens", str(bad)])
    assert done.exit_code == 2 and f"{bad}:1" in done.output and "Traceback" not in done.output
    unauthorised = CliRunner().invoke(app, ["list", "--server", "http://127.0.0.1:9",
                                            "--token", "x" * 20])
    assert unauthorised.exit_code == 2 and "gpooling serve" in unauthorised.output


def test_client_without_a_valid_token_is_told_how(server) -> None:
    client, _ = server
    plane = ControlPlane(str(client.base_url), token="not-a-token-000000000")
    with pytest.raises(BadInputError, match="401") as caught:
        plane.list()
    assert "GPOOLING_TOKEN" in str(caught.value)
