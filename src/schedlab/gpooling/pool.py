"""The control plane: an inventory of accelerators and the elastic virtual devices carved from it.

gPooling (../shared/papers/14-gpooling.md) creates virtual devices on demand, resizes them while
they run and releases them, through one control path whatever the hardware. A :class:`Pool`
keeps the books (``ClusterState``), asks a placement policy where a new virtual device goes,
and owns one limits file and one usage region per virtual device (``shm.py``): the shim enforces
the limits and counts into the usage region, so resizing is a write and usage reporting a read.

Every virtual device has an owner (a tenant); acting on another tenant's device is a
ForbiddenError. Releasing or shrinking a device with processes attached is a ConflictError
unless forced by its owner; a forced release revokes it (the shims refuse everything from their
next call) and keeps its capacity booked until its last process is gone. Every grant is also
re-checked against the card's capacity from the grants themselves, so nothing is over-committed.
"""

from __future__ import annotations

import itertools
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from schedlab.core.errors import BadInputError, SchedlabError, UnknownNameError
from schedlab.gpooling import shm
from schedlab.gpooling.devices import PhysicalDevice
from schedlab.gpooling.policies import PlacementPolicy, make_policy
from schedlab.gpooling.state import FULL, ClusterState, Grant, Request


class NoRoomError(BadInputError):
    """The request fits some device of the pool, just not now (retry later or release some)."""


class ConflictError(NoRoomError):
    """The change would pull resources from under running processes (HTTP 409)."""


class ForbiddenError(BadInputError):
    """The virtual device belongs to another tenant (HTTP 403)."""


ADMIN = "admin"  # the tenant that may see and act on every virtual device


@dataclass
class VirtualDevice:
    """A slice of one physical device: what the job sees as its whole GPU."""

    id: str
    device: str
    node: str
    index: int
    model: str
    memory: int
    compute: float
    region: str | None
    owner: str = "default"
    state: str = "active"  # active | revoked (force-released, processes still draining)
    created: float = field(default_factory=time.time)
    usage: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def to_milli(compute: float) -> int:
    """A compute share as integer thousandths; shares below 1/1000 are refused, not rounded to 0."""
    milli = int(round(float(compute) * FULL))
    if not 0 < milli <= FULL or compute != compute:
        raise BadInputError(f"compute share must be in (0.001, 1], got {compute}",
                            field="compute")
    return milli


