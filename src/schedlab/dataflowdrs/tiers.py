"""Storage tiers: node-local tmpfs, local disk and a bandwidth-throttled "shared file system".

DataFlowDrs (paper 09, ../shared/papers/09-dataflowdrs.md) ranks bottlenecks for combinations
of task parallelism and storage tier. This machine has one disk and no parallel file system, so
two tiers are *modelled*: every tier is a real directory, but reads and writes under the local
and shared directories pay ``latency + bytes / bandwidth`` inside the system call, through the
LD_PRELOAD shim ``throttle.c`` (compiled on first use with the system C compiler). Bandwidth is
shared by all processes through a FIFO server clock kept in a lock file, so concurrent tasks
contend as on a real shared file system. The tracer therefore sees genuinely slow calls.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from schedlab.core.errors import ConfigError, MissingDependencyError
from schedlab.core.registry import lookup

_SOURCE = Path(__file__).with_name("throttle.c")


@dataclass(frozen=True)
class Tier:
    """One storage tier. ``bandwidth`` in bytes/s (None: unthrottled), ``latency`` s per call."""

    name: str
    bandwidth: float | None
    latency: float
    description: str = ""


#: Scaled-down tiers (documented in docs/systems/dataflowdrs.md): workflows here move MBs, not
#: TBs, so bandwidths are scaled so a shared-FS stage costs about as much, relative to compute,
#: as it does on a cluster.
DEFAULT_TIERS: dict[str, Tier] = {
    "tmpfs": Tier("tmpfs", None, 0.0, "node-local tmpfs (/dev/shm), real and unthrottled"),
    "local": Tier("local", 300e6, 15e-6, "local disk (real directory, NVMe-like model)"),
    "shared": Tier("shared", 25e6, 400e-6, "shared file system (real directory, throttled)"),
}
TIER_ORDER = ("tmpfs", "local", "shared")  # fastest first


@dataclass
class TierLayout:
    """Where each tier lives for one run, plus the throttle state files the shim shares."""

    roots: dict[str, Path]
    tiers: dict[str, Tier] = field(default_factory=lambda: dict(DEFAULT_TIERS))
    state_dir: Path | None = None

    def root(self, tier: str) -> Path:
        return lookup(self.roots, "tier", tier)

    def tier_of(self, path: str | Path) -> str | None:
        """The tier a path lives on (longest matching root), or None."""
        text = str(path)
        best, best_len = None, -1
        for name, root in self.roots.items():
            prefix = str(root)
            if (text == prefix or text.startswith(prefix + os.sep)) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
        return best

    def throttle_spec(self) -> str:
        """The SCHEDLAB_THROTTLE value: ``PREFIX=BW,LAT,STATE`` for each throttled tier."""
        if self.state_dir is None:
            raise ConfigError("tier layout has no state directory", field="state_dir")
        items = []
        for name, root in self.roots.items():
            tier = self.tiers[name]
            if tier.bandwidth is None:
                continue
            state = self.state_dir / f"{name}.clock"
            items.append(f"{root}={tier.bandwidth:.6g},{tier.latency:.6g},{state}")
        return ";".join(items)

    def reset_clocks(self) -> None:
        """Forget queued work from a previous run so runs do not slow each other down."""
        if self.state_dir is not None:
            for clock in self.state_dir.glob("*.clock"):
                clock.unlink(missing_ok=True)

    def as_dict(self) -> dict:
        return {name: dict(root=str(root), bandwidth=self.tiers[name].bandwidth,
                           latency=self.tiers[name].latency)
                for name, root in self.roots.items()}


def make_layout(workdir: Path, tiers: dict[str, Tier] | None = None,
                create: bool = True) -> TierLayout:
    """The three tier directories for a run under ``workdir`` (tmpfs under /dev/shm).

    ``create=False`` only names them: enough for modelled (synthetic) traces.
    """
    workdir = Path(workdir).resolve()
    shm = Path("/dev/shm")
    tag = hashlib.sha1(str(workdir).encode()).hexdigest()[:12]
    tmpfs_root = shm / f"schedlab-dfd-{tag}" if shm.is_dir() else workdir / "tmpfs"
    roots = {"tmpfs": tmpfs_root, "local": workdir / "local", "shared": workdir / "shared"}
    state = workdir / ".throttle"
    if create:
        for root in [*roots.values(), state]:
            root.mkdir(parents=True, exist_ok=True)
    return TierLayout(roots=roots, tiers=dict(tiers or DEFAULT_TIERS), state_dir=state)


def remove_layout(layout: TierLayout) -> None:
    """Delete the tier directories (tmpfs lives outside the work directory, so say so)."""
    for root in layout.roots.values():
        shutil.rmtree(root, ignore_errors=True)


def throttle_library() -> Path:
    """Compile throttle.c once per source version into the user cache; return the .so path.

    Compiled to a temporary name and renamed, so concurrent first uses never see half a file.
    """
    source = _SOURCE.read_bytes()
    digest = hashlib.sha1(source).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "schedlab"
    target = cache / f"libdfd-throttle-{digest}.so"
    if target.is_file():
        return target
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise MissingDependencyError("the throttled tier needs a C compiler (cc/gcc)",
                                     hint="apt-get install gcc")
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".libdfd-", suffix=".so", dir=cache)
    os.close(fd)
    try:
        subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", tmp, str(_SOURCE), "-ldl"],
                       check=True, capture_output=True, text=True)
        os.replace(tmp, target)
    except subprocess.CalledProcessError as exc:
        raise MissingDependencyError(
            f"compiling the throttle shim failed: {exc.stderr[:300]}") from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
