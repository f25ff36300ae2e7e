"""gPooling on Kubernetes: a kubelet device plugin (API v1beta1) for elastic virtual devices.

gPooling (../shared/papers/14-gpooling.md) hands jobs slices of physical accelerators. On
Kubernetes the node side of that is a *device plugin*: a gRPC server on a unix socket in the
kubelet's device-plugin directory that registers itself with the kubelet and then answers it.
This one speaks :mod:`schedlab.gpooling.deviceplugin_v1beta1`: the upstream ``api.proto``'s
messages built in code at first use (no generated stubs, no protoc; any ``grpcio``/``protobuf``
with the descriptor and generic-handler APIs, see its ``REQUIREMENTS``), byte-compatible with
``k8s.io/kubelet``:

- **Register** (client call on ``<dir>/kubelet.sock``): version ``v1beta1``, our socket's name as
  the endpoint, the extended resource (default ``gpooling.io/vgpu``) and our options.
- **ListAndWatch**: every physical GPU of this node as ``split`` slots ``<gpu>::<k>``; a pod that
  asks for ``gpooling.io/vgpu: 3`` of ``split: 10`` gets 30 % of one GPU's memory and compute.
  A slot is ``Unhealthy`` when its GPU is, or when the pool cannot back it any more (capacity
  taken through the control plane's REST API, say), so the kubelet's allocatable always matches
  what the pool can really give. The list is re-sent whenever either changes.
- **GetPreferredAllocation**: the slots packed onto one GPU, chosen with the fragmentation-aware
  policy's measure (the GPU whose use raises expected fragmentation least).
- **Allocate**: a virtual device of the :class:`~schedlab.gpooling.pool.Pool` on that GPU, and
  what the container needs, the way HAMi injects HAMi-core: ``LD_PRELOAD`` of the shim, the
  variables the shim reads (``GPOOLING_SHM``, ``GPOOLING_LIMITS``), HAMi's
  ``CUDA_DEVICE_MEMORY_LIMIT_0``/``CUDA_DEVICE_SM_LIMIT`` for tools that read them,
  ``NVIDIA_VISIBLE_DEVICES``; mounts of the shim and the limits file **read-only** and of the
  usage region read-write; the ``/dev/nvidia*`` nodes that exist.

The kubelet never tells a plugin that a pod has gone (the API has no deallocate). A slot that
is still bound is therefore refused (``FAILED_PRECONDITION``: no over-commit) while its virtual
device may be in use: processes attached, or never attached and younger than
``reclaim_after_s``. Once the holder is provably gone (it attached and every process has
exited, or it never attached within ``reclaim_after_s``) the slot is reclaimed and re-granted.
Unknown or malformed device ids are ``INVALID_ARGUMENT``; a pool without room is
``RESOURCE_EXHAUSTED``. If the kubelet restarts (it wipes the directory's sockets),
:meth:`PluginServer.serve_forever` recreates the socket and registers again.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from schedlab.core.errors import BadInputError, MissingDependencyError, SchedlabError
from schedlab.gpooling.deviceplugin_v1beta1 import API_VERSION
from schedlab.gpooling.devices import PhysicalDevice
from schedlab.gpooling.pool import NoRoomError, Pool, VirtualDevice
from schedlab.gpooling.state import FULL, Request

RESOURCE = "gpooling.io/vgpu"
DEFAULT_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
VDEV_ANNOTATION = "gpooling.io/vdev"
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with its NUL
_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
                       r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def _api():
    """grpc, the v1beta1 message classes, and :mod:`~schedlab.gpooling.deviceplugin_v1beta1`
    (``handler``/``stub``); MissingDependencyError naming what to install."""
    from schedlab.gpooling import deviceplugin_v1beta1 as v1beta1

    hint = "pip install " + " ".join(f"'{r}'" for r in v1beta1.REQUIREMENTS)
    try:
        import grpc

        pb = v1beta1.messages()
    except ImportError as exc:
        raise MissingDependencyError(
            f"the Kubernetes device plugin needs grpcio and protobuf ({exc})", hint=hint) from exc
    except Exception as exc:  # noqa: BLE001 - a protobuf without the descriptor APIs we use
        raise MissingDependencyError(
            f"this protobuf cannot build the v1beta1 messages: {str(exc).splitlines()[0]}",
            hint=hint) from exc
    return grpc, pb, v1beta1


@dataclass
class PluginConfig:
    """What a node's device plugin serves; read from TOML or JSON by :func:`load_config`."""

    resource: str = RESOURCE
    split: int = 10  # slots per physical GPU
    node: str | None = None  # only this node's devices of the inventory
    inventory: str | None = None  # 'T4:2', a node-list CSV, or None: discover (nvidia-smi ...)
    runtime_dir: str | None = None  # where usage regions and limits files live on the host
    shim: str | None = None  # host path of libgpooling_shim.so (None: build it)
    container_root: str = "/usr/local/gpooling"  # where they appear inside containers
    socket_name: str = "gpooling-vgpu.sock"
    reclaim_after_s: float = 300.0  # a bound slot never attached to is free after this
    poll_s: float = 1.0  # how often pool capacity and GPU health are re-read
    device_nodes: list[str] = field(default_factory=lambda: [
        "/dev/nvidia{index}", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"])
    real_libcuda: str | None = None  # GPOOLING_REAL_LIBCUDA inside the container, if not default

    def validate(self, path: str | Path | None = None) -> PluginConfig:
        def bad(message: str, name: str) -> BadInputError:
            return BadInputError(message, path=path, field=name)

        if not isinstance(self.split, int) or isinstance(self.split, bool) \
                or not 1 <= self.split <= 100:
            raise bad(f"must be an integer in 1..100, got {self.split!r}", "split")
        if not isinstance(self.resource, str) or not _RESOURCE.match(self.resource):
            raise bad(f"must be a domain-qualified extended resource like {RESOURCE}, got "
                      f"{self.resource!r}", "resource")
        if self.resource.split("/")[0].endswith("kubernetes.io"):
            raise bad(f"{self.resource!r} is in a domain reserved by Kubernetes", "resource")
        for key in ("reclaim_after_s", "poll_s"):
            value = getattr(self, key)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise bad(f"must be a positive number of seconds, got {value!r}", key)
        if "/" in self.socket_name or not self.socket_name.endswith(".sock"):
            raise bad(f"must be a file name ending in .sock, got {self.socket_name!r}",
                      "socket_name")
        if not isinstance(self.device_nodes, list) \
                or not all(isinstance(n, str) for n in self.device_nodes):
            raise bad("must be a list of paths", "device_nodes")
        if not str(self.container_root).startswith("/"):
            raise bad(f"must be an absolute path, got {self.container_root!r}", "container_root")
        return self


def load_config(path: str | Path) -> PluginConfig:
    """A :class:`PluginConfig` from a ``.toml`` or ``.json`` file; errors name file and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise BadInputError(f"cannot read the config: {exc.strerror}", path=path) from None
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInputError(f"not JSON: {exc.msg}", path=path, line=exc.lineno) from None
    except tomllib.TOMLDecodeError as exc:
        raise BadInputError(f"not TOML: {exc}", path=path) from None
    if not isinstance(data, dict):
        raise BadInputError("must be a table/object of settings", path=path)
    known = {f.name for f in fields(PluginConfig)}
    data = {k.replace("-", "_"): v for k, v in data.items()}
    for key in data:
        if key not in known:
            raise BadInputError(f"unknown setting; valid: {', '.join(sorted(known))}",
                                path=path, field=key)
    return PluginConfig(**data).validate(path)


def device_node_health(device: PhysicalDevice) -> bool:
    """Healthy unless this host has NVIDIA's control node but not this GPU's own node."""
    if not os.path.exists("/dev/nvidiactl") or device.spec.vendor != "nvidia":
        return True
    return os.path.exists(f"/dev/nvidia{device.index}")


@dataclass
class _Binding:
    vid: str
    since: float


class DevicePlugin:
    """The ``v1beta1.DevicePlugin`` service over one node's devices of a :class:`Pool`."""

    def __init__(self, pool: Pool, config: PluginConfig | None = None, *,
                 shim: str | Path | None = None,
                 health: Callable[[PhysicalDevice], bool] = device_node_health,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = (config or PluginConfig()).validate()
        self.pool, self.health_check, self.clock = pool, health, clock
        shim = shim or self.config.shim
        if shim is None:
            from schedlab.gpooling.native import build

            shim = build().shim
        self.shim = str(shim)
        node = self.config.node
        self.devices = [d for d in pool.state.devices if node is None or d.node == node]
        if not self.devices:
            nodes = sorted({d.node for d in pool.state.devices})
            shown = ", ".join(nodes[:8]) + (f", ... ({len(nodes)} in all)"
                                            if len(nodes) > 8 else "")
            raise BadInputError(f"no devices on node {node!r}; nodes: {shown}", field="node")
        self._index = {d.id: pool.state.devices.index(d) for d in self.devices}
        split = self.config.split
        self._slots = {self.slot_id(d, k): d for d in self.devices for k in range(split)}
        for slot in self._slots:
            if len(slot) > 63:
                raise BadInputError(f"device id {slot!r} is longer than the API's 63 characters",
                                    field="inventory")
        self._bound: dict[str, _Binding] = {}
        self._unhealthy: set[str] = set()  # physical device ids marked by set_health
        self._lock = threading.RLock()  # Allocate and reclaim are one at a time
        self._changed = threading.Condition()
        self._generation = 0
        self._last: list[tuple[str, str]] | None = None
        self._stopped = threading.Event()

    @staticmethod
    def slot_id(device: PhysicalDevice, k: int) -> str:
        return f"{device.id.replace('/', '_')}::{k}"

    def slot_memory(self, device: PhysicalDevice) -> int:
        return device.spec.memory // self.config.split

    def slot_milli(self) -> int:
        return FULL // self.config.split

    # --- what the kubelet sees -------------------------------------------------------------
    def device_list(self) -> list[tuple[str, str]]:
        """``(slot id, health)`` for every slot, from GPU health and what the pool can back."""
        out = []
        with self.pool._lock:  # the books, consistently
            free_m = self.pool.state.free_memory.copy()
            free_c = self.pool.state.free_milli.copy()
        with self._lock:
            bound = set(self._bound)
            for device in self.devices:
                i = self._index[device.id]
                backable = min(int(free_m[i]) // self.slot_memory(device),
                               int(free_c[i]) // self.slot_milli())
                healthy = device.id not in self._unhealthy and self.health_check(device)
                for k in range(self.config.split):
                    slot = self.slot_id(device, k)
                    if slot in bound:
                        ok = healthy
                    else:
                        ok = healthy and backable > 0
                        backable -= ok
                    out.append((slot, HEALTHY if ok else UNHEALTHY))
        return out

    def refresh(self) -> bool:
        """Re-read health and capacity; wake the ListAndWatch streams if anything changed."""
        now = self.device_list()
        with self._changed:
            if now == self._last:
                return False
            self._last = now
            self._generation += 1
            self._changed.notify_all()
            return True

    def set_health(self, device_id: str, healthy: bool) -> None:
        """Mark a physical GPU (un)healthy (an Xid error, a fallen-off-the-bus card ...)."""
        if device_id not in self._index:
            raise BadInputError(f"no device {device_id!r} on this node", field="device")
        with self._lock:
            (self._unhealthy.discard if healthy else self._unhealthy.add)(device_id)
        self.refresh()

    def watch(self) -> None:
        """Poll health and capacity every ``poll_s`` until :meth:`stop` (run in a thread)."""
        while not self._stopped.wait(self.config.poll_s):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a bad poll must not stop the watcher
                continue

    # --- v1beta1.DevicePlugin ----------------------------------------------------------------
    def GetDevicePluginOptions(self, request, context):  # noqa: N802 (gRPC method names)
        return _api()[1].DevicePluginOptions(pre_start_required=False,
                                             get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context) -> Iterator:  # noqa: N802
        pb = _api()[1]
        if context is not None:
            context.add_callback(self._wake)
        self.refresh()
        seen = -1
        while not self._stopped.is_set() and (context is None or context.is_active()):
            with self._changed:
                if seen == self._generation:
                    self._changed.wait(timeout=1.0)
                    continue
                seen, devices = self._generation, self._last or []
            yield pb.ListAndWatchResponse(devices=[pb.Device(ID=slot, health=health)
                                                   for slot, health in devices])

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def GetPreferredAllocation(self, request, context):  # noqa: N802
        pb = _api()[1]
        out = []
        try:
            for ask in request.container_requests:
                out.append(pb.ContainerPreferredAllocationResponse(deviceIDs=self.prefer(
                    list(ask.available_deviceIDs), list(ask.must_include_deviceIDs),
                    ask.allocation_size)))
        except BadInputError as exc:
            _abort(context, "INVALID_ARGUMENT", exc)
        return pb.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request, context):  # noqa: N802
        pb = _api()[1]
        if not request.container_requests:
            _abort(context, "INVALID_ARGUMENT", BadInputError(
                "no container requests", field="container_requests"))
        granted: list[VirtualDevice] = []
        try:
            with self._lock:  # all containers of the pod, or none
                for ask in request.container_requests:
                    granted.append(self.allocate(list(ask.devices_ids)))
        except SchedlabError as exc:
            for vdev in granted:
                self._unbind(vdev.id)
            self.refresh()
            code = ("FAILED_PRECONDITION" if isinstance(exc, SlotInUseError) else
                    "RESOURCE_EXHAUSTED" if isinstance(exc, NoRoomError) else "INVALID_ARGUMENT")
            _abort(context, code, exc)
        self.refresh()
        return pb.AllocateResponse(container_responses=[self.response(v) for v in granted])

    def PreStartContainer(self, request, context):  # noqa: N802
        return _api()[1].PreStartContainerResponse()

    # --- the work -------------------------------------------------------------------------------
    def _check_ids(self, ids: list[str], name: str) -> None:
        unknown = [s for s in ids if s not in self._slots]
        if unknown:
            raise BadInputError(f"unknown device id {unknown[0]!r} (this plugin serves "
                                f"{self.config.resource} slots like "
                                f"{next(iter(self._slots))!r})", field=name)
        if len(set(ids)) != len(ids):
            raise BadInputError("a device id is repeated", field=name)

    def prefer(self, available: list[str], must: list[str], size: int) -> list[str]:
        """``size`` slots of ``available`` (with all of ``must``) on one GPU if any can hold
        them: the GPU whose use raises the pool's expected fragmentation least."""
        self._check_ids(available, "available_deviceIDs")
        self._check_ids(must, "must_include_deviceIDs")
        if size <= 0:
            raise BadInputError(f"must be positive, got {size}", field="allocation_size")
        if size > self.config.split:
            raise BadInputError(f"a virtual device is at most one GPU ({self.config.split} "
                                f"slots), asked for {size}", field="allocation_size")
        by_gpu: dict[str, list[str]] = {}
        for slot in dict.fromkeys(must + available):
            by_gpu.setdefault(self._slots[slot].id, []).append(slot)
        pinned = {self._slots[s].id for s in must}
        candidates = [g for g, slots in by_gpu.items()
                      if len(slots) >= size and pinned <= {g}]
        if not candidates:  # cannot be one GPU: fill from the fullest, must-includes first
            chosen = list(must)
            for slots in sorted(by_gpu.values(), key=len, reverse=True):
                chosen += [s for s in slots if s not in chosen][:max(size - len(chosen), 0)]
            return chosen[:size]
        def cost(gpu: str) -> tuple[float, int]:
            i = self._index[gpu]
            device = self.pool.state.devices[i]
            return float(fragmentation_increase(self.pool, self._request(device, size))[i]), i

        best = min(candidates, key=cost)
        return (list(must) + [s for s in by_gpu[best] if s not in must])[:size]

    def _request(self, device: PhysicalDevice, slots: int) -> Request:
        return Request(slots * self.slot_memory(device), slots * self.slot_milli(), 1, None)

    def allocate(self, slots: list[str]) -> VirtualDevice:
        """A virtual device for one container's slots (all on one GPU), or SchedlabError."""
        if not slots:
            raise BadInputError("no device ids in the container request", field="devices_ids")
        self._check_ids(slots, "devices_ids")
        gpus = {self._slots[s].id for s in slots}
        if len(gpus) != 1:
            raise BadInputError(f"the ids span {len(gpus)} GPUs ({', '.join(sorted(gpus))}); a "
                                "virtual device lives on one GPU", field="devices_ids")
        with self._lock:
            for vid in dict.fromkeys(self._bound[s].vid for s in slots if s in self._bound):
                self._reclaim(vid)
            device = self._slots[slots[0]]
            request = self._request(device, len(slots))
            vdev = self.pool.create_on(device.id, request.memory, request.milli / FULL,
                                       owner="kubernetes")
            if vdev.region:
                os.chmod(vdev.region, 0o666)  # whatever uid the container runs as counts usage
            for s in slots:
                self._bound[s] = _Binding(vdev.id, self.clock())
            return vdev

    def _reclaim(self, vid: str) -> None:
        """Free ``vid``'s slots if its holder is provably gone, else SlotInUseError."""
        since = min(b.since for b in self._bound.values() if b.vid == vid)
        slots = sorted(s for s, b in self._bound.items() if b.vid == vid)
        try:
            usage = self.pool.usage(vid)
            live = self.pool.attached(vid)
        except SchedlabError:  # released behind our back (REST API, admin): nothing to wait on
            self._unbind(vid)
            return
        ever = int(usage.get("attached", 0))
        if live > 0:
            raise SlotInUseError(f"{', '.join(slots)} still back {vid} ({live} process(es) "
                                 "attached); refusing to give them out twice", field="devices_ids")
        age = self.clock() - since
        if ever == 0 and age < self.config.reclaim_after_s:
            raise SlotInUseError(
                f"{', '.join(slots)} were given to {vid} {age:.0f} s ago and its container has "
                f"not started yet; refusing to give them out twice (reclaimed after "
                f"{self.config.reclaim_after_s:g} s unused)", field="devices_ids")
        self._unbind(vid)

    def _unbind(self, vid: str) -> None:
        with self._lock:
            for slot in [s for s, b in self._bound.items() if b.vid == vid]:
                del self._bound[slot]
            try:
                self.pool.release(vid, force=True)
            except SchedlabError:
                pass

    def bound(self) -> dict[str, str]:
        """Slot id -> virtual device id, for the slots given out now."""
        with self._lock:
            return {s: b.vid for s, b in self._bound.items()}

    def response(self, vdev: VirtualDevice):
        """The ``ContainerAllocateResponse`` for one container's virtual device."""
        from schedlab.gpooling.shm import limits_path

        pb = _api()[1]
        root = self.config.container_root.rstrip("/")
        shim, usage, limits = (f"{root}/libgpooling_shim.so", f"{root}/{vdev.id}.shm",
                               f"{root}/{vdev.id}.limits")
        envs = {
            "LD_PRELOAD": shim,  # what the shim reads: its regions
            "GPOOLING_SHM": usage,
            "GPOOLING_LIMITS": limits,
            "GPOOLING_VDEV": vdev.id,
            "NVIDIA_VISIBLE_DEVICES": str(vdev.index),  # the NVIDIA runtime exposes this GPU
            # HAMi's names (informational here; the shim enforces from the limits region);
            # inside the container the one visible GPU is ordinal 0
            "CUDA_DEVICE_MEMORY_LIMIT_0": f"{vdev.memory >> 20}m",
            "CUDA_DEVICE_SM_LIMIT": str(round(vdev.compute * 100)),
        }
        if self.config.real_libcuda:
            envs["GPOOLING_REAL_LIBCUDA"] = self.config.real_libcuda
        mounts = [pb.Mount(container_path=shim, host_path=self.shim, read_only=True),
                  pb.Mount(container_path=limits, host_path=str(limits_path(vdev.region)),
                           read_only=True),
                  pb.Mount(container_path=usage, host_path=str(vdev.region), read_only=False)]
        nodes = dict.fromkeys(n.format(index=vdev.index) for n in self.config.device_nodes)
        devices = [pb.DeviceSpec(container_path=n, host_path=n, permissions="rw")
                   for n in nodes if os.path.exists(n)]
        return pb.ContainerAllocateResponse(envs=envs, mounts=mounts, devices=devices,
                                            annotations={VDEV_ANNOTATION: vdev.id})

    def stop(self) -> None:
        self._stopped.set()
        self._wake()


class SlotInUseError(BadInputError):
    """The kubelet asked for a slot whose virtual device may still be in use."""


def _abort(context: Any, code: str, exc: Exception) -> None:
    if context is None:
        raise exc
    grpc = _api()[0]
    context.abort(getattr(grpc.StatusCode, code), str(exc))


def fragmentation_increase(pool: Pool, request: Request):
    """Per physical device of ``pool``: how much placing ``request`` there raises FGD-style
    expected fragmentation (the frag-aware policy's measure and best-fit tie-break); inf where
    it does not fit now."""
    from schedlab.gpooling.policies import FragAware

    meter = pool.policy if isinstance(pool.policy, FragAware) else FragAware()
    with pool._lock:
        state = pool.state
        fits = state.fits_now(request)
        free_m, free_c = state.free_memory.copy(), state.free_milli.copy()
    return placement_cost(meter, free_m, free_c, request.memory, request.milli, request, fits)


def placement_cost(meter, free_m, free_c, memory, milli: int, probe: Request, fits=None):
    """Per device of the arrays ``free_m``/``free_c``: the rise of ``meter``'s expected
    fragmentation (in GPUs) if a slice of ``memory`` bytes (a number, or one per device) and
    ``milli`` lands there, plus 1e-3 x the compute it leaves (ties go to best fit); inf where
    it does not fit (``fits``, default: enough memory and compute free). The one measure the
    device plugin's GetPreferredAllocation and the scheduler extender place by."""
    import numpy as np

    if fits is None:
        fits = (free_m >= memory) & (free_c >= milli)
    before = meter.fragmentation(free_m, free_c, probe)
    after = meter.fragmentation(free_m - memory, free_c - milli, probe)
    left = (free_c - milli) / FULL
    return np.where(fits, (after - before) / FULL + 1e-3 * left, np.inf)


def check_socket_dir(socket_dir: str | Path, socket_name: str) -> Path:
    """The plugin's socket path in ``socket_dir``, or a BadInputError naming what is wrong."""
    directory = Path(socket_dir)
    if not directory.exists():
        raise BadInputError("no such directory (the kubelet's device-plugin directory)",
                            path=directory, field="socket-dir")
    if not directory.is_dir():
        raise BadInputError("not a directory", path=directory, field="socket-dir")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BadInputError("cannot create a socket here (permission denied)", path=directory,
                            field="socket-dir")
    path = directory / socket_name
    if len(str(path)) > _MAX_SOCKET_PATH:
        raise BadInputError(f"socket path is {len(str(path))} bytes; unix sockets allow "
                            f"{_MAX_SOCKET_PATH}", path=path, field="socket-dir")
    return path


class PluginServer:
    """Serve a :class:`DevicePlugin` on ``<socket_dir>/<socket_name>``; register it."""

    def __init__(self, plugin: DevicePlugin, socket_dir: str | Path = DEFAULT_DIR,
                 kubelet_socket: str | Path | None = None) -> None:
        self.plugin = plugin
        self.socket_dir = Path(socket_dir)
        self.path = check_socket_dir(socket_dir, plugin.config.socket_name)
        self.kubelet_socket = Path(kubelet_socket or self.socket_dir / KUBELET_SOCKET)
        self.server = None
        self.registrations = 0
        self._watcher: threading.Thread | None = None

    def start(self) -> PluginServer:
        grpc, _, v1beta1 = _api()
        self.path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8,
                                                        thread_name_prefix="gpooling-dp"))
        server.add_generic_rpc_handlers((v1beta1.handler("DevicePlugin", self.plugin),))
        try:
            port = server.add_insecure_port(f"unix://{self.path}")
        except RuntimeError:
            port = 0
        if not port:
            raise BadInputError("cannot listen on this unix socket", path=self.path,
                                field="socket-dir")
        server.start()
        self.server = server
        if self._watcher is None:
            self._watcher = threading.Thread(target=self.plugin.watch, daemon=True,
                                             name="gpooling-dp-watch")
            self._watcher.start()
        return self

    def register(self, timeout: float = 10.0) -> None:
        """``v1beta1.Registration/Register`` on the kubelet's socket."""
        grpc, pb, v1beta1 = _api()
        target = self.kubelet_socket
        if not target.exists():
            raise SchedlabError("no kubelet socket here; is the kubelet running and "
                                "--socket-dir its device-plugin directory?", path=target)
        config = self.plugin.config
        request = pb.RegisterRequest(
            version=API_VERSION, endpoint=config.socket_name, resource_name=config.resource,
            options=pb.DevicePluginOptions(pre_start_required=False,
                                           get_preferred_allocation_available=True))
        with grpc.insecure_channel(f"unix://{target}") as channel:
            try:
                v1beta1.stub(channel, "Registration").Register(request, timeout=timeout)
            except grpc.RpcError as exc:
                code = exc.code()
                if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise SchedlabError(f"nothing answers on the kubelet socket ({code.name}); "
                                        "is the kubelet running?", path=target) from None
                raise SchedlabError(f"the kubelet refused registration of {config.resource}: "
                                    f"{code.name}: {exc.details()}", path=target) from None
        self.registrations += 1

    def serve_forever(self, stop: threading.Event | None = None, check_s: float = 1.0,
                      on_register: Callable[[PluginServer], None] | None = None) -> None:
        """Register, then keep serving; when the kubelet restarts (our socket is gone, or its
        socket was recreated) start again on a fresh socket and register again.
        ``on_register`` is called after every successful registration."""
        stop = stop or threading.Event()
        self.register()
        if on_register is not None:
            on_register(self)
        kubelet_id = _inode(self.kubelet_socket)
        while not stop.wait(check_s):
            now = _inode(self.kubelet_socket)
            if self.path.exists() and now == kubelet_id:
                continue
            if now is None:  # kubelet down: wait for it to come back
                continue
            # wait for the old server to finish shutting down: gRPC unlinks its unix socket
            # when the listener is destroyed, which (not waited for) can remove the socket the
            # restarted server has just bound at the same path -- the kubelet then cannot dial
            # back (found by CI on a loaded machine)
            self.server.stop(0).wait()
            self.start()
            try:
                self.register()
                kubelet_id = now
                if on_register is not None:
                    on_register(self)
            except SchedlabError:
                continue  # the kubelet is still starting: try again next round

    def stop(self, grace: float = 1.0) -> None:
        self.plugin.stop()
        if self.server is not None:
            self.server.stop(grace).wait()
        self.path.unlink(missing_ok=True)


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def plugin_from_config(config: PluginConfig) -> DevicePlugin:
    """A :class:`Pool` of the configured inventory (this node's part) and its plugin."""
    from schedlab.gpooling.devices import discover

    devices = discover(config.inventory)
    if not devices:
        raise BadInputError("no accelerators found; set inventory (e.g. 'T4:2')",
                            field="inventory")
    if config.node is not None:
        devices = [d for d in devices if d.node == config.node] or devices
    return DevicePlugin(Pool(devices, "frag-aware", config.runtime_dir), config)
