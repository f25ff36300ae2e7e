"""The scheduler extender over real HTTP on 127.0.0.1 (uvicorn in a thread, httpx client), with
the JSON kube-scheduler sends: ``ExtenderArgs`` whose ``Pod`` is a full v1 Pod and whose nodes
are a v1 NodeList or, when ``nodeCacheCapable``, a list of names (k8s.io/kube-scheduler
extender/v1: Go structs without JSON tags, so the keys are the Go field names)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from schedlab.core.errors import BadInputError
from schedlab.gpooling.devices import GIB, StaticBackend
from schedlab.gpooling.extender import (
    MAX_PRIORITY,
    Extender,
    create_extender_app,
    pod_request,
    pod_requests,
)
from schedlab.gpooling.pool import Pool

uvicorn = pytest.importorskip("uvicorn", reason="the HTTP tests serve the app with uvicorn")


@pytest.fixture
def serve():
    """Start an ASGI app on 127.0.0.1 (a free port) in a thread; yields a client factory."""
    running = []

    def start(app) -> httpx.Client:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs=dict(sockets=[sock]), daemon=True)
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
        running.append((server, thread, client, sock))
        return client

    yield start
    for server, thread, client, sock in running:
        client.close()
        server.should_exit = True
        thread.join(10)
        sock.close()


def k8s_pod(*containers: dict, annotations: dict | None = None) -> dict:
    """A Pod as kube-scheduler serialises it (the fields it sends that matter here and others)."""
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "3f1c5b7e-0d1a-4b9e-9c55",
                     "labels": {"app": "train"}, "annotations": annotations or {}},
        "spec": {"schedulerName": "default-scheduler", "restartPolicy": "Never",
                 "containers": list(containers)},
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


def container(name: str = "trainer", **extended) -> dict:
    limits = {"cpu": "4", "memory": "16Gi", **extended}
    requests = {"cpu": "2", "memory": "8Gi", **extended}
    return {"name": name, "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
            "resources": {"limits": limits, "requests": requests}}


def vgpu(slots, **more) -> dict:
    return container(**{"gpooling.io/vgpu": slots, **more})


def node_list(*names: str) -> dict:
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "4711"},
            "items": [{"metadata": {"name": n, "labels": {"kubernetes.io/hostname": n}},
                       "status": {"allocatable": {"cpu": "32", "gpooling.io/vgpu": "10"}}}
                      for n in names]}


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    pool = Pool(StaticBackend("a=T4:1;b=T4:1;c=V100M32:1").discover(), "frag-aware", tmp_path)
    pool.create_on("a/gpu0", 8 * GIB, 0.5)  # a is half full
    pool.create_on("c/gpu0", 30 * GIB, 1.0)  # c is full
    return pool


NODES = ["a", "b", "c", "z"]  # z is not in the pool


def test_filter_with_node_names_and_with_a_node_list(serve, pool) -> None:
    client = serve(create_extender_app(pool, split=10))
    reply = client.post("/filter", json={"Pod": k8s_pod(vgpu("5")), "NodeNames": NODES})
    assert reply.status_code == 200
    result = reply.json()
    assert result["NodeNames"] == ["a", "b"] and result["Error"] == "" and result["Nodes"] is None
    assert set(result["FailedNodes"]) == {"c"}  # full now: may free up
    assert set(result["FailedAndUnresolvableNodes"]) == {"z"}  # no gPooling GPU at all
    listed = client.post("/filter", json={"Pod": k8s_pod(vgpu(5)), "Nodes": node_list(*NODES)})
    nodes = listed.json()["Nodes"]
    assert [n["metadata"]["name"] for n in nodes["items"]] == ["a", "b"]
    assert nodes["kind"] == "NodeList" and nodes["metadata"] == {"resourceVersion": "4711"}
    assert listed.json()["NodeNames"] is None
    # 40 GiB of memory can never fit a 16 GiB T4 or a 32 GiB V100: unresolvable, not just full
    big = client.post("/filter", json={"Pod": k8s_pod(vgpu("2", **{
        "gpooling.io/vgpu-memory": str(40 * 1024)})), "NodeNames": NODES}).json()
    assert big["NodeNames"] == [] and set(big["FailedAndUnresolvableNodes"]) == set(NODES)


def test_prioritize_scores_the_least_fragmenting_node_highest(serve, pool) -> None:
    client = serve(create_extender_app(pool, split=10))
    reply = client.post("/prioritize", json={"Pod": k8s_pod(vgpu("5")), "NodeNames": NODES})
    assert reply.status_code == 200
    scores = reply.json()
    assert [s["Host"] for s in scores] == NODES
    assert all(isinstance(s["Score"], int) and 0 <= s["Score"] <= MAX_PRIORITY for s in scores)
    by_host = {s["Host"]: s["Score"] for s in scores}
    # filling the half-full T4 leaves no fragment; splitting the idle one leaves half a GPU
    assert by_host["a"] == MAX_PRIORITY and by_host["b"] < by_host["a"]
    assert by_host["c"] == 0 and by_host["z"] == 0
    annotated = k8s_pod(container(), annotations={"gpooling.io/gpu-milli": "500",
                                                  "gpooling.io/gpu-memory": "8GiB"})
    assert client.post("/prioritize", json={"Pod": annotated, "Nodes": node_list(*NODES)}
                       ).json() == scores


def test_pods_that_ask_for_no_vgpu_pass_untouched(serve, pool) -> None:
    client = serve(create_extender_app(pool))
    plain = k8s_pod(container())
    result = client.post("/filter", json={"Pod": plain, "NodeNames": NODES}).json()
    assert result["NodeNames"] == NODES and not result["FailedNodes"]
    scores = client.post("/prioritize", json={"Pod": plain, "NodeNames": NODES}).json()
    assert {s["Score"] for s in scores} == {0}


def test_every_container_of_a_pod_needs_its_own_slice(serve, tmp_path) -> None:
    pool = Pool(StaticBackend("a=T4:2;b=T4:1;d=T4:2").discover(), "frag-aware", tmp_path)
    pool.create_on("a/gpu0", 8 * GIB, 0.5)
    pool.create_on("a/gpu1", 8 * GIB, 0.5)
    client = serve(create_extender_app(pool))
    pod = k8s_pod(vgpu("5", **{"gpooling.io/vgpu-memory": "4096"}), container("sidecar"),
                  vgpu("6"))
    result = client.post("/filter", json={"Pod": pod, "NodeNames": ["a", "b", "d"]}).json()
    # 5 + 6 slots: on d's two idle T4s; a's two half-used T4s only hold the 5 now; b's one T4
    # can never hold both
    assert result["NodeNames"] == ["d"]
    assert set(result["FailedNodes"]) == {"a"}
    assert set(result["FailedAndUnresolvableNodes"]) == {"b"}


def test_go_field_names_are_matched_case_insensitively(serve, pool) -> None:
    client = serve(create_extender_app(pool))
    result = client.post("/filter", json={"pod": k8s_pod(vgpu("5")), "nodenames": NODES}).json()
    assert result["NodeNames"] == ["a", "b"]


@pytest.mark.parametrize(("body", "field"), [
    (b'{"Pod": {"metadata": ', "ExtenderArgs"),
    (b"[1, 2]", "ExtenderArgs"),
    (b'{"Pod": "train-0", "NodeNames": ["a"]}', "Pod"),
    (b'{"Pod": {}}', "NodeNames"),
    (b'{"Pod": {}, "NodeNames": "a"}', "NodeNames"),
    (b'{"Pod": {"spec": {"containers": [{"resources": {"limits": '
     b'{"gpooling.io/vgpu-cores": "30"}}}]}}, "NodeNames": ["a"]}',
     "Pod.spec.containers[0].resources.limits[gpooling.io/vgpu-cores]"),
    (b'{"Pod": {"spec": {"containers": [{"resources": {"limits": '
     b'{"gpooling.io/vgpu": "1.5"}}}]}}, "NodeNames": ["a"]}',
     "Pod.spec.containers[0].resources.limits[gpooling.io/vgpu]"),
    (b'{"Pod": {"spec": {"containers": [{}, {"resources": {"requests": '
     b'{"gpooling.io/vgpu": 11}}}]}}, "NodeNames": ["a"]}',
     "Pod.spec.containers[1].resources.requests[gpooling.io/vgpu]"),
    (b'{"Pod": {"metadata": {"annotations": {"gpooling.io/gpu-milli": "5000"}}}, '
     b'"NodeNames": ["a"]}', "Pod.metadata.annotations[gpooling.io/gpu-milli]"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items[0].metadata.name"),
])
def test_bad_input_is_a_400_naming_the_field(serve, pool, body, field) -> None:
    client = serve(create_extender_app(pool))
    for verb in ("/filter", "/prioritize"):
        reply = client.post(verb, content=body, headers={"Content-Type": "application/json"})
        assert reply.status_code == 400, (verb, reply.text)
        error = reply.json()["Error"]
        assert f"field '{field}'" in error and "\n" not in error


def test_healthz(serve, pool) -> None:
    assert serve(create_extender_app(pool)).get("/healthz").json()["devices"] == 3


def test_pod_request_parsing() -> None:
    pod = k8s_pod(vgpu("3"))
    assert pod_request(pod).milli == 300 and pod_request(pod).memory == 3 * (16 * GIB // 10)
    annotated = k8s_pod(annotations={"gpooling.io/gpu-milli": "250",
                                     "gpooling.io/gpu-memory": "2GiB"})
    assert pod_request(annotated).memory == 2 * GIB
    only_requests = k8s_pod({"name": "c", "resources": {"requests": {"gpooling.io/vgpu": 2}}})
    assert [s.slots for s in pod_requests(only_requests)] == [2]
    assert pod_requests(k8s_pod(container()), resource="example.com/gpu") == []
    with pytest.raises(BadInputError, match="vgpu"):
        pod_request(k8s_pod(vgpu("x")))
    with pytest.raises(BadInputError, match="gpu-memory"):
        pod_request(k8s_pod(annotations={"gpooling.io/gpu-milli": "100",
                                         "gpooling.io/gpu-memory": "lots"}))
    with pytest.raises(BadInputError, match="needs gpooling.io/vgpu as well"):
        pod_requests(k8s_pod(container(**{"gpooling.io/vgpu-memory": "1024"})))


def test_the_library_calls_raise_instead_of_answering(pool) -> None:
    extender = Extender(pool)
    with pytest.raises(BadInputError, match="Pod"):
        extender.filter({"NodeNames": ["a"]})
