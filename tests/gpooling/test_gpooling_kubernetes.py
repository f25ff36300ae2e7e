"""The Kubernetes device plugin (kubernetes.py) against a fake kubelet speaking the real API.

The fake kubelet serves ``v1beta1.Registration`` on ``kubelet.sock`` in a temporary device-plugin
directory (the v1beta1 protobuf wire format, whose bytes and method paths are pinned against the
upstream numbering below), and once a plugin registers it dials it back as the kubelet does:
GetDevicePluginOptions, then a ListAndWatch stream it keeps reading. Allocate's
environment and mounts are then used to run the probe under the real shim (host paths standing
in for the mounts): the quota the plugin granted is the one enforced.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import pytest

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.gpooling.devices import GIB, StaticBackend
from schedlab.gpooling.native import build, run_probe
from schedlab.gpooling.pool import Pool

grpc = pytest.importorskip("grpc", reason="the device plugin needs grpcio (pip install grpcio)")
pytest.importorskip("google.protobuf", reason="the device plugin needs protobuf")

from schedlab.gpooling import kubernetes as k8s  # noqa: E402

try:
    grpc, pb, api = k8s._api()  # grpc, the v1beta1 messages, deviceplugin_v1beta1
except SchedlabError as exc:
    pytest.skip(f"the device plugin cannot run here: {exc}", allow_module_level=True)

TIMEOUT = 10


@pytest.fixture(scope="module")
def native():
    try:
        return build()
    except SchedlabError as exc:
        pytest.skip(f"cannot build the shim: {exc}")


@pytest.fixture
def short_dir():
    """A device-plugin dir with a short path (unix socket paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class FakeKubelet:
    """``v1beta1.Registration`` on ``<dir>/kubelet.sock``; dials registered plugins back."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.requests: list[pb.RegisterRequest] = []
        self.options: list[pb.DevicePluginOptions] = []
        self.lists: queue.Queue = queue.Queue()
        self.registered = threading.Event()
        self.refuse: str | None = None
        self._streams: list = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((api.handler("Registration", self),))
        assert self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    def Register(self, request, context):  # noqa: N802
        if self.refuse:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, self.refuse)
        self.requests.append(request)
        threading.Thread(target=self._watch, args=(request.endpoint,), daemon=True).start()
        return pb.Empty()

    def _watch(self, endpoint: str) -> None:
        channel = grpc.insecure_channel(f"unix://{self.directory / endpoint}")
        plugin = api.stub(channel, "DevicePlugin")
        self.options.append(plugin.GetDevicePluginOptions(pb.Empty(), timeout=TIMEOUT))
        stream = plugin.ListAndWatch(pb.Empty())
        self._streams.append((channel, stream))
        self.registered.set()
        try:
            for response in stream:
                self.lists.put({d.ID: d.health for d in response.devices})
        except grpc.RpcError:
            pass

    def next_list(self) -> dict[str, str]:
        return self.lists.get(timeout=TIMEOUT)

    def plugin(self, endpoint: str | None = None):
        """A DevicePlugin stub on the (last) registered endpoint."""
        endpoint = endpoint or self.requests[-1].endpoint
        channel = grpc.insecure_channel(f"unix://{self.directory / endpoint}")
        self._streams.append((channel, None))
        return api.stub(channel, "DevicePlugin")

    def stop(self) -> None:
        for channel, stream in self._streams:
            if stream is not None:
                stream.cancel()
            channel.close()
        self.server.stop(0).wait()


@pytest.fixture
def cluster(short_dir: Path, native, tmp_path: Path):
    """A pool of node-a (2 T4) and node-b; node-a's plugin registered with a fake kubelet."""
    pool = Pool(StaticBackend("node-a=T4:2;node-b=V100M32:1").discover(), "frag-aware",
                tmp_path / "regions")
    kubelet = FakeKubelet(short_dir)
    config = k8s.PluginConfig(node="node-a", split=4, poll_s=0.05,
                              container_root="/usr/local/gpooling")
    plugin = k8s.DevicePlugin(pool, config, shim=native.shim, health=lambda d: True)
    server = k8s.PluginServer(plugin, short_dir).start()
    server.register()
    assert kubelet.registered.wait(TIMEOUT)
    yield kubelet, server, pool
    server.stop(0)
    kubelet.stop()


def _allocate(stub, *containers: list[str]):
    return stub.Allocate(pb.AllocateRequest(container_requests=[
        pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]), timeout=TIMEOUT)


def _host_env(response, native) -> dict[str, str]:
    """The container's environment with every mounted path replaced by its host path."""
    mounts = {m.container_path: m.host_path for m in response.mounts}
    env = {k: mounts.get(v, v) for k, v in response.envs.items()}
    return dict(env, LD_LIBRARY_PATH=str(native.stub_dir), GPOOLING_REAL_LIBCUDA=str(native.stub),
                PATH="/usr/bin:/bin")


def test_registers_with_the_resource_name_endpoint_and_version(cluster) -> None:
    kubelet, server, _ = cluster
    (request,) = kubelet.requests
    assert (request.version, request.resource_name, request.endpoint) == (
        "v1beta1", "gpooling.io/vgpu", "gpooling-vgpu.sock")
    assert request.options.get_preferred_allocation_available
    assert not request.options.pre_start_required
    assert kubelet.options[0].get_preferred_allocation_available
    assert server.path == kubelet.directory / "gpooling-vgpu.sock" and server.path.is_socket()
    devices = kubelet.next_list()  # the first list arrives as soon as the stream opens
    assert sorted(devices) == [f"node-a_gpu{g}::{k}" for g in range(2) for k in range(4)]
    assert set(devices.values()) == {"Healthy"}


def test_list_and_watch_resends_when_health_or_the_pool_changes(cluster) -> None:
    kubelet, server, pool = cluster
    kubelet.next_list()
    server.plugin.set_health("node-a/gpu1", False)  # e.g. an Xid error on the card
    devices = kubelet.next_list()
    assert {s for s, h in devices.items() if h == "Unhealthy"} == {
        f"node-a_gpu1::{k}" for k in range(4)}
    server.plugin.set_health("node-a/gpu1", True)
    assert set(kubelet.next_list().values()) == {"Healthy"}
    # half of gpu0 taken through the control plane (not the kubelet): 2 slots can no longer be
    # backed, and the poller tells the kubelet without being asked
    vdev = pool.create_on("node-a/gpu0", 8 * GIB, 0.5, owner="someone")
    devices = kubelet.next_list()
    assert sum(h == "Unhealthy" for s, h in devices.items() if s.startswith("node-a_gpu0")) == 2
    pool.release(vdev.id)
    assert set(kubelet.next_list().values()) == {"Healthy"}


def test_allocate_injects_the_shim_and_the_quota_is_enforced(cluster, native) -> None:
    kubelet, server, pool = cluster
    stub = kubelet.plugin()
    slots = ["node-a_gpu0::0", "node-a_gpu0::1"]
    (response,) = _allocate(stub, slots).container_responses
    envs = dict(response.envs)
    vid = envs["GPOOLING_VDEV"]
    assert dict(response.annotations) == {"gpooling.io/vdev": vid}
    assert envs["LD_PRELOAD"] == "/usr/local/gpooling/libgpooling_shim.so"
    assert envs["GPOOLING_SHM"] == f"/usr/local/gpooling/{vid}.shm"
    assert envs["GPOOLING_LIMITS"] == f"/usr/local/gpooling/{vid}.limits"
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{8 * 1024}m"  # half of a 16 GiB T4
    assert envs["CUDA_DEVICE_SM_LIMIT"] == "50" and envs["NVIDIA_VISIBLE_DEVICES"] == "0"
    mounts = {m.container_path: m for m in response.mounts}
    assert mounts[envs["LD_PRELOAD"]].read_only and mounts[envs["GPOOLING_LIMITS"]].read_only
    assert mounts[envs["LD_PRELOAD"]].host_path == str(native.shim)
    assert not mounts[envs["GPOOLING_SHM"]].read_only
    vdev = pool.get(vid)
    assert (vdev.device, vdev.memory, vdev.compute, vdev.owner) == (
        "node-a/gpu0", 8 * GIB, 0.5, "kubernetes")
    assert server.plugin.bound() == dict.fromkeys(slots, vid)
    # the kubelet's view follows: the two slots are bound, the other six still backable
    assert set(kubelet.next_list().values()) == {"Healthy"}

    # the same slots again while the first container has not started: refused, no over-commit
    with pytest.raises(grpc.RpcError) as twice:
        _allocate(stub, ["node-a_gpu0::1"])
    assert twice.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert vid in twice.value.details() and "twice" in twice.value.details()

    # "the container" runs under the shim with the plugin's env: the 8 GiB quota holds
    out = run_probe(native, ["alloc", str(6 * GIB), "alloc", str(6 * GIB), "info"],
                    _host_env(response, native))
    assert [o["rc"] for o in out[:2]] == [0, 2] and out[2]["total"] == 8 * GIB

    # its process attached and exited: the holder is provably gone, so the slots are re-granted
    (again,) = _allocate(stub, ["node-a_gpu0::1", "node-a_gpu0::2"]).container_responses
    new = dict(again.envs)["GPOOLING_VDEV"]
    assert new != vid and [v.id for v in pool.list()] == [new]
    assert server.plugin.bound() == dict.fromkeys(["node-a_gpu0::1", "node-a_gpu0::2"], new)


def test_a_bound_slot_never_used_is_reclaimed_only_after_the_timeout(tmp_path, native) -> None:
    pool = Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path / "r")
    now = [0.0]
    plugin = k8s.DevicePlugin(pool, k8s.PluginConfig(split=2, reclaim_after_s=60),
                              shim=native.shim, health=lambda d: True, clock=lambda: now[0])
    first = plugin.allocate(["node0_gpu0::0"])
    now[0] = 59
    with pytest.raises(k8s.SlotInUseError, match="not started yet"):
        plugin.allocate(["node0_gpu0::0"])
    now[0] = 61
    second = plugin.allocate(["node0_gpu0::0"])
    assert [v.id for v in pool.list()] == [second.id] and second.id != first.id


