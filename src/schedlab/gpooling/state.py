"""What is free on every physical device: the one state the placement policies read.

gPooling (../shared/papers/14-gpooling.md) slices each accelerator along two dimensions, memory
(bytes) and compute (a share of the device's time). Compute is kept in integer thousandths
("milli", as in the Alibaba trace's ``gpu_milli``) so that shares add up exactly and a device is
never over-committed by rounding. Both the control plane and the simulator keep their books
here, so the same invariants hold in both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.gpooling.devices import PhysicalDevice

FULL = 1000  # one whole device, in milli


@dataclass(frozen=True)
class Request:
    """What a virtual device asks for: per-device memory and compute, on ``count`` devices."""

    memory: int  # bytes per device
    milli: int  # compute per device, thousandths of one device
    count: int = 1  # gang size (multi-device jobs take whole devices in practice)
    model: str | None = None  # only devices of this model, if given

    def __post_init__(self) -> None:
        if not 0 < self.milli <= FULL:
            raise BadInputError(f"compute must be in (0, 1], got {self.milli / FULL}",
                                field="compute")
        if self.memory < 0:
            raise BadInputError("memory must not be negative", field="memory")
        if self.count < 1:
            raise BadInputError("count must be at least 1", field="count")


@dataclass(frozen=True)
class Grant:
    """A slice of one physical device given to a virtual device (at least what was asked)."""

    device: int
    memory: int
    milli: int


class ClusterState:
    """Free memory and compute per device, with checked take/give-back."""

    def __init__(self, devices: Sequence[PhysicalDevice]) -> None:
        if not devices:
            raise BadInputError("the pool has no devices", field="inventory")
        self.devices = list(devices)
        self.total_memory = np.array([d.spec.memory for d in devices], dtype=np.int64)
        self.free_memory = self.total_memory.copy()
        self.free_milli = np.full(len(devices), FULL, dtype=np.int64)
        models = sorted({d.model for d in devices})
        self.model_names = models
        self.model_code = np.array([models.index(d.model) for d in devices], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.devices)

    def eligible(self, request: Request) -> np.ndarray:
        """Devices whose model is allowed and whose *total* capacity could ever hold one slice."""
        mask = self.total_memory >= request.memory
        if request.model is not None:
            code = self.model_names.index(request.model) if request.model in self.model_names \
                else -1
            mask &= self.model_code == code
        return mask

    def fits_now(self, request: Request) -> np.ndarray:
        """Devices that can hold one slice of ``request`` right now."""
        return (self.eligible(request) & (self.free_memory >= request.memory)
                & (self.free_milli >= request.milli))

    def ever_fits(self, request: Request) -> bool:
        """Whether an empty pool could hold the request at all (else refuse it, never queue)."""
        return int(self.eligible(request).sum()) >= request.count

    def check(self, request: Request, grants: Sequence[Grant]) -> None:
        """Raise if ``grants`` do not satisfy ``request`` or do not fit: a policy bug."""
        if len(grants) != request.count or len({g.device for g in grants}) != len(grants):
            raise SchedlabError(f"placement gave {len(grants)} distinct devices for a gang of "
                                f"{request.count}")
        eligible = self.eligible(request)
        for g in grants:
            if not 0 <= g.device < len(self) or not eligible[g.device]:
                raise SchedlabError(f"placement chose ineligible device {g.device}")
            if g.memory < request.memory or g.milli < request.milli:
                raise SchedlabError("placement granted less than the request")
            if g.memory > self.free_memory[g.device] or g.milli > self.free_milli[g.device]:
                raise SchedlabError(f"placement over-commits device {g.device}")

    def take(self, request: Request, grants: Sequence[Grant]) -> None:
        self.check(request, grants)
        for g in grants:
            self.free_memory[g.device] -= g.memory
            self.free_milli[g.device] -= g.milli

    def give_back(self, grants: Sequence[Grant]) -> None:
        for g in grants:
            self.free_memory[g.device] += g.memory
            self.free_milli[g.device] += g.milli
        if (self.free_memory > self.total_memory).any() or (self.free_milli > FULL).any():
            raise SchedlabError("a device got back more than it has: double release")

    def resize(self, grant: Grant, memory: int, milli: int) -> Grant:
        """Grow or shrink a grant in place; raises BadInputError when the device lacks room."""
        d = grant.device
        extra_memory, extra_milli = memory - grant.memory, milli - grant.milli
        if extra_memory > self.free_memory[d] or extra_milli > self.free_milli[d]:
            raise BadInputError(
                f"device {self.devices[d].id} has {self.free_memory[d] / 2**30:.2f} GiB and "
                f"{self.free_milli[d] / FULL:.3f} compute free; cannot grow in place",
                field="memory" if extra_memory > self.free_memory[d] else "compute")
        self.free_memory[d] -= extra_memory
        self.free_milli[d] -= extra_milli
        return Grant(d, memory, milli)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        return self.free_memory.copy(), self.free_milli.copy()
