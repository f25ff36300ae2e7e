"""The control plane: Pool semantics, the HTTP API, and the CLI end to end against a live server.

The end-to-end test starts the real FastAPI app under uvicorn on 127.0.0.1, creates a virtual
device with ``schedlab gpooling create``, runs the probe client in it with ``schedlab gpooling
run --stand-in``, and checks that the quota was enforced by the shim and reported back.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from schedlab.core.errors import BadInputError, MissingServiceError, UnknownNameError
from schedlab.gpooling import shm
from schedlab.gpooling.agent import ControlPlane
from schedlab.gpooling.api import create_app
from schedlab.gpooling.devices import GIB, StaticBackend
from schedlab.gpooling.native import build, run_probe, shim_environment
from schedlab.gpooling.pool import ConflictError, NoRoomError, Pool

MIB = 1 << 20
TOKEN = "token-of-alice-0123456789"
TOKENS = {TOKEN: "alice"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    return Pool(StaticBackend("a=T4:2;b=V100M32:1").discover(), "frag-aware", tmp_path)


def test_create_places_slices_and_writes_the_quota(pool: Pool) -> None:
    a = pool.create(8 * GIB, 0.5)
    b = pool.create(8 * GIB, 0.5)
    assert a.id != b.id and Path(a.region).is_file()
    region = shm.read_region(a.region)
    assert region["memory_limit"] == 8 * GIB and region["share_ppm"] == 500_000
    assert pool.stats()["compute_allocated"] == pytest.approx(1 / 3)


def test_refusals_say_why(pool: Pool) -> None:
    with pytest.raises(BadInputError, match="no device in the pool can hold 40.00 GiB"):
        pool.create(40 * GIB, 0.1)
    with pytest.raises(BadInputError, match="no A100 device in the pool") as unknown:
        pool.create(GIB, 0.1, model="A100")  # the field at fault is the model, not memory
    assert unknown.value.field == "model"
    with pytest.raises(BadInputError, match="compute"):
        pool.create(GIB, 0.0)
    for _ in range(3):
        pool.create(GIB, 1.0)
    with pytest.raises(NoRoomError, match="busy"):
        pool.create(GIB, 0.1)
    with pytest.raises(UnknownNameError):
        pool.release("vdev-99")


def test_resize_in_place_and_its_limits(pool: Pool) -> None:
    vdev = pool.create(4 * GIB, 0.3)
    grown = pool.resize(vdev.id, memory=10 * GIB, compute=0.6)
    assert (grown.memory, grown.compute) == (10 * GIB, 0.6)
    assert shm.read_region(vdev.region)["memory_limit"] == 10 * GIB
    with pytest.raises(ConflictError, match="cannot grow in place"):
        pool.resize(vdev.id, memory=40 * GIB)
    pool.release(vdev.id)
    assert not Path(vdev.region).exists()
    assert pool.stats()["compute_allocated"] == 0


def test_shrink_below_use_is_refused(pool: Pool, tmp_path: Path) -> None:
    vdev = pool.create(4 * GIB, 0.3)
    native = build(root=tmp_path / "build")
    env = shim_environment(native, region=Path(vdev.region), stand_in=True)
    holder = subprocess.Popen([str(native.probe), "alloc", str(2 * GIB), "sleep", "3000"],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        holder.stdout.readline()
        with pytest.raises(BadInputError, match="cannot shrink"):
            pool.resize(vdev.id, memory=GIB, force=True)
        assert run_probe(native, ["alloc", str(3 * GIB)], env)[0]["rc"] == 2
    finally:
        holder.kill()
        holder.wait()


def test_http_api_status_codes(pool: Pool) -> None:
    client = TestClient(create_app(pool, TOKENS), headers=AUTH)
    created = client.post("/vdevs", json=dict(memory="10GiB", compute=0.3))
    assert created.status_code == 201
    vid = created.json()["id"]
    assert client.get(f"/vdevs/{vid}").json()["usage"]["memory_limit"] == 10 * GIB
    assert client.post("/vdevs", json=dict(memory="64GiB", compute=0.3)).status_code == 422
    assert client.post("/vdevs", json=dict(memory="1GiB", compute=2)).status_code == 422
    assert client.post("/vdevs", json=dict(memory="lots", compute=0.5)).status_code == 422
    assert client.patch(f"/vdevs/{vid}", json=dict(compute=0.5)).json()["compute"] == 0.5
    past = client.patch(f"/vdevs/{vid}", json=dict(memory="64GiB"))  # past its card: a conflict
    assert past.status_code == 409 and "cannot grow in place" in past.json()["detail"]
    assert client.get("/vdevs/nope").status_code == 404
    assert client.post(f"/vdevs/{vid}/usage", json=dict(usage={"busy_ns": 5})).status_code == 200
    for bad in ({"busy_ns": -5}, {"memory_used": float("inf")}, {"made_up": 1}):
        refused = client.post(f"/vdevs/{vid}/usage", content=json.dumps(dict(usage=bad)),
                              headers={"content-type": "application/json"})
        assert refused.status_code == 422, bad
        assert next(iter(bad)) in refused.text
    for _ in range(2):
        client.post("/vdevs", json=dict(memory="1GiB", compute=1.0))
    assert client.post("/vdevs", json=dict(memory="1GiB", compute=0.9)).status_code == 409
    assert len(client.get("/devices").json()) == 3
    assert client.delete(f"/vdevs/{vid}").status_code == 200


def test_client_maps_errors(pool: Pool) -> None:
    plane = ControlPlane("http://testserver", client=TestClient(create_app(pool, TOKENS)),
                         token=TOKEN)
    with pytest.raises(BadInputError, match="404"):
        plane.get("vdev-7")
    with pytest.raises(MissingServiceError, match="gpooling serve"):
        ControlPlane("http://127.0.0.1:9", timeout=0.5).list()


@pytest.fixture
def live_server(tmp_path: Path, serve_app):
    pool = Pool(StaticBackend("T4:2").discover(), "frag-aware", tmp_path / "regions")
    return serve_app(create_app(pool, TOKENS)), pool


def test_cli_end_to_end(live_server, tmp_path: Path, monkeypatch) -> None:
    from schedlab.gpooling.cli import app

    url, pool = live_server
    monkeypatch.setenv("GPOOLING_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("GPOOLING_TOKEN", TOKEN)
    runner = CliRunner()
    made = runner.invoke(app, ["create", "--memory", "10MiB", "--compute", "0.5", "--server", url,
                               "--json"])
    assert made.exit_code == 0, made.output
    vid = json.loads(made.stdout)["id"]
    probe = build().probe
    ran = runner.invoke(app, ["run", "--vdev", vid, "--server", url, "--stand-in", "--json", "--",
                              str(probe), "alloc", str(6 * MIB), "alloc", str(6 * MIB)])
    assert ran.exit_code == 0, ran.output
    summary = json.loads(ran.stdout)  # the probe's own lines went to stderr
    assert summary["returncode"] == 0
    assert summary["oom_rejections"] == 1 and summary["memory_peak"] == 6 * MIB
    assert pool.get(vid).usage["oom_rejections"] == 1  # reported to the control plane
    too_big = runner.invoke(app, ["create", "--memory", "40GiB", "--compute", "0.1",
                                  "--server", url])
    assert too_big.exit_code == 2 and "no device in the pool can hold" in too_big.output
    listed = runner.invoke(app, ["list", "--server", url, "--json"])
    assert [v["id"] for v in json.loads(listed.stdout)] == [vid]
    assert runner.invoke(app, ["release", vid, "--server", url]).exit_code == 0
    failing = runner.invoke(app, ["run", "--vdev", vid, "--server", url, "--", "true"])
    assert failing.exit_code == 2 and "404" in failing.output