def test_unknown_and_malformed_requests_are_invalid_argument(cluster) -> None:
    kubelet, server, pool = cluster
    stub = kubelet.plugin()
    cases = {
        "unknown device id 'node-b_gpu0::0'": [["node-b_gpu0::0"]],  # another node's slot
        "span 2 GPUs": [["node-a_gpu0::0", "node-a_gpu1::0"]],
        "repeated": [["node-a_gpu0::0", "node-a_gpu0::0"]],
        "no device ids": [[]],
        "no container requests": [],
    }
    for message, containers in cases.items():
        with pytest.raises(grpc.RpcError) as refused:
            _allocate(stub, *containers)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, message
        assert message in refused.value.details()
    # a pod whose second container fails gets nothing: the first container's grant is undone
    with pytest.raises(grpc.RpcError):
        _allocate(stub, ["node-a_gpu0::0"], ["bogus"])
    assert pool.list() == [] and server.plugin.bound() == {}
    with pytest.raises(grpc.RpcError) as bad:
        stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=["x"],
                                                   allocation_size=1)]), timeout=TIMEOUT)
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_gpu_taken_by_the_control_plane_is_resource_exhausted(cluster) -> None:
    kubelet, _, pool = cluster
    pool.create_on("node-a/gpu1", 16 * GIB, 1.0)
    with pytest.raises(grpc.RpcError) as full:
        _allocate(kubelet.plugin(), ["node-a_gpu1::0"])
    assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_preferred_allocation_packs_onto_the_gpu_that_fragments_least(cluster) -> None:
    kubelet, server, _ = cluster
    stub = kubelet.plugin()
    _allocate(stub, ["node-a_gpu1::0", "node-a_gpu1::1"])  # gpu1 half used
    available = [s for s, b in sorted(kubelet.next_list().items())
                 if s not in server.plugin.bound()]

    def prefer(size, must=()):
        reply = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available,
                                                   must_include_deviceIDs=list(must),
                                                   allocation_size=size)]), timeout=TIMEOUT)
        return list(reply.container_responses[0].deviceIDs)

    # two slots fill the half-used gpu1 and keep gpu0 whole for a whole-GPU pod
    assert prefer(2) == ["node-a_gpu1::2", "node-a_gpu1::3"]
    assert prefer(3) == ["node-a_gpu0::0", "node-a_gpu0::1", "node-a_gpu0::2"]  # only gpu0 fits
    assert prefer(2, must=["node-a_gpu0::3"]) == ["node-a_gpu0::3", "node-a_gpu0::0"]


