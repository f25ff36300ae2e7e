"""Physical accelerators of several kinds, and the backends that discover them.

gPooling (../shared/papers/14-gpooling.md) is hardware-agnostic: the control plane sees every
accelerator as (kind, memory, compute) and talks to vendors only through a backend. NVIDIA
devices come from ``nvidia-smi``, AMD devices from ``rocm-smi``, and any inventory (a test bed,
the Alibaba node list, a what-if cluster) from a static spec or file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from schedlab.core.errors import BadInputError, UnknownNameError

GIB = 1 << 30


@dataclass(frozen=True)
class AcceleratorSpec:
    """One accelerator model. ``speed`` is relative throughput (T4 = 1), used for reporting."""

    model: str
    vendor: str
    memory: int  # bytes
    speed: float = 1.0


#: models of the Alibaba GPU-sharing cluster (G2/G3 are its anonymised kinds) and a few others
CATALOGUE: dict[str, AcceleratorSpec] = {s.model: s for s in (
    AcceleratorSpec("T4", "nvidia", 16 * GIB, 1.0),
    AcceleratorSpec("P100", "nvidia", 16 * GIB, 1.2),
    AcceleratorSpec("V100M16", "nvidia", 16 * GIB, 1.9),
    AcceleratorSpec("V100M32", "nvidia", 32 * GIB, 1.9),
    AcceleratorSpec("A10", "nvidia", 24 * GIB, 2.1),
    AcceleratorSpec("G2", "nvidia", 16 * GIB, 1.5),
    AcceleratorSpec("G3", "nvidia", 32 * GIB, 2.5),
    AcceleratorSpec("A100", "nvidia", 80 * GIB, 4.5),
    AcceleratorSpec("H100", "nvidia", 80 * GIB, 8.0),
    AcceleratorSpec("MI100", "amd", 32 * GIB, 2.0),
    AcceleratorSpec("MI250", "amd", 64 * GIB, 3.5),
)}


@dataclass(frozen=True)
class PhysicalDevice:
    """One accelerator in the pool; ``index`` is its ordinal on its node (CUDA_VISIBLE_DEVICES)."""

    id: str
    node: str
    index: int
    spec: AcceleratorSpec

    @property
    def model(self) -> str:
        return self.spec.model


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}


def parse_size(text: str | int, field: str = "memory") -> int:
    """'10GiB', '512MiB', '1.5G', '4096' (bytes) -> bytes; anything else is a BadInputError."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise BadInputError("size must not be negative", field=field)
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise BadInputError(f"'{text}' is not a size (e.g. 10GiB, 512MiB, 4096)", field=field)
    unit = (match.group(2) or "").lower().removesuffix("b")
    return int(float(match.group(1)) * _UNITS[unit])


def spec_for(model: str) -> AcceleratorSpec:
    """The catalogue entry for ``model``; unknown models are refused with the valid list."""
    key = model.strip()
    if key not in CATALOGUE:
        raise UnknownNameError("accelerator model", key, sorted(CATALOGUE))
    return CATALOGUE[key]


class Backend(Protocol):
    """Finds the physical accelerators of one vendor (or a static description of them)."""

    name: str

    def discover(self) -> list[PhysicalDevice]: ...


def _model_from_name(name: str, memory: int, vendor: str) -> AcceleratorSpec:
    """Map a vendor's product name to a catalogue entry, or describe an unlisted model."""
    compact = re.sub(r"[^A-Za-z0-9]", "", name).upper()
    if "V100" in compact:  # product names say "V100-SXM2-32GB"; the catalogue splits by memory
        compact += "V100M32" if memory > 20 * GIB else "V100M16"
    matches = [m for m, spec in CATALOGUE.items() if spec.vendor == vendor and m.upper() in compact]
    if matches:
        spec = CATALOGUE[max(matches, key=len)]  # "A100" must not read as "A10"
        return AcceleratorSpec(spec.model, vendor, memory or spec.memory, spec.speed)
    return AcceleratorSpec(name.strip() or "unknown", vendor, memory, 1.0)


def parse_nvidia_smi(text: str, node: str = "local") -> list[PhysicalDevice]:
    """Parse ``nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits``."""
    devices = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit():
            raise BadInputError(f"unexpected nvidia-smi line: {line!r}", line=lineno)
        try:
            memory = int(float(parts[2]) * (1 << 20))
        except ValueError as exc:
            raise BadInputError(f"memory.total '{parts[2]}' is not a number", line=lineno,
                                field="memory.total") from exc
        spec = _model_from_name(parts[1], memory, "nvidia")
        devices.append(PhysicalDevice(f"{node}/gpu{parts[0]}", node, int(parts[0]), spec))
    return devices


