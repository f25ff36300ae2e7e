"""A Kubernetes device plugin for gPooling's virtual devices (kubelet device-plugin API v1beta1).

gPooling (../shared/papers/14-gpooling.md) is used where jobs are scheduled; on Kubernetes that
is through the kubelet's device-plugin gRPC API, the way HAMi and NVIDIA's plugin do it:

- the plugin serves ``v1beta1.DevicePlugin`` on a unix socket in the kubelet's plugin directory
  and calls ``v1beta1.Registration/Register`` on the kubelet's socket;
- ``ListAndWatch`` advertises each physical GPU as ``split`` slots (``<device>::<k>``, resource
  ``gpooling.io/vgpu``), so a pod asking for ``gpooling.io/vgpu: 3`` of ``split: 10`` gets 30 % of
  one GPU's memory and compute;
- ``Allocate`` turns the slots the kubelet picked into a virtual device of the :class:`Pool` on
  that GPU and returns what the container needs, HAMi-style: ``LD_PRELOAD`` of the shim,
  ``GPOOLING_SHM``/``GPOOLING_LIMITS``, ``CUDA_VISIBLE_DEVICES``, HAMi's informational
  ``CUDA_DEVICE_MEMORY_LIMIT_0``/``CUDA_DEVICE_SM_LIMIT``, and mounts: the shim and the limits
  file **read-only** (a bind mount a container cannot write, root or not), the usage region
  read-write; device nodes ``/dev/nvidia*`` where they exist.

The messages are built from the upstream ``api.proto`` field numbers at import (no generated
code, no protoc): only ``grpcio`` and ``protobuf`` are needed. Slots are given back when the
kubelet allocates them again (the API has no deallocate; the previous pod is gone by then).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schedlab.core.errors import BadInputError, MissingDependencyError
from schedlab.gpooling.pool import Pool

API_VERSION = "v1beta1"
RESOURCE = "gpooling.io/vgpu"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_DIR = "/var/lib/kubelet/device-plugins"

_S, _B, _I32, _I64, _MSG = "string", "bool", "int32", "int64", "message"
#: v1beta1 api.proto: message -> [(field, number, type, repeated, message type)]
_SCHEMA: dict[str, list[tuple]] = {
    "Empty": [],
    "DevicePluginOptions": [("pre_start_required", 1, _B, False, None),
                            ("get_preferred_allocation_available", 2, _B, False, None)],
    "RegisterRequest": [("version", 1, _S, False, None), ("endpoint", 2, _S, False, None),
                        ("resource_name", 3, _S, False, None),
                        ("options", 4, _MSG, False, "DevicePluginOptions")],
    "NUMANode": [("ID", 1, _I64, False, None)],
    "TopologyInfo": [("nodes", 1, _MSG, True, "NUMANode")],
    "Device": [("ID", 1, _S, False, None), ("health", 2, _S, False, None),
               ("topology", 3, _MSG, False, "TopologyInfo")],
    "ListAndWatchResponse": [("devices", 1, _MSG, True, "Device")],
    "PreStartContainerRequest": [("devices_ids", 1, _S, True, None)],
    "PreStartContainerResponse": [],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, _S, True, None),
                                            ("must_include_deviceIDs", 2, _S, True, None),
                                            ("allocation_size", 3, _I32, False, None)],
    "PreferredAllocationRequest": [("container_requests", 1, _MSG, True,
                                    "ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, _S, True, None)],
    "PreferredAllocationResponse": [("container_responses", 1, _MSG, True,
                                     "ContainerPreferredAllocationResponse")],
    "ContainerAllocateRequest": [("devices_ids", 1, _S, True, None)],
    "AllocateRequest": [("container_requests", 1, _MSG, True, "ContainerAllocateRequest")],
    "Mount": [("container_path", 1, _S, False, None), ("host_path", 2, _S, False, None),
              ("read_only", 3, _B, False, None)],
    "DeviceSpec": [("container_path", 1, _S, False, None), ("host_path", 2, _S, False, None),
                   ("permissions", 3, _S, False, None)],
    "CDIDevice": [("name", 1, _S, False, None)],
    "ContainerAllocateResponse": [("envs", 1, "map", True, None),
                                  ("mounts", 2, _MSG, True, "Mount"),
                                  ("devices", 3, _MSG, True, "DeviceSpec"),
                                  ("annotations", 4, "map", True, None),
                                  ("cdi_devices", 5, _MSG, True, "CDIDevice")],
    "AllocateResponse": [("container_responses", 1, _MSG, True, "ContainerAllocateResponse")],
}


def _build_messages() -> dict[str, type]:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    kinds = {_S: f.TYPE_STRING, _B: f.TYPE_BOOL, _I32: f.TYPE_INT32, _I64: f.TYPE_INT64}
    proto = descriptor_pb2.FileDescriptorProto(name="gpooling/deviceplugin_v1beta1.proto",
                                               package=API_VERSION, syntax="proto3")
    for name, fields in _SCHEMA.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, repeated, type_name in fields:
            field = message.field.add(name=field_name, number=number,
                                      label=f.LABEL_REPEATED if repeated else f.LABEL_OPTIONAL)
            if kind == "map":  # map<string, string>
                entry = message.nested_type.add(name=f"{field_name.title()}Entry")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
                entry.field.add(name="value", number=2, type=f.TYPE_STRING,
                                label=f.LABEL_OPTIONAL)
                field.type = f.TYPE_MESSAGE
                field.type_name = f".{API_VERSION}.{name}.{entry.name}"
            elif kind == _MSG:
                field.type = f.TYPE_MESSAGE
                field.type_name = f".{API_VERSION}.{type_name}"
            else:
                field.type = kinds[kind]
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"{API_VERSION}.{name}")) for name in _SCHEMA}


_MESSAGES: dict[str, type] | None = None


def messages() -> dict[str, type]:
    """The v1beta1 message classes, by name."""
    global _MESSAGES
    if _MESSAGES is None:
        _MESSAGES = _build_messages()
    return _MESSAGES


def _grpc():
    try:
        import grpc
    except ImportError as exc:
        raise MissingDependencyError("the device plugin needs grpcio",
                                     hint="pip install grpcio") from exc
    return grpc


#: (service, method, request, response, server-streaming)
METHODS = [
    ("Registration", "Register", "RegisterRequest", "Empty", False),
    ("DevicePlugin", "GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
    ("DevicePlugin", "ListAndWatch", "Empty", "ListAndWatchResponse", True),
    ("DevicePlugin", "GetPreferredAllocation", "PreferredAllocationRequest",
     "PreferredAllocationResponse", False),
    ("DevicePlugin", "Allocate", "AllocateRequest", "AllocateResponse", False),
    ("DevicePlugin", "PreStartContainer", "PreStartContainerRequest",
     "PreStartContainerResponse", False),
]


def service_handler(service: str, implementation: Any):
    """A generic gRPC handler for ``v1beta1.<service>`` whose methods are ``implementation``'s."""
    grpc = _grpc()
    m = messages()
    handlers = {}
    for svc, method, request, response, streaming in METHODS:
        if svc != service:
            continue
        function = getattr(implementation, method)
        make = grpc.unary_stream_rpc_method_handler if streaming \
            else grpc.unary_unary_rpc_method_handler
        handlers[method] = make(function, request_deserializer=m[request].FromString,
                                response_serializer=m[response].SerializeToString)
    return grpc.method_handlers_generic_handler(f"{API_VERSION}.{service}", handlers)