def test_the_plugin_re_registers_after_a_kubelet_restart(short_dir, native, tmp_path) -> None:
    pool = Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path / "r")
    plugin = k8s.DevicePlugin(pool, k8s.PluginConfig(split=2, poll_s=0.05), shim=native.shim,
                              health=lambda d: True)
    server = k8s.PluginServer(plugin, short_dir).start()
    kubelet = FakeKubelet(short_dir)
    stop = threading.Event()
    serving = threading.Thread(target=server.serve_forever, args=(stop, 0.05), daemon=True)
    serving.start()
    try:
        assert kubelet.registered.wait(TIMEOUT)
        kubelet.stop()  # the kubelet restarts: it removes every socket in the directory
        for sock in list(short_dir.glob("*.sock")):
            sock.unlink()
        kubelet = FakeKubelet(short_dir)
        assert kubelet.registered.wait(TIMEOUT)
        assert kubelet.requests[-1].endpoint == "gpooling-vgpu.sock"
        assert sorted(kubelet.next_list()) == ["node0_gpu0::0", "node0_gpu0::1"]
        assert server.registrations == 2
    finally:
        stop.set()
        serving.join(TIMEOUT)
        server.stop(0)
        kubelet.stop()


def test_bad_socket_dir_config_and_kubelet_are_one_line_errors(tmp_path, short_dir,
                                                               native) -> None:
    pool = Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path / "r")
    plugin = k8s.DevicePlugin(pool, shim=native.shim, health=lambda d: True)
    with pytest.raises(BadInputError, match="no such directory"):
        k8s.PluginServer(plugin, tmp_path / "absent")
    (tmp_path / "file").write_text("")
    with pytest.raises(BadInputError, match="not a directory"):
        k8s.PluginServer(plugin, tmp_path / "file")
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    with pytest.raises(BadInputError, match="unix sockets allow 107"):
        k8s.PluginServer(plugin, deep)
    server = k8s.PluginServer(plugin, short_dir).start()
    try:
        with pytest.raises(SchedlabError, match="no kubelet socket") as absent:
            server.register(timeout=1)
        assert "\n" not in str(absent.value)
        kubelet = FakeKubelet(short_dir)
        kubelet.refuse = "resource name gpooling.io/vgpu is already registered"
        try:
            with pytest.raises(SchedlabError, match="refused registration.*already registered"):
                server.register(timeout=TIMEOUT)
        finally:
            kubelet.stop()
    finally:
        server.stop(0)
    with pytest.raises(BadInputError, match="no devices on node 'nope'"):
        k8s.DevicePlugin(pool, k8s.PluginConfig(node="nope"), shim=native.shim)


