"""The scheduler extender over HTTP (kube-scheduler's extender filter/prioritize JSON)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from schedlab.core.errors import BadInputError
from schedlab.gpooling.devices import GIB, StaticBackend
from schedlab.gpooling.extender import MAX_PRIORITY, create_extender_app, pod_request
from schedlab.gpooling.pool import Pool


def _pod(milli: int | None = None, slots: int | None = None, memory: str | None = None) -> dict:
    notes = {}
    if milli is not None:
        notes["gpooling.io/gpu-milli"] = str(milli)
    if memory is not None:
        notes["gpooling.io/gpu-memory"] = memory
    limits = {"gpooling.io/vgpu": str(slots)} if slots is not None else {}
    return dict(metadata=dict(name="p", annotations=notes),
                spec=dict(containers=[dict(name="c", resources=dict(limits=limits))]))


def test_extender_filter_and_prioritize(tmp_path: Path) -> None:
    pool = Pool(StaticBackend("a=T4:1;b=T4:1;c=V100M32:1").discover(), "frag-aware", tmp_path)
    pool.create_on("a/gpu0", 8 * GIB, 0.5)  # a is half full
    pool.create_on("c/gpu0", 30 * GIB, 1.0)  # c is full
    client = TestClient(create_extender_app(pool, split=10))
    nodes = ["a", "b", "c", "z"]
    result = client.post("/filter", json=dict(Pod=_pod(slots=5), NodeNames=nodes)).json()
    assert result["NodeNames"] == ["a", "b"] and result["Error"] == ""
    assert set(result["FailedNodes"]) == {"c", "z"}
    items = dict(items=[dict(metadata=dict(name=n)) for n in nodes])
    with_items = client.post("/filter", json=dict(Pod=_pod(milli=500), Nodes=items)).json()
    assert [n["metadata"]["name"] for n in with_items["Nodes"]["items"]] == ["a", "b"]
    scores = {s["Host"]: s["Score"] for s in client.post(
        "/prioritize", json=dict(Pod=_pod(milli=500, memory="8GiB"), NodeNames=nodes)).json()}
    # filling the half-full T4 leaves no fragment; splitting the idle one leaves half a GPU
    assert scores["a"] == MAX_PRIORITY and scores["b"] < scores["a"]
    assert scores["c"] == 0 and scores["z"] == 0
    bad = client.post("/filter", json=dict(Pod=_pod(milli=5000), NodeNames=nodes)).json()
    assert "gpooling.io/gpu-milli" in bad["Error"]
    assert client.post("/prioritize", json=dict(Pod=_pod(), NodeNames=nodes)).status_code == 400


def test_pod_request_parsing() -> None:
    assert pod_request(_pod(slots=3)).milli == 300
    assert pod_request(_pod(milli=250, memory="2GiB")).memory == 2 * GIB
    with pytest.raises(BadInputError, match="vgpu"):
        pod_request(_pod(slots="x"))  # type: ignore[arg-type]
    with pytest.raises(BadInputError, match="gpu-memory"):
        pod_request(_pod(milli=100, memory="lots"))