class Pool:
    """Thread-safe control plane over a fixed inventory (the HTTP API serves one of these)."""

    def __init__(self, devices: Sequence[PhysicalDevice], policy: str | PlacementPolicy =
                 "frag-aware", runtime_dir: str | Path | None = None) -> None:
        self.state = ClusterState(devices)
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.runtime_dir = Path(runtime_dir or tempfile.mkdtemp(prefix="gpooling-"))
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        self._vdevs: dict[str, VirtualDevice] = {}
        self._grants: dict[str, Grant] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()
        self._shim: Path | bool | None = None

    def create(self, memory: int, compute: float, model: str | None = None,
               owner: str = "default") -> VirtualDevice:
        """Place a new virtual device; refuse clearly when it can never fit or not fit now."""
        if int(memory) <= 0:
            raise BadInputError("memory quota must be positive", field="memory")
        if model is not None and model not in self.state.model_names:
            raise BadInputError(f"no {model} device in the pool; models: "
                                f"{', '.join(self.state.model_names)}", field="model")
        request = Request(int(memory), to_milli(compute), 1, model)
        with self._lock:
            self._drain_locked()
            self.policy.observe(request)
            if not self.state.ever_fits(request):
                largest = int(self.state.total_memory.max())
                kinds = ", ".join(self.state.model_names)
                raise BadInputError(
                    f"no device in the pool can hold {memory / 2**30:.2f} GiB"
                    f"{' of ' + model if model else ''}; largest device has "
                    f"{largest / 2**30:.2f} GiB (models: {kinds})", field="memory")
            grants = self.policy.place(request, self.state)
            if grants is None:
                raise NoRoomError("every device that could hold this virtual device is busy; "
                                  "release one or retry later", field="memory")
            self._check_physical(grants[0].device, grants[0].memory, grants[0].milli)
            self.state.take(request, grants)
            return self._register(grants[0], owner)

    def create_on(self, device_id: str, memory: int, compute: float,
                  owner: str = "default") -> VirtualDevice:
        """A virtual device on a named physical device (the kubelet chose it, not our policy)."""
        if int(memory) <= 0:
            raise BadInputError("memory quota must be positive", field="memory")
        index = {d.id: i for i, d in enumerate(self.state.devices)}
        if device_id not in index:
            raise UnknownNameError("device", device_id, sorted(index))
        d = index[device_id]
        request = Request(int(memory), to_milli(compute), 1, None)
        with self._lock:
            self._drain_locked()
            if not (self.state.fits_now(request)[d]):
                raise NoRoomError(f"device {device_id} has no room for this virtual device now",
                                  field="memory")
            grant = Grant(d, int(memory), request.milli)
            self._check_physical(d, grant.memory, grant.milli)
            self.state.take(request, [grant])
            return self._register(grant, owner)

    def _check_physical(self, device: int, memory: int, milli: int,
                        replacing: str | None = None) -> None:
        """Re-check a grant against the card itself, from the grants (not the free books):
        live and draining virtual devices on ``device`` plus this one must fit its capacity."""
        held = [g for vid, g in self._grants.items() if g.device == device and vid != replacing]
        spec = self.state.devices[device]
        total_memory = int(self.state.total_memory[device])
        if (sum(g.memory for g in held) + memory > total_memory
                or sum(g.milli for g in held) + milli > FULL):
            raise NoRoomError(f"device {spec.id} would be over-committed (its processes may still "
                              "hold memory of a released virtual device); retry later",
                              field="memory")

    def _register(self, grant: Grant, owner: str) -> VirtualDevice:
        vid = f"vdev-{next(self._ids)}"
        device = self.state.devices[grant.device]
        region = self.runtime_dir / f"{vid}.shm"
        shm.create_region(region, grant.memory, grant.milli / FULL, vdev=vid)
        vdev = VirtualDevice(vid, device.id, device.node, device.index, device.model,
                             grant.memory, grant.milli / FULL, str(region), owner=owner)
        self._vdevs[vid], self._grants[vid] = vdev, grant
        return vdev

    def authorise(self, vid: str, tenant: str | None) -> VirtualDevice:
        """The virtual device, if ``tenant`` may act on it (None: the library, trusted)."""
        with self._lock:
            return self._owned(vid, tenant)

    def _owned(self, vid: str, tenant: str | None) -> VirtualDevice:
        if vid not in self._vdevs and tenant is not None and tenant != ADMIN:
            mine = sorted(v for v, d in self._vdevs.items() if d.owner == tenant)
            raise UnknownNameError("virtual device", vid, mine or ["(none)"])  # not others' ids
        vdev = self._get(vid)
        if tenant is not None and tenant != ADMIN and vdev.owner != tenant:
            raise ForbiddenError(f"{vid} belongs to another tenant", field="vdev")
        return vdev

    def attached(self, vid: str) -> int:
        """Processes attached to ``vid`` now (dead ones reaped first where the region is here)."""
        with self._lock:
            return self._attached_locked(self._get(vid))

    def _attached_locked(self, vdev: VirtualDevice) -> int:
        if vdev.region and Path(vdev.region).is_file():
            self._reap(vdev)
        usage = self._read_usage(vdev)
        return int(usage.get("live", 0))

    def _reap(self, vdev: VirtualDevice) -> None:
        if self.shim is None:
            return
        try:
            shm.reap(vdev.region, self.shim)
        except SchedlabError:
            pass

    @property
    def shim(self) -> Path | None:
        """The shim library whose reaper this pool uses (built on first need; None if no cc)."""
        if self._shim is None:
            try:
                from schedlab.gpooling.native import build

                self._shim = build().shim
            except SchedlabError:
                self._shim = False
        return self._shim or None

    def _drain_locked(self) -> None:
        """Give a force-released device's capacity back once its last process is gone."""
        for vid in [v for v, d in self._vdevs.items() if d.state == "revoked"]:
            vdev = self._vdevs[vid]
            if self._attached_locked(vdev) == 0 and int(vdev.usage.get("memory_used", 0)) == 0:
                self._forget(vid)

    def _forget(self, vid: str) -> None:
        vdev = self._vdevs.pop(vid)
        self.state.give_back([self._grants.pop(vid)])
        if vdev.region:
            Path(vdev.region).unlink(missing_ok=True)
            shm.limits_path(vdev.region).unlink(missing_ok=True)

    def get(self, vid: str) -> VirtualDevice:
        with self._lock:
            return self._get(vid)

    def _get(self, vid: str) -> VirtualDevice:
        if vid not in self._vdevs:
            raise UnknownNameError("virtual device", vid, sorted(self._vdevs) or ["(none)"])
        return self._vdevs[vid]

    def list(self, tenant: str | None = None) -> list[VirtualDevice]:
        with self._lock:
            self._drain_locked()
            return [v for v in self._vdevs.values()
                    if tenant is None or tenant == ADMIN or v.owner == tenant]

    def resize(self, vid: str, memory: int | None = None, compute: float | None = None, *,
               tenant: str | None = None, force: bool = False) -> VirtualDevice:
        """Grow or shrink in place, live: the shim sees the new quota on its next call.

        Shrinking a virtual device that has processes attached is a ConflictError unless
        ``force``; shrinking below the memory in use is refused even then.
        """
        with self._lock:
            vdev = self._owned(vid, tenant)
            if vdev.state != "active":
                raise ConflictError(f"{vid} was released; its processes are draining",
                                    field="vdev")
            grant = self._grants[vid]
            new_memory = grant.memory if memory is None else int(memory)
            new_milli = grant.milli if compute is None else to_milli(compute)
            if new_memory <= 0:
                raise BadInputError("memory quota must be positive", field="memory")
            attached = self._attached_locked(vdev)
            used = int(vdev.usage.get("memory_used", 0))
            if new_memory < used:
                raise ConflictError(f"{vid} holds {used} bytes; cannot shrink below that",
                                    field="memory")
            shrinking = new_memory < grant.memory or new_milli < grant.milli
            if shrinking and attached and not force:
                raise ConflictError(f"{vid} has {attached} process(es) attached; shrinking it "
                                    "needs force=true from its owner", field="memory")
            try:
                resized = self.state.resize(grant, new_memory, new_milli)  # books first
            except BadInputError as exc:  # past the card (or what others hold of it): a conflict
                raise ConflictError(exc.message, field=exc.field) from None
            try:
                self._check_physical(grant.device, new_memory, new_milli, replacing=vid)
            except NoRoomError:
                self.state.resize(resized, grant.memory, grant.milli)
                raise
            self._grants[vid] = resized
            if vdev.region:
                shm.update_quota(vdev.region, new_memory, new_milli / FULL)
            vdev.memory, vdev.compute = new_memory, new_milli / FULL
            return vdev

    def release(self, vid: str, *, tenant: str | None = None,
                force: bool = False) -> VirtualDevice:
        """Release ``vid``. With processes attached: ConflictError, unless ``force`` (its owner),
        which revokes it (every shim refuses from its next call; agents stop their jobs) and
        keeps its capacity booked until the last process is gone, so nothing is over-committed.
        """
        with self._lock:
            vdev = self._owned(vid, tenant)
            attached = self._attached_locked(vdev)
            if attached and not force:
                raise ConflictError(f"{vid} has {attached} process(es) attached; release it with "
                                    "force=true (they will be told) or stop them first",
                                    field="vdev")
            if attached or vdev.state == "revoked":
                if vdev.region and Path(vdev.region).is_file():
                    shm.revoke(vdev.region)
                vdev.state = "revoked"
                return vdev
            self._forget(vid)
            vdev.state = "released"
            return vdev

    def _read_usage(self, vdev: VirtualDevice) -> dict[str, Any]:
        if vdev.region and Path(vdev.region).is_file():
            vdev.usage = shm.read_region(vdev.region)
        return vdev.usage

    def usage(self, vid: str, tenant: str | None = None) -> dict[str, Any]:
        """The data plane's counters for ``vid`` (read from its region)."""
        with self._lock:
            return dict(self._read_usage(self._owned(vid, tenant)))

    def report(self, vid: str, usage: dict[str, Any],
               tenant: str | None = None) -> VirtualDevice:
        """Usage pushed by an agent on another host (where the region is not visible)."""
        with self._lock:
            vdev = self._owned(vid, tenant)
            vdev.usage = {k: v for k, v in usage.items() if isinstance(v, int | float)}
            return vdev

    def stats(self) -> dict[str, Any]:
        """Allocated compute and memory, and how fragmented what is left is."""
        with self._lock:
            self._drain_locked()
            s = self.state
            free_milli = s.free_milli.astype(float)
            partial = (free_milli > 0) & (free_milli < FULL)
            return dict(
                devices=len(s), virtual_devices=len(self._vdevs), policy=self.policy.name,
                compute_allocated=float(1 - free_milli.sum() / (FULL * len(s))),
                memory_allocated=float(1 - s.free_memory.sum() / s.total_memory.sum()),
                idle_devices=int((free_milli == FULL).sum()),
                fragmented_compute=float(free_milli[partial].sum() / max(free_milli.sum(), 1)),
                free=[dict(device=d.id, model=d.model, memory=int(m), compute=int(c) / FULL)
                      for d, m, c in zip(s.devices, s.free_memory, np.asarray(s.free_milli),
                                         strict=True)],
            )
