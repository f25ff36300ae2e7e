"""Speed of gPooling on Kubernetes: the device plugin's Allocate and the scheduler extender's
filter/prioritize (kubernetes.py, extender.py). No timed assertions; figures in the JSON.

The extender runs on the Alibaba GPU 2023 node list (1,213 nodes, 6,212 GPUs) where
``../shared/data`` has it, else on a seeded list of the same size and model mix; either way the
cluster is about half booked first, so that filter and prioritize see partly used GPUs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from schedlab.core.data import data_dir
from schedlab.gpooling import deviceplugin_v1beta1 as v1beta1
from schedlab.gpooling.devices import StaticBackend, read_node_list
from schedlab.gpooling.pool import Pool
from schedlab.gpooling.state import Grant, Request

NODE_LIST = (data_dir() / "alibaba"
             / "gpu2023_node_list_gpu_node.csv")


def _node_list():
    if NODE_LIST.exists():
        return read_node_list(NODE_LIST), "real"
    rng = np.random.default_rng(0)  # the real list's shape: mostly 8-GPU nodes, a few models
    models = rng.choice(["T4", "V100M16", "V100M32", "P100", "A10", "G2"], size=1213,
                        p=[0.45, 0.15, 0.1, 0.1, 0.1, 0.1])
    counts = rng.choice([1, 2, 4, 8], size=1213, p=[0.1, 0.15, 0.15, 0.6])
    return StaticBackend(";".join(f"node-{i:04d}={m}:{c}" for i, (m, c) in
                                  enumerate(zip(models, counts, strict=True)))).discover(), \
        "seeded"


def _half_booked(pool: Pool, seed: int = 0) -> None:
    """About half the compute taken, in slices of 1..10 tenths of a GPU, on the pool's books."""
    rng = np.random.default_rng(seed)
    state = pool.state
    with pool._lock:
        for d in range(len(state.devices)):
            tenths = int(rng.integers(0, 11))
            if tenths:
                memory = int(state.total_memory[d]) * tenths // 10
                request = Request(memory, tenths * 100)
                state.take(request, [Grant(d, memory, tenths * 100)])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    devices, source = _node_list()
    pool = Pool(devices, "frag-aware", tmp_path_factory.mktemp("regions"))
    _half_booked(pool)
    return pool, sorted({d.node for d in devices}), source


def _pod(*slots: int) -> dict:
    return {"metadata": {"name": "train", "namespace": "default"}, "spec": {"containers": [
        {"name": f"c{i}", "resources": {"limits": {"gpooling.io/vgpu": str(s)}}}
        for i, s in enumerate(slots)]}}


@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_extender_on_the_alibaba_node_list(benchmark, cluster, verb: str) -> None:
    """One kube-scheduler call with every node a candidate (nodeCacheCapable: NodeNames)."""
    from schedlab.gpooling.extender import Extender

    pool, nodes, source = cluster
    extender = Extender(pool, split=10)
    args = {"Pod": _pod(3, 5), "NodeNames": nodes}
    result = benchmark(getattr(extender, verb), args)
    benchmark.extra_info.update(source=source, nodes=len(nodes), gpus=len(pool.state.devices))
    assert result  # an answer for the candidate nodes, not a speed


def _plugin(tmp_path: Path):
    """One node of 8 A100s, split 10; the shim path only goes into the mounts."""
    from schedlab.gpooling.kubernetes import DevicePlugin, PluginConfig

    pool = Pool(StaticBackend("node-a=A100:8").discover(), "frag-aware", tmp_path / "regions")
    return DevicePlugin(pool, PluginConfig(split=10), shim=tmp_path / "libgpooling_shim.so",
                        health=lambda d: True)


def _allocate_request(gpu: int, slots: int):
    pb = v1beta1.messages()
    return pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(
        devices_ids=[f"node-a_gpu{gpu}::{k}" for k in range(slots)])])


def _release_all(plugin) -> None:
    for vid in set(plugin.bound().values()):
        plugin._unbind(vid)


def test_allocate_one_container_of_4_slots(benchmark, tmp_path) -> None:
    """The plugin's Allocate (virtual device, region, response) without the gRPC transport;
    the previous grant is released between rounds, outside the timing."""
    pytest.importorskip("google.protobuf")
    plugin = _plugin(tmp_path)
    reply = benchmark.pedantic(plugin.Allocate, args=(_allocate_request(3, 4), None),
                               setup=lambda: _release_all(plugin), rounds=200)
    assert len(reply.container_responses) == 1


def test_allocate_over_the_unix_socket(benchmark, tmp_path) -> None:
    """The same Allocate as the kubelet calls it: a gRPC round trip on the plugin's socket."""
    import shutil
    import tempfile

    grpc = pytest.importorskip("grpc")
    from schedlab.gpooling.kubernetes import PluginServer

    plugin = _plugin(tmp_path)
    short = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))  # unix socket paths are short
    server = PluginServer(plugin, short).start()
    try:
        with grpc.insecure_channel(f"unix://{server.path}") as channel:
            allocate = v1beta1.stub(channel, "DevicePlugin").Allocate
            reply = benchmark.pedantic(allocate, args=(_allocate_request(5, 4),),
                                       kwargs={"timeout": 10},
                                       setup=lambda: _release_all(plugin), rounds=200)
        assert len(reply.container_responses) == 1
    finally:
        server.stop(0)
        shutil.rmtree(short, ignore_errors=True)

