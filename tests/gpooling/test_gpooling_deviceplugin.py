"""Where users run it: the kubelet device-plugin gRPC API against a fake kubelet speaking the
real v1beta1 protobuf wire format over unix sockets (skipped without grpcio).

The fake kubelet serves ``v1beta1.Registration`` and, once registered, dials the plugin back
exactly as the kubelet does (GetDevicePluginOptions, ListAndWatch, Allocate). The environment and
mounts Allocate returns are then used to run the probe under the shim: the quota is enforced.
"""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path

import pytest

from schedlab.core.errors import BadInputError
from schedlab.gpooling.devices import GIB, StaticBackend
from schedlab.gpooling.native import build, run_probe
from schedlab.gpooling.pool import Pool

grpc = pytest.importorskip("grpc")

from schedlab.gpooling import deviceplugin as dp  # noqa: E402  (needs grpc)


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return build(root=tmp_path_factory.mktemp("gpooling-build"))


class FakeKubelet:
    """v1beta1.Registration on ``<dir>/kubelet.sock``; records what registered."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.requests: list = []
        self.registered = threading.Event()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((dp.service_handler("Registration", self),))
        self.server.add_insecure_port(f"unix://{directory / dp.KUBELET_SOCKET}")
        self.server.start()

    def Register(self, request, context):  # noqa: N802
        self.requests.append(request)
        self.registered.set()
        return dp.messages()["Empty"]()

    def plugin(self):
        """A channel to the registered plugin's endpoint, as the kubelet dials it."""
        endpoint = self.directory / self.requests[-1].endpoint
        return grpc.insecure_channel(f"unix://{endpoint}")

    def stop(self) -> None:
        self.server.stop(0).wait()


@pytest.fixture
def cluster(tmp_path: Path, native):
    sockets = tmp_path / "device-plugins"
    sockets.mkdir()
    pool = Pool(StaticBackend("node-a=T4:2;node-b=V100M32:1").discover(), "frag-aware",
                tmp_path / "regions")
    kubelet = FakeKubelet(sockets)
    plugin = dp.DevicePlugin(pool, native.shim, node="node-a", split=4)
    server = dp.PluginServer(plugin, sockets).start()
    yield kubelet, server, pool
    server.stop()
    kubelet.stop()


def test_register_list_and_allocate_over_the_real_api(cluster, native, tmp_path) -> None:
    kubelet, server, pool = cluster
    server.register()
    assert kubelet.registered.wait(10)
    registered = kubelet.requests[-1]
    assert (registered.version, registered.resource_name, registered.endpoint) == (
        "v1beta1", "gpooling.io/vgpu", "gpooling.sock")
    m = dp.messages()
    with kubelet.plugin() as channel:
        calls = dp.stub(channel, "DevicePlugin")
        options = calls["GetDevicePluginOptions"](m["Empty"](), timeout=10)
        assert options.get_preferred_allocation_available
        stream = calls["ListAndWatch"](m["Empty"](), timeout=10)
        devices = next(stream).devices
        stream.cancel()
        ids = [d.ID for d in devices]
        assert len(ids) == 8 and all(d.health == "Healthy" for d in devices)  # 2 T4 x 4 slots
        preferred = calls["GetPreferredAllocation"](m["PreferredAllocationRequest"](
            container_requests=[m["ContainerPreferredAllocationRequest"](
                available_deviceIDs=ids, allocation_size=2)]), timeout=10)
        chosen = list(preferred.container_responses[0].deviceIDs)
        assert len({c.split("::")[0] for c in chosen}) == 1  # packed onto one GPU
        reply = calls["Allocate"](m["AllocateRequest"](container_requests=[
            m["ContainerAllocateRequest"](devices_ids=chosen)]), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            calls["Allocate"](m["AllocateRequest"](container_requests=[
                m["ContainerAllocateRequest"](devices_ids=[ids[0], ids[-1]])]), timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    response = reply.container_responses[0]
    envs = dict(response.envs)
    vid = envs["GPOOLING_VDEV"]
    assert dict(response.annotations) == {"gpooling.io/vdev": vid}
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{8 * 1024}m"  # half a 16 GiB T4
    assert envs["CUDA_DEVICE_SM_LIMIT"] == "50" and envs["LD_PRELOAD"].endswith("shim.so")
    mounts = {mt.container_path: mt for mt in response.mounts}
    assert mounts[envs["GPOOLING_LIMITS"]].read_only and mounts[envs["LD_PRELOAD"]].read_only
    assert not mounts[envs["GPOOLING_SHM"]].read_only
    vdev = pool.get(vid)
    assert (vdev.memory, vdev.compute, vdev.owner) == (8 * GIB, 0.5, "kubernetes")
    # run "the container": the host paths stand in for the mounts
    env = dict(envs, LD_PRELOAD=mounts[envs["LD_PRELOAD"]].host_path,
               GPOOLING_SHM=mounts[envs["GPOOLING_SHM"]].host_path,
               GPOOLING_LIMITS=mounts[envs["GPOOLING_LIMITS"]].host_path,
               LD_LIBRARY_PATH=str(native.stub_dir), GPOOLING_REAL_LIBCUDA=str(native.stub),
               PATH="/usr/bin:/bin")
    out = run_probe(native, ["alloc", str(6 * GIB), "alloc", str(6 * GIB), "info"], env)
    assert [o["rc"] for o in out[:2]] == [0, 2] and out[2]["total"] == 8 * GIB


def test_reallocated_slots_release_the_previous_virtual_device(cluster) -> None:
    _, server, pool = cluster
    plugin = server.plugin
    slots = [plugin.slot_id(plugin.devices[0].id, k) for k in range(4)]
    first = dict(plugin.allocate(slots).envs)["GPOOLING_VDEV"]
    second = dict(plugin.allocate(slots).envs)["GPOOLING_VDEV"]
    assert first != second and [v.id for v in pool.list()] == [second]
    with pytest.raises(BadInputError, match="unknown device"):
        plugin.allocate(["nope::0"])
    with pytest.raises(BadInputError, match="split"):
        dp.DevicePlugin(pool, "x", split=0)


def test_register_without_kubelet_is_a_clear_error(tmp_path: Path, native) -> None:
    sockets = tmp_path / "dp"
    sockets.mkdir()
    pool = Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path / "r")
    server = dp.PluginServer(dp.DevicePlugin(pool, native.shim), sockets).start()
    try:
        with pytest.raises(BadInputError, match="kubelet refused registration"):
            server.register(timeout=1)
    finally:
        server.stop()
    with pytest.raises(BadInputError, match="no such directory"):
        dp.PluginServer(dp.DevicePlugin(pool, native.shim), tmp_path / "absent")
