"""The control plane: an inventory of accelerators and the elastic virtual devices carved from it.

gPooling (../shared/papers/14-gpooling.md) creates virtual devices on demand, resizes them while
they run and releases them, through one control path whatever the hardware. A :class:`Pool`
keeps the books (``ClusterState``), asks a placement policy where a new virtual device goes,
and owns one usage region per virtual device (``shm.py``): the shim enforces the quota written
there and counts into it, so resizing is a write and usage reporting is a read.
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

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.gpooling import shm
from schedlab.gpooling.devices import PhysicalDevice
from schedlab.gpooling.policies import PlacementPolicy, make_policy
from schedlab.gpooling.state import FULL, ClusterState, Grant, Request


class NoRoomError(BadInputError):
    """The request fits some device of the pool, just not now (retry later or release some)."""


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
        self._lock = threading.Lock()

    def create(self, memory: int, compute: float, model: str | None = None) -> VirtualDevice:
        """Place a new virtual device; refuse clearly when it can never fit or not fit now."""
        request = Request(int(memory), to_milli(compute), 1, model)
        with self._lock:
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
            self.state.take(request, grants)
            return self._register(grants[0])

    def _register(self, grant: Grant) -> VirtualDevice:
        vid = f"vdev-{next(self._ids)}"
        device = self.state.devices[grant.device]
        region = self.runtime_dir / f"{vid}.shm"
        shm.create_region(region, grant.memory, grant.milli / FULL)
        vdev = VirtualDevice(vid, device.id, device.node, device.index, device.model,
                             grant.memory, grant.milli / FULL, str(region))
        self._vdevs[vid], self._grants[vid] = vdev, grant
        return vdev

    def get(self, vid: str) -> VirtualDevice:
        with self._lock:
            return self._get(vid)

    def _get(self, vid: str) -> VirtualDevice:
        if vid not in self._vdevs:
            raise UnknownNameError("virtual device", vid, sorted(self._vdevs) or ["(none)"])
        return self._vdevs[vid]

    def list(self) -> list[VirtualDevice]:
        with self._lock:
            return list(self._vdevs.values())

    def resize(self, vid: str, memory: int | None = None,
               compute: float | None = None) -> VirtualDevice:
        """Grow or shrink in place, live: the shim sees the new quota on its next call."""
        with self._lock:
            vdev = self._get(vid)
            grant = self._grants[vid]
            new_memory = grant.memory if memory is None else int(memory)
            new_milli = grant.milli if compute is None else to_milli(compute)
            used = self._read_usage(vdev).get("memory_used", 0)
            if new_memory < used:
                raise BadInputError(f"{vid} holds {used} bytes; cannot shrink below that",
                                    field="memory")
            if new_memory < 0:
                raise BadInputError("memory must not be negative", field="memory")
            self._grants[vid] = self.state.resize(grant, new_memory, new_milli)
            if vdev.region:
                shm.update_quota(vdev.region, new_memory, new_milli / FULL)
            vdev.memory, vdev.compute = new_memory, new_milli / FULL
            return vdev

    def release(self, vid: str) -> VirtualDevice:
        with self._lock:
            vdev = self._get(vid)
            self.state.give_back([self._grants.pop(vid)])
            del self._vdevs[vid]
            if vdev.region:
                Path(vdev.region).unlink(missing_ok=True)
            return vdev

    def _read_usage(self, vdev: VirtualDevice) -> dict[str, Any]:
        if vdev.region and Path(vdev.region).is_file():
            vdev.usage = shm.read_region(vdev.region)
        return vdev.usage

    def usage(self, vid: str) -> dict[str, Any]:
        """The data plane's counters for ``vid`` (read from its region)."""
        with self._lock:
            return dict(self._read_usage(self._get(vid)))

    def report(self, vid: str, usage: dict[str, Any]) -> VirtualDevice:
        """Usage pushed by an agent on another host (where the region is not visible)."""
        with self._lock:
            vdev = self._get(vid)
            vdev.usage = {k: v for k, v in usage.items() if isinstance(v, int | float)}
            return vdev

    def stats(self) -> dict[str, Any]:
        """Allocated compute and memory, and how fragmented what is left is."""
        with self._lock:
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
