"""The kubelet device-plugin API v1beta1, built in code: no generated stubs, no protoc.

``api.proto`` beside this file is the API as the upstream ``k8s.io/kubelet`` file defines it
(package ``v1beta1``, same services, RPCs, message and field names and numbers). The message
classes are made at first use from :data:`SCHEMA`, a transcription of that file, through
protobuf's descriptor API; the services are grpc's generic handlers and multi-callables on the
upstream method paths. So any ``grpcio``/``protobuf`` that has those APIs works (see
:data:`REQUIREMENTS`), unlike grpcio-tools stubs, which refuse to import under a runtime older
than the one that generated them. ``tests/gpooling/test_gpooling_kubernetes.py`` checks
:data:`SCHEMA` against ``api.proto`` and the bytes against ones written by hand from the
upstream numbering.

Use: ``messages().RegisterRequest(...)``; ``stub(channel, "Registration").Register(...)``;
``server.add_generic_rpc_handlers((handler("DevicePlugin", implementation),))``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

API_VERSION = "v1beta1"
#: the oldest releases this module has run its tests under (GetMessageClass: protobuf 4.22)
REQUIREMENTS = ("grpcio>=1.60", "protobuf>=4.25")

_S, _B, _I32, _I64, _MAP = "string", "bool", "int32", "int64", "map<string, string>"
#: message -> [(field, number, type (a scalar, a map or a message name), repeated)]
SCHEMA: dict[str, list[tuple[str, int, str, bool]]] = {
    "DevicePluginOptions": [("pre_start_required", 1, _B, False),
                            ("get_preferred_allocation_available", 2, _B, False)],
    "RegisterRequest": [("version", 1, _S, False), ("endpoint", 2, _S, False),
                        ("resource_name", 3, _S, False),
                        ("options", 4, "DevicePluginOptions", False)],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, "Device", True)],
    "TopologyInfo": [("nodes", 1, "NUMANode", True)],
    "NUMANode": [("ID", 1, _I64, False)],
    "Device": [("ID", 1, _S, False), ("health", 2, _S, False),
               ("topology", 3, "TopologyInfo", False)],
    "PreStartContainerRequest": [("devices_ids", 1, _S, True)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [("container_requests", 1,
                                    "ContainerPreferredAllocationRequest", True)],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, _S, True),
                                            ("must_include_deviceIDs", 2, _S, True),
                                            ("allocation_size", 3, _I32, False)],
    "PreferredAllocationResponse": [("container_responses", 1,
                                     "ContainerPreferredAllocationResponse", True)],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, _S, True)],
    "AllocateRequest": [("container_requests", 1, "ContainerAllocateRequest", True)],
    "ContainerAllocateRequest": [("devices_ids", 1, _S, True)],
    "CDIDevice": [("name", 1, _S, False)],
    "AllocateResponse": [("container_responses", 1, "ContainerAllocateResponse", True)],
    "ContainerAllocateResponse": [("envs", 1, _MAP, False), ("mounts", 2, "Mount", True),
                                  ("devices", 3, "DeviceSpec", True),
                                  ("annotations", 4, _MAP, False),
                                  ("cdi_devices", 5, "CDIDevice", True)],
    "Mount": [("container_path", 1, _S, False), ("host_path", 2, _S, False),
              ("read_only", 3, _B, False)],
    "DeviceSpec": [("container_path", 1, _S, False), ("host_path", 2, _S, False),
                   ("permissions", 3, _S, False)],
}
#: service -> [(method, request, response, server-streaming)]
SERVICES: dict[str, list[tuple[str, str, str, bool]]] = {
    "Registration": [("Register", "RegisterRequest", "Empty", False)],
    "DevicePlugin": [
        ("GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
        ("ListAndWatch", "Empty", "ListAndWatchResponse", True),
        ("GetPreferredAllocation", "PreferredAllocationRequest", "PreferredAllocationResponse",
         False),
        ("Allocate", "AllocateRequest", "AllocateResponse", False),
        ("PreStartContainer", "PreStartContainerRequest", "PreStartContainerResponse", False),
    ],
}


def _build() -> SimpleNamespace:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    scalars = {_S: f.TYPE_STRING, _B: f.TYPE_BOOL, _I32: f.TYPE_INT32, _I64: f.TYPE_INT64}
    proto = descriptor_pb2.FileDescriptorProto(
        name="schedlab/gpooling/deviceplugin_v1beta1/api.proto", package=API_VERSION,
        syntax="proto3")
    for name, message_fields in SCHEMA.items():
        message = proto.message_type.add(name=name)
        for field_name, number, kind, repeated in message_fields:
            field = message.field.add(name=field_name, number=number, label=(
                f.LABEL_REPEATED if repeated or kind == _MAP else f.LABEL_OPTIONAL))
            if kind in scalars:
                field.type = scalars[kind]
                continue
            field.type = f.TYPE_MESSAGE
            if kind == _MAP:  # what protoc makes of map<string, string>: a nested entry type
                entry = message.nested_type.add(
                    name="".join(p.title() for p in field_name.split("_")) + "Entry")
                entry.options.map_entry = True
                for key, key_number in (("key", 1), ("value", 2)):
                    entry.field.add(name=key, number=key_number, type=f.TYPE_STRING,
                                    label=f.LABEL_OPTIONAL)
                field.type_name = f".{API_VERSION}.{name}.{entry.name}"
            else:
                field.type_name = f".{API_VERSION}.{kind}"
    pool = descriptor_pool.DescriptorPool()  # our own: never clashes with another v1beta1
    pool.Add(proto)
    return SimpleNamespace(**{
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{API_VERSION}.{name}"))
        for name in SCHEMA})


_MESSAGES: SimpleNamespace | None = None


def messages() -> SimpleNamespace:
    """The v1beta1 message classes as attributes (``messages().Device``); needs protobuf."""
    global _MESSAGES
    if _MESSAGES is None:
        _MESSAGES = _build()
    return _MESSAGES


def path(service: str, method: str) -> str:
    return f"/{API_VERSION}.{service}/{method}"


def handler(service: str, implementation: Any):
    """A grpc handler serving ``v1beta1.<service>`` with ``implementation``'s methods (named as
    the RPCs; ``(request, context)``, ListAndWatch a generator); needs grpcio."""
    import grpc

    pb = messages()
    handlers = {}
    for method, request, response, streaming in SERVICES[service]:
        make = grpc.unary_stream_rpc_method_handler if streaming \
            else grpc.unary_unary_rpc_method_handler
        handlers[method] = make(getattr(implementation, method),
                                request_deserializer=getattr(pb, request).FromString,
                                response_serializer=getattr(pb, response).SerializeToString)
    return grpc.method_handlers_generic_handler(f"{API_VERSION}.{service}", handlers)


def stub(channel: Any, service: str) -> SimpleNamespace:
    """Client calls of ``v1beta1.<service>`` on a grpc ``channel``, as attributes."""
    pb = messages()
    calls = {}
    for method, request, response, streaming in SERVICES[service]:
        make = channel.unary_stream if streaming else channel.unary_unary
        calls[method] = make(path(service, method),
                             request_serializer=getattr(pb, request).SerializeToString,
                             response_deserializer=getattr(pb, response).FromString)
    return SimpleNamespace(**calls)