def test_unknown_node_error_stays_short(tmp_path: Path, native) -> None:
    # a 1,213-node Alibaba node list must not print every name in a one-line error
    many = ";".join(f"n{i:04d}=T4:1" for i in range(40))
    pool = Pool(StaticBackend(many).discover(), "frag-aware", tmp_path / "r")
    with pytest.raises(BadInputError, match=r"n0007, \.\.\. \(40 in all\)") as bad:
        k8s.DevicePlugin(pool, k8s.PluginConfig(node="nope"), shim=native.shim)
    assert "n0008" not in str(bad.value)


@pytest.mark.parametrize(("text", "suffix", "message"), [
    ("split = 0\n", ".toml", "field 'split': must be an integer in 1..100"),
    ("resource = 'vgpu'\n", ".toml", "field 'resource': must be a domain-qualified"),
    ("resource = 'kubernetes.io/vgpu'\n", ".toml", "reserved by Kubernetes"),
    ("splt = 4\n", ".toml", "field 'splt': unknown setting"),
    ("split = \n", ".toml", "not TOML"),
    ('{"split": 4,\n "node": }', ".json", ":2: not JSON"),
    ("[1, 2]", ".json", "must be a table/object"),
])
def test_config_errors_name_the_file_and_field(tmp_path, text, suffix, message) -> None:
    path = tmp_path / f"plugin{suffix}"
    path.write_text(text)
    with pytest.raises(BadInputError) as bad:
        k8s.load_config(path)
    assert message in str(bad.value) and str(path) in str(bad.value)


def test_config_file_round_trip(tmp_path) -> None:
    path = tmp_path / "plugin.toml"
    path.write_text('resource = "example.com/vgpu"\nsplit = 4\nnode = "node-a"\n'
                    'reclaim-after-s = 30\n')
    config = k8s.load_config(path)
    assert (config.resource, config.split, config.node, config.reclaim_after_s) == (
        "example.com/vgpu", 4, "node-a", 30)
    with pytest.raises(BadInputError, match="cannot read"):
        k8s.load_config(tmp_path / "absent.toml")


# --- the CLI (schedlab gpooling device-plugin / extender) ----------------------------------------
CLI = ["-c", "from schedlab.gpooling.cli import app; app()"]


