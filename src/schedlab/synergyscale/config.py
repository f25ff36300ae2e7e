"""``EngineConfig``: the fields of :func:`~schedlab.synergyscale.engine.initialize`'s config.

Kept free of torch so that a bad config file is refused (one line) before torch is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["EngineConfig"]

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def _size(value):
    """An int, a float > 1 (bytes), a fraction in (0, 1], or a size such as '8MB'."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip().upper().replace(" ", "")
        number = text.rstrip("KMGTIB")
        unit = text[len(number) :]
        try:
            if unit not in _UNITS:
                raise ValueError
            return int(float(number) * _UNITS[unit])
        except ValueError:
            raise ValueError(f"not a size: {value!r} (use e.g. 8MB, 2GiB)") from None
    if isinstance(value, bool) or value <= 0:
        raise ValueError(f"must be positive, got {value!r}")
    if isinstance(value, float) and value > 1:
        return int(value)
    return value


class EngineConfig(BaseModel):
    """How :func:`initialize` offloads. Unknown fields are refused (one line naming them)."""

    model_config = ConfigDict(extra="forbid")

    device_budget: int | float | str | None = Field(
        None,
        description="device-tier bytes: an int, a size such as '8MB', or a fraction in "
        "(0, 1] of the model states (16 B/param); None = unlimited",
    )
    tier: Literal["host", "nvme"] = "host"
    nvme_dir: Path | None = None
    schedule: Literal["overlap", "offload-only"] = "overlap"
    prefetch_depth: int | Literal["auto"] = Field(
        "auto",
        description="units fetched ahead (0-16), or 'auto': 2 for the first step, then the "
        "planner's window (overlap.choose_depth on the first step's measured per-unit compute, "
        "transfer and optimizer times) when fetches run on a copy thread",
    )
    io_threads: int = Field(2, ge=1, le=64)
    precision: Literal["fp32", "bf16"] = "fp32"
    activation_checkpointing: list[str] = Field(default_factory=list)
    device: str = "cpu"
    direct_io: bool = True
    keep_nvme_files: bool = False
    gradient_accumulation_steps: int = Field(
        1,
        ge=1,
        le=65536,
        description="backward passes per step(): gradients are summed on the host, as autograd "
        "sums them into .grad",
    )
    gradient_clipping: float | None = Field(
        None,
        gt=0,
        description="clip the global gradient norm to this value before the optimizer steps, "
        "as torch.nn.utils.clip_grad_norm_ does (steps then wait for the whole backward)",
    )
    async_fetch: bool | None = Field(
        None,
        description="fetch on the I/O pool (True) or inline (False); None = pool for NVMe, "
        "CUDA or an emulated link, inline for a host tier on CPU, where a memcpy is cheaper "
        "than a thread hand-off",
    )
    link_bandwidth: int | float | str | None = Field(
        None,
        description="emulate a host<->device link of this many bytes/s per direction on a CPU "
        "device (e.g. '25GB' for PCIe 4.0 x16): one copy thread per direction, as a GPU's copy "
        "engines, and each copy lasts at least bytes / bandwidth (slept, using no CPU, as DMA "
        "uses no compute); None = copies as fast as memcpy",
    )

    @field_validator("prefetch_depth")
    @classmethod
    def _depth(cls, value):
        if value != "auto" and not 0 <= value <= 16:
            raise ValueError(f"must be 0-16 or 'auto', got {value!r}")
        return value

    @field_validator("link_bandwidth")
    @classmethod
    def _link(cls, value):
        if value is None:
            return None
        if not isinstance(value, str) and not isinstance(value, bool) and 0 < value <= 1:
            raise ValueError(f"bytes per second, not a fraction: {value!r} (e.g. '25GB')")
        return int(_size(value))

    @field_validator("device_budget")
    @classmethod
    def _budget(cls, value):
        return _size(value)

    @field_validator("device")
    @classmethod
    def _device(cls, value: str) -> str:
        if value != "cpu" and not value.startswith("cuda"):
            raise ValueError(f"must be 'cpu' or 'cuda[:N]', got {value!r}")
        return value

    @model_validator(mode="after")
    def _nvme(self):
        if self.tier == "nvme" and self.nvme_dir is None:
            raise ValueError("nvme_dir: tier 'nvme' needs an nvme_dir")
        return self
