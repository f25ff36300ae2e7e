"""The site's storage, as a client sees it: which tier backs a path, and how fast that tier is.

Paper: IFlux (../shared/papers/10-iflux.md) is evaluated against a shared parallel file system
(PFS). We have no PFS, so a plain directory stands in for it and its speed is *modelled*: a
:class:`StorageModel` (shared bandwidth, IOPS, per-operation metadata latency) enforced by a
token bucket in the I/O client (our data loaders, the stager, and fio's own ``rate`` options).

Which model applies is decided the way a real client decides it: from the mount table. A path
is resolved through ``/proc/self/mountinfo`` to (device, path inside that file system), so when
IFlux bind-mounts a RAM-disk directory over a PFS path inside the job's mount namespace, the
same job code, on the same path, suddenly talks to the RAM disk. The job never learns of IFlux.
This module imports only the standard library, so jobs that use it start fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

SITE_ENV = "IFLUX_SITE"


@dataclass(frozen=True)
class StorageModel:
    """Modelled speed of one storage tier for one client node. 0 means "not throttled"."""

    bandwidth: float = 0.0     # bytes/s, shared by all streams of the node
    iops: float = 0.0          # data operations/s, shared
    meta_latency: float = 0.0  # seconds per metadata op (open/create/stat), per stream

    def fio_options(self, numjobs: int = 1, block: int = 4096) -> list[str]:
        """fio's own throttle that imposes this model on ``numjobs`` workers of ``block`` bytes.

        fio accepts either a byte rate or an op rate, so both limits become one op rate.
        """
        limits = [self.iops] if self.iops else []
        if self.bandwidth:
            limits.append(self.bandwidth / block)
        if not limits:
            return []
        return [f"--rate_iops={max(1, int(min(limits) / numjobs))}"]


#: documented defaults: a PFS as one node sees it under load, node-local NVMe, a network BB
DEFAULT_MODELS: dict[str, StorageModel] = {
    "pfs": StorageModel(bandwidth=128 << 20, iops=1_000, meta_latency=1e-3),
    "nvme": StorageModel(bandwidth=2 << 30, iops=200_000, meta_latency=2e-5),
    "shared-bb": StorageModel(bandwidth=1.5 * (1 << 30), iops=50_000, meta_latency=1e-4),
    "ramdisk": StorageModel(),
    "gpu-direct": StorageModel(),
}


@dataclass
class Site:
    """Storage roots of one node and their models; saved as JSON and found via $IFLUX_SITE."""

    roots: dict[str, str]
    models: dict[str, StorageModel] = field(default_factory=lambda: dict(DEFAULT_MODELS))

    def model(self, tier: str) -> StorageModel:
        return self.models.get(tier, StorageModel())

    def to_json(self) -> str:
        return json.dumps(dict(roots=self.roots,
                               models={k: asdict(v) for k, v in self.models.items()}), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Site:
        raw = json.loads(text)
        models = {k: StorageModel(**v) for k, v in raw.get("models", {}).items()}
        return cls(dict(raw["roots"]), models or dict(DEFAULT_MODELS))

    @classmethod
    def under(cls, base: str | Path, ram_base: str | Path | None = None,
              pfs: str | Path | None = None) -> Site:
        """A self-contained site in ``base`` (RAM-backed tiers under ``ram_base``/dev/shm).

        ``pfs`` names a real shared file system to use as the PFS (e.g. a mounted
        :mod:`schedlab.iflux.netfs`); its speed is then measured, not modelled."""
        base = Path(base).resolve()
        tag = hashlib.sha1(str(base).encode()).hexdigest()[:8]  # two sites never share RAM dirs
        ram = Path(ram_base) if ram_base else Path("/dev/shm") / f"iflux-{base.name}-{tag}"
        roots = {"pfs": Path(pfs) if pfs else base / "pfs", "nvme": base / "nvme",
                 "shared-bb": base / "shared-bb",
                 "ramdisk": ram / "ramdisk", "gpu-direct": ram / "gpu-direct"}
        for root in roots.values():
            root.mkdir(parents=True, exist_ok=True)
        site = cls({k: str(v) for k, v in roots.items()})
        if pfs:
            site.models["pfs"] = StorageModel()  # a real file system: nothing to model
        return site


def has_gpu() -> bool:
    """A compute GPU on this node (an NVIDIA device node, or AMD's ``/dev/kfd``). Without one
    there is no gpu-direct tier to allocate: its default capacity is 0 and no Slurm pool is
    made. A DRM render node alone does not count: VMs (virtio-gpu) and display-only iGPUs
    have one, and no GPU-direct storage path."""
    dev = Path("/dev")
    return any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists()


def load_site(path: str | Path | None = None) -> Site | None:
    path = path or os.environ.get(SITE_ENV)
    if not path:
        return None
    return Site.from_json(Path(path).read_text(encoding="utf-8"))


def _unescape(text: str) -> str:
    return text.encode().decode("unicode_escape") if "\\" in text else text


def read_mountinfo(pid: str = "self") -> list[tuple[str, str, str]]:
    """(device, root inside the file system, mount point) of every mount, in mount order."""
    entries = []
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            parts = line.split()
            entries.append((parts[2], _unescape(parts[3]), _unescape(parts[4])))
    return entries


def location(path: str | Path, mounts: list[tuple[str, str, str]] | None = None
             ) -> tuple[str, str]:
    """(device, path within that device's file system) that backs ``path`` right now."""
    real = os.path.realpath(path)
    best: tuple[str, str, str] | None = None
    for dev, root, point in mounts if mounts is not None else read_mountinfo():
        if real == point or real.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) >= len(best[2]):
                best = (dev, root, point)
    if best is None:
        return "", real
    dev, root, point = best
    rest = real[len(point.rstrip("/")):]
    return dev, (root.rstrip("/") + rest) or "/"


def _inside(child: str, parent: str) -> bool:
    return child == parent or child.startswith(parent.rstrip("/") + "/")


class Classifier:
    """Which site tier backs a path; cached per directory because mountinfo is re-read rarely."""

    def __init__(self, site: Site | None) -> None:
        self.site = site
        self.mounts = read_mountinfo()
        self.roots = [(name, location(root, self.mounts)) for name, root in
                      (site.roots.items() if site else [])]
        self.cache: dict[str, str] = {}

    def tier(self, path: str | Path) -> str:
        directory = os.path.dirname(os.path.abspath(path)) if not os.path.isdir(path) \
            else os.path.abspath(path)
        if directory not in self.cache:
            dev, inner = location(directory, self.mounts)
            hits = [(len(r), name) for name, (rdev, r) in self.roots
                    if rdev == dev and _inside(inner, r)]
            self.cache[directory] = max(hits)[1] if hits else "local"
        return self.cache[directory]


class Throttle:
    """A token bucket for one tier: bytes and ops share a virtual clock; metadata is latency.

    Sleeping until an absolute virtual time (rather than for each op's cost) keeps the long-run
    rate exact even though each sleep overshoots by the scheduler's granularity.
    """

    def __init__(self, model: StorageModel) -> None:
        self.model = model
        self.lock = threading.Lock()
        self.busy_until = 0.0

    def charge(self, nbytes: int = 0, ops: int = 0) -> None:
        m = self.model
        cost = (nbytes / m.bandwidth if m.bandwidth else 0.0) + (ops / m.iops if m.iops else 0.0)
        if cost <= 0:
            return
        with self.lock:
            now = time.perf_counter()
            self.busy_until = max(now, self.busy_until) + cost
            wait = self.busy_until - now
        if wait > 2e-4:
            time.sleep(wait)

    def meta(self, ops: int = 1) -> None:
        if self.model.meta_latency and ops:
            time.sleep(self.model.meta_latency * ops)


class Client:
    """A POSIX client that pays the modelled cost of whichever tier backs each path."""

    def __init__(self, site: Site | None = None) -> None:
        self.site = site if site is not None else load_site()
        self.classifier = Classifier(self.site)
        self.throttles: dict[str, Throttle] = {}
        self._lock = threading.Lock()

    def throttle(self, path: str | Path) -> Throttle:
        """The tier's one token bucket: parallel copiers (stage-in, flush) must share it, or a
        race would give a tier two buckets and twice its modelled bandwidth, silently."""
        tier = self.classifier.tier(path)
        with self._lock:
            if tier not in self.throttles:
                model = self.site.model(tier) if self.site else StorageModel()
                self.throttles[tier] = Throttle(model)
            return self.throttles[tier]

    def read(self, path: str | Path, block: int = 1 << 20) -> bytes:
        throttle = self.throttle(path)
        throttle.meta()
        with open(path, "rb") as handle:
            data = handle.read()
        throttle.charge(len(data), max(1, -(-len(data) // block)))
        return data

    def write(self, path: str | Path, data: bytes, block: int = 1 << 20,
              fsync: bool = False) -> None:
        throttle = self.throttle(path)
        throttle.meta()
        with open(path, "wb") as handle:
            handle.write(data)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        throttle.charge(len(data), max(1, -(-len(data) // block)))

    def listdir(self, path: str | Path) -> list[str]:
        self.throttle(path).meta()
        return sorted(os.listdir(path))

    def stat(self, path: str | Path) -> os.stat_result:
        self.throttle(path).meta()
        return os.stat(path)