def _cli(*args: str, **kwargs):
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, *CLI, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_cli_device_plugin_registers_serves_and_stops_on_sigterm(short_dir, tmp_path,
                                                                 native) -> None:
    import signal

    config = tmp_path / "plugin.toml"
    config.write_text('inventory = "node-a=T4:1"\nsplit = 2\nresource = "example.com/vgpu"\n'
                      f'runtime_dir = "{tmp_path / "regions"}"\nshim = "{native.shim}"\n')
    kubelet = FakeKubelet(short_dir)
    process = _cli("device-plugin", "--socket-dir", str(short_dir), "--config", str(config),
                   "--node", "node-a")
    try:
        assert kubelet.registered.wait(60), process.stderr.read() if process.poll() else ""
        assert kubelet.requests[0].resource_name == "example.com/vgpu"
        assert sorted(kubelet.next_list()) == ["node-a_gpu0::0", "node-a_gpu0::1"]
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0, err
        assert "registered" in err and not (short_dir / "gpooling-vgpu.sock").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        kubelet.stop()


@pytest.mark.parametrize(("args", "message"), [
    (["--socket-dir", "/nonexistent/device-plugins"], "field 'socket-dir': no such directory"),
    (["--split", "0"], "field 'split': must be an integer in 1..100"),
    (["--resource", "vgpu"], "field 'resource'"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message, short_dir) -> None:
    from typer.testing import CliRunner

    from schedlab.gpooling.cli import app

    base = ["device-plugin", "--socket-dir", str(short_dir), "--inventory", "T4:1"]
    result = CliRunner().invoke(app, base + args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("error:")


def test_cli_bad_config_names_the_file(tmp_path, short_dir) -> None:
    from typer.testing import CliRunner

    from schedlab.gpooling.cli import app

    config = tmp_path / "plugin.json"
    config.write_text('{"split": 4, "colour": "blue"}')
    result = CliRunner().invoke(app, ["device-plugin", "--socket-dir", str(short_dir),
                                      "--config", str(config)])
    assert result.exit_code == 2 and f"{config}: field 'colour': unknown setting" in result.output


def test_cli_help_imports_neither_grpc_nor_numpy() -> None:
    import subprocess
    import sys

    code = ("import sys; from typer.testing import CliRunner; "
            "from schedlab.gpooling.cli import app; "
            "r = CliRunner().invoke(app, ['device-plugin', '--help']); assert r.exit_code == 0; "
            "assert '--socket-dir' in r.output; "
            "print(sorted(m for m in ('grpc', 'numpy', 'uvicorn') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_cli_extender_serves_http_and_refuses_a_taken_port(tmp_path) -> None:
    import socket

    import httpx

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    busy = _cli("extender", "--port", str(port), "--inventory", "a=T4:1")
    _, err = busy.communicate(timeout=60)
    assert busy.returncode == 2 and "field 'port': cannot listen on 127.0.0.1" in err
    taken.close()
    process = _cli("extender", "--port", str(port), "--inventory", "a=T4:1;b=T4:1")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                reply = httpx.post(f"http://127.0.0.1:{port}/filter", timeout=5, json={
                    "Pod": {"spec": {"containers": [{"name": "c", "resources": {
                        "limits": {"gpooling.io/vgpu": "4"}}}]}}, "NodeNames": ["a", "b", "x"]})
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        assert reply.status_code == 200 and reply.json()["NodeNames"] == ["a", "b"]
    finally:
        process.terminate()
        process.communicate(timeout=30)


def test_wire_format_matches_the_upstream_field_numbers() -> None:
    """Bytes written by hand from k8s.io/kubelet's api.proto numbering (not by our stubs)."""
    register = pb.RegisterRequest(version="v1beta1", endpoint="g.sock", resource_name="a.io/v",
                                  options=pb.DevicePluginOptions(
                                      get_preferred_allocation_available=True))
    assert register.SerializeToString() == (
        b"\x0a\x07v1beta1" b"\x12\x06g.sock" b"\x1a\x06a.io/v" b"\x22\x02\x10\x01")
    device = pb.Device(ID="x::0", health="Healthy",
                       topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=1)]))
    assert device.SerializeToString() == (
        b"\x0a\x04x::0" b"\x12\x07Healthy" b"\x1a\x04\x0a\x02\x08\x01")
    prefer = pb.ContainerPreferredAllocationRequest(
        available_deviceIDs=["a"], must_include_deviceIDs=["b"], allocation_size=2)
    assert prefer.SerializeToString() == b"\x0a\x01a\x12\x01b\x18\x02"
    response = pb.ContainerAllocateResponse(
        envs={"K": "V"}, mounts=[pb.Mount(container_path="/c", host_path="/h", read_only=True)],
        devices=[pb.DeviceSpec(container_path="/d", host_path="/d", permissions="rw")],
        annotations={"A": "B"}, cdi_devices=[pb.CDIDevice(name="v.com/g=0")])
    assert response.SerializeToString() == (
        b"\x0a\x06\x0a\x01K\x12\x01V" b"\x12\x0a\x0a\x02/c\x12\x02/h\x18\x01"
        b"\x1a\x0c\x0a\x02/d\x12\x02/d\x1a\x02rw" b"\x22\x06\x0a\x01A\x12\x01B"
        b"\x2a\x0b\x0a\x09v.com/g=0")
    assert pb.PreStartContainerRequest(devices_ids=["q"]).SerializeToString() == b"\x0a\x01q"

    class Recorder:  # a channel that records the method paths and kinds the stubs use
        def __init__(self) -> None:
            self.calls: dict[str, str] = {}

        def __getattr__(self, kind):
            def make(path, **_):
                self.calls[path] = kind
            return make

    channel = Recorder()
    api.stub(channel, "Registration")
    api.stub(channel, "DevicePlugin")
    assert channel.calls == {
        "/v1beta1.Registration/Register": "unary_unary",
        "/v1beta1.DevicePlugin/GetDevicePluginOptions": "unary_unary",
        "/v1beta1.DevicePlugin/ListAndWatch": "unary_stream",
        "/v1beta1.DevicePlugin/GetPreferredAllocation": "unary_unary",
        "/v1beta1.DevicePlugin/Allocate": "unary_unary",
        "/v1beta1.DevicePlugin/PreStartContainer": "unary_unary",
    }


def test_the_in_code_schema_is_the_api_proto() -> None:
    """deviceplugin_v1beta1 builds its messages from SCHEMA/SERVICES; they must say what the
    api.proto beside them says (messages, fields, numbers, types, streaming) and nothing else."""
    import re

    text = (Path(api.__file__).parent / "api.proto").read_text()
    text = re.sub(r"//[^\n]*", "", text)
    assert re.search(r"^package v1beta1;", text, re.M) and api.API_VERSION == "v1beta1"
    proto_messages = {}
    for name, body in re.findall(r"message (\w+) \{(.*?)\}", text, re.S):
        proto_messages[name] = [
            (field, int(number), kind, bool(repeated))
            for repeated, kind, field, number in re.findall(
                r"(repeated )?(map<string, string>|\w+) (\w+) = (\d+);", body)]
    assert proto_messages == api.SCHEMA
    proto_services = {
        service: [(m, req, resp, bool(stream)) for m, req, stream, resp in re.findall(
            r"rpc (\w+)\((\w+)\) returns \((stream )?(\w+)\)", body)]
        for service, body in re.findall(r"service (\w+) \{(.*?)\n\}", text, re.S)}
    assert proto_services == api.SERVICES
    # what the descriptors built from SCHEMA say, field by field
    for name, message_fields in api.SCHEMA.items():
        descriptor = getattr(pb, name).DESCRIPTOR
        assert [(f.name, f.number) for f in descriptor.fields] == [
            (field, number) for field, number, _, _ in message_fields]


def test_a_dead_kubelet_socket_and_a_bad_split_are_one_line_errors(tmp_path, short_dir,
                                                                   native) -> None:
    import socket

    pool = Pool(StaticBackend("T4:1").discover(), "frag-aware", tmp_path / "r")
    with pytest.raises(BadInputError, match="field 'split'"):
        k8s.DevicePlugin(pool, k8s.PluginConfig(split=0), shim=native.shim)
    plugin = k8s.DevicePlugin(pool, shim=native.shim, health=lambda d: True)
    server = k8s.PluginServer(plugin, short_dir).start()
    stale = socket.socket(socket.AF_UNIX)  # the socket file a crashed kubelet leaves behind
    stale.bind(str(short_dir / "kubelet.sock"))
    stale.close()
    try:
        with pytest.raises(SchedlabError, match="nothing answers on the kubelet socket") as dead:
            server.register(timeout=1)
        assert "\n" not in str(dead.value)
    finally:
        server.stop(0)