def parse_rocm_smi(text: str, node: str = "local") -> list[PhysicalDevice]:
    """Parse ``rocm-smi --showproductname --showmeminfo vram --csv`` (card, VRAM total, name)."""
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(text)))
    devices = []
    for lineno, row in enumerate(rows, start=2):
        card = (row.get("device") or "").replace("card", "")
        total = row.get("VRAM Total Memory (B)")
        if not card.isdigit() or total is None or not total.strip().isdigit():
            raise BadInputError("expected 'device' and 'VRAM Total Memory (B)' columns",
                                line=lineno)
        name = row.get("Card series") or row.get("Card SKU") or "AMD"
        spec = _model_from_name(name, int(total), "amd")
        devices.append(PhysicalDevice(f"{node}/gpu{card}", node, int(card), spec))
    return devices


class NvidiaBackend:
    """NVIDIA GPUs of this host, via nvidia-smi (absent tool = no devices, not an error)."""

    name = "nvidia"

    def discover(self) -> list[PhysicalDevice]:
        if shutil.which("nvidia-smi") is None:
            return []
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=30, check=False)
        return parse_nvidia_smi(done.stdout) if done.returncode == 0 else []


class RocmBackend:
    """AMD GPUs of this host, via rocm-smi."""

    name = "rocm"

    def discover(self) -> list[PhysicalDevice]:
        if shutil.which("rocm-smi") is None:
            return []
        done = subprocess.run(["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--csv"],
                              capture_output=True, text=True, timeout=30, check=False)
        return parse_rocm_smi(done.stdout) if done.returncode == 0 else []


class StaticBackend:
    """A described inventory: ``'T4:2,V100M32:4'`` (one node each) or ``node=T4:2;...``."""

    name = "static"

    def __init__(self, description: str) -> None:
        self.description = description

    def discover(self) -> list[PhysicalDevice]:
        devices: list[PhysicalDevice] = []
        groups = [g for g in re.split(r"[;,]", self.description) if g.strip()]
        if not groups:
            raise BadInputError("empty inventory; write e.g. 'T4:2,V100M32:4'", field="inventory")
        for n, group in enumerate(groups):
            node, _, kinds = group.strip().rpartition("=")
            model, _, count = kinds.partition(":")
            if not count.strip().isdigit() or int(count) < 1:
                raise BadInputError(f"'{group.strip()}' is not MODEL:COUNT", field="inventory")
            spec = spec_for(model)
            node = node.strip() or f"node{n}"
            devices += [PhysicalDevice(f"{node}/gpu{i}", node, i, spec)
                        for i in range(int(count))]
        return devices


def read_node_list(path: str | Path, limit: int | None = None) -> list[PhysicalDevice]:
    """Devices from an Alibaba ``gpu2023_node_list``-style CSV (sn, gpu, model columns)."""
    from schedlab.core.io import read_frame

    frame = read_frame(path, required={"sn": str, "gpu": int, "model": str})
    devices: list[PhysicalDevice] = []
    for line, row in enumerate(frame.iter_rows(named=True), start=2):
        if limit is not None and len(devices) >= limit:
            break
        for column in ("sn", "gpu", "model"):
            if row[column] is None:
                raise BadInputError("missing value", path=path, line=line, field=column)
        if row["gpu"] < 0:
            raise BadInputError("gpu count is negative", path=path, line=line, field="gpu")
        try:
            spec = spec_for(str(row["model"]))
        except UnknownNameError as exc:
            raise BadInputError(str(exc), path=path, line=line, field="model") from exc
        devices += [PhysicalDevice(f"{row['sn']}/gpu{i}", str(row["sn"]), i, spec)
                    for i in range(row["gpu"])]
    return devices[:limit] if limit is not None else devices


BACKENDS = {"nvidia": NvidiaBackend, "rocm": RocmBackend}


def discover(inventory: str | None = None) -> list[PhysicalDevice]:
    """The pool's devices: a static inventory if given, else every vendor backend's devices."""
    if inventory:
        path = Path(inventory)
        if path.suffix == ".csv":
            return read_node_list(path)
        return StaticBackend(inventory).discover()
    found: list[PhysicalDevice] = []
    for backend in BACKENDS.values():
        found += backend().discover()
    return found