def stub(channel: Any, service: str) -> dict[str, Any]:
    """Client callables for ``v1beta1.<service>`` on ``channel``, by method name."""
    m = messages()
    calls = {}
    for svc, method, request, response, streaming in METHODS:
        if svc != service:
            continue
        make = channel.unary_stream if streaming else channel.unary_unary
        calls[method] = make(f"/{API_VERSION}.{svc}/{method}",
                             request_serializer=m[request].SerializeToString,
                             response_deserializer=m[response].FromString)
    return calls


@dataclass
class ContainerPaths:
    """Where the shim and regions appear inside the container."""

    root: str = "/usr/local/gpooling"

    def shim(self) -> str:
        return f"{self.root}/libgpooling_shim.so"

    def usage(self, vid: str) -> str:
        return f"{self.root}/{vid}.shm"

    def limits(self, vid: str) -> str:
        return f"{self.root}/{vid}.limits"


class DevicePlugin:
    """The ``v1beta1.DevicePlugin`` service over a :class:`Pool` (one node's devices)."""

    def __init__(self, pool: Pool, shim: str | Path, *, node: str | None = None,
                 split: int = 10, resource: str = RESOURCE,
                 paths: ContainerPaths | None = None, owner: str = "kubernetes") -> None:
        if not 1 <= split <= 100:
            raise BadInputError(f"split must be in 1..100, got {split}", field="split")
        self.pool, self.shim, self.split, self.resource = pool, str(shim), split, resource
        self.paths, self.owner = paths or ContainerPaths(), owner
        self.devices = [d for d in pool.state.devices if node is None or d.node == node]
        if not self.devices:
            raise BadInputError(f"no devices on node {node!r}", field="node")
        self._by_slot = {self.slot_id(d.id, k): d for d in self.devices for k in range(split)}
        self._bound: dict[str, str] = {}  # slot id -> virtual device id
        self._changed = threading.Condition()
        self._generation = 0
        self._stopped = False

    @staticmethod
    def slot_id(device_id: str, k: int) -> str:
        return f"{device_id.replace('/', '_')}::{k}"

    # --- v1beta1.DevicePlugin ---------------------------------------------------------------
    def GetDevicePluginOptions(self, request, context):  # noqa: N802 (gRPC method names)
        return messages()["DevicePluginOptions"](pre_start_required=False,
                                                 get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context) -> Iterator:  # noqa: N802
        m = messages()
        seen = -1
        while not self._stopped and (context is None or context.is_active()):
            with self._changed:
                if seen == self._generation:
                    self._changed.wait(timeout=1.0)
                    continue
                seen = self._generation
            yield m["ListAndWatchResponse"](devices=[
                m["Device"](ID=slot, health="Healthy") for slot in self._by_slot])

    def GetPreferredAllocation(self, request, context):  # noqa: N802
        """Slots packed onto as few GPUs as possible (one GPU per container if it can)."""
        m = messages()
        out = []
        for ask in request.container_requests:
            chosen = list(ask.must_include_deviceIDs)
            by_device: dict[str, list[str]] = {}
            for slot in ask.available_deviceIDs:
                if slot not in chosen and slot in self._by_slot:
                    by_device.setdefault(self._by_slot[slot].id, []).append(slot)
            for slots in sorted(by_device.values(), key=len, reverse=True):
                chosen += slots[:max(ask.allocation_size - len(chosen), 0)]
            out.append(m["ContainerPreferredAllocationResponse"](
                deviceIDs=chosen[:ask.allocation_size]))
        return m["PreferredAllocationResponse"](container_responses=out)

    def Allocate(self, request, context):  # noqa: N802
        m = messages()
        responses = []
        try:
            for ask in request.container_requests:
                responses.append(self.allocate(list(ask.devices_ids)))
        except BadInputError as exc:
            if context is None:
                raise
            context.abort(_grpc().StatusCode.INVALID_ARGUMENT, str(exc))
        return m["AllocateResponse"](container_responses=responses)

    def PreStartContainer(self, request, context):  # noqa: N802
        return messages()["PreStartContainerResponse"]()

    # --- the work ---------------------------------------------------------------------------
    def allocate(self, slots: list[str]):
        """One container's response for the slots the kubelet gave it."""
        if not slots:
            raise BadInputError("no devices in the request", field="devices_ids")
        unknown = [s for s in slots if s not in self._by_slot]
        if unknown:
            raise BadInputError(f"unknown device id {unknown[0]!r}", field="devices_ids")
        devices = {self._by_slot[s].id for s in slots}
        if len(devices) != 1:
            raise BadInputError(f"slots span {len(devices)} GPUs; a virtual device lives on "
                                "one GPU (ask for at most `split` slots)", field="devices_ids")
        for vid in {self._bound.pop(s) for s in slots if s in self._bound}:
            if vid in {v.id for v in self.pool.list()}:  # the previous pod is gone
                self.pool.release(vid, force=True)
        device = self._by_slot[slots[0]]
        share = len(slots) / self.split
        memory = device.spec.memory * len(slots) // self.split
        vdev = self.pool.create_on(device.id, memory, share, owner=self.owner)
        os.chmod(vdev.region, 0o666)  # the container's user, whoever it is, writes its usage
        for s in slots:
            self._bound[s] = vdev.id
        return self.response(vdev)

    def response(self, vdev):
        m = messages()
        p = self.paths
        envs = {
            "LD_PRELOAD": p.shim(),
            "GPOOLING_SHM": p.usage(vdev.id),
            "GPOOLING_LIMITS": p.limits(vdev.id),
            "GPOOLING_VDEV": vdev.id,
            "CUDA_VISIBLE_DEVICES": str(vdev.index),
            "NVIDIA_VISIBLE_DEVICES": str(vdev.index),
            "CUDA_DEVICE_MEMORY_LIMIT_0": f"{vdev.memory >> 20}m",  # HAMi's names, for tools
            "CUDA_DEVICE_SM_LIMIT": str(round(vdev.compute * 100)),
        }
        limits = f"{vdev.region}.limits"
        mounts = [m["Mount"](container_path=p.shim(), host_path=self.shim, read_only=True),
                  m["Mount"](container_path=p.limits(vdev.id), host_path=limits,
                             read_only=True),
                  m["Mount"](container_path=p.usage(vdev.id), host_path=vdev.region,
                             read_only=False)]
        nodes = [f"/dev/nvidia{vdev.index}", "/dev/nvidiactl", "/dev/nvidia-uvm"]
        devices = [m["DeviceSpec"](container_path=n, host_path=n, permissions="rw")
                   for n in nodes if os.path.exists(n)]
        return m["ContainerAllocateResponse"](envs=envs, mounts=mounts, devices=devices,
                                              annotations={"gpooling.io/vdev": vdev.id})

    def changed(self) -> None:
        """Tell ListAndWatch streams that the device list changed."""
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def stop(self) -> None:
        self._stopped = True
        self.changed()


class PluginServer:
    """Serve a :class:`DevicePlugin` on ``<socket_dir>/<name>`` and register with the kubelet."""

    def __init__(self, plugin: DevicePlugin, socket_dir: str | Path = DEFAULT_DIR,
                 name: str = "gpooling.sock") -> None:
        grpc = _grpc()
        self.plugin, self.socket_dir, self.name = plugin, Path(socket_dir), name
        self.path = self.socket_dir / name
        if not self.socket_dir.is_dir():
            raise BadInputError("no such directory", path=self.socket_dir, field="socket-dir")
        self.path.unlink(missing_ok=True)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        self.server.add_generic_rpc_handlers((service_handler("DevicePlugin", plugin),))
        if not self.server.add_insecure_port(f"unix://{self.path}"):
            raise BadInputError("cannot listen", path=self.path, field="socket-dir")

    def start(self) -> PluginServer:
        self.server.start()
        return self

    def register(self, kubelet_socket: str | Path | None = None, timeout: float = 10.0) -> None:
        """``v1beta1.Registration/Register`` on the kubelet's socket."""
        grpc = _grpc()
        target = Path(kubelet_socket or self.socket_dir / KUBELET_SOCKET)
        m = messages()
        with grpc.insecure_channel(f"unix://{target}") as channel:
            request = m["RegisterRequest"](
                version=API_VERSION, endpoint=self.name, resource_name=self.plugin.resource,
                options=m["DevicePluginOptions"](get_preferred_allocation_available=True))
            try:
                stub(channel, "Registration")["Register"](request, timeout=timeout)
            except grpc.RpcError as exc:
                raise BadInputError(f"kubelet refused registration: {exc.details()}",
                                    path=target) from None

    def stop(self, grace: float = 1.0) -> None:
        self.plugin.stop()
        self.server.stop(grace).wait()
        self.path.unlink(missing_ok=True)
