"""Per-attempt memory cgroups for the real executor: cgroup v2 where delegated, else cgroup v1.

X-Bucket (../shared/papers/15-xbucket.md) kills a task that exceeds its allocation and retries
it larger; a kernel limit is exact where a sampling watchdog can miss a short spike in a child.
Many hosts (older distributions, containers, this one) still mount the v1 ``memory``
controller and no v2 memory controller, so both interfaces are spoken:

=========  ==========================  ===========================  =========================
version    limit                       peak                         OOM kill seen in
=========  ==========================  ===========================  =========================
v2         ``memory.max`` (+ swap 0)   ``memory.peak``              ``memory.events`` oom_kill
v1         ``memory.limit_in_bytes``   ``memory.max_usage_in_bytes``  ``memory.oom_control``
           (+ ``memory.memsw.*``)                                   oom_kill
=========  ==========================  ===========================  =========================

Mounts are read from ``/proc/self/mountinfo`` and our own group from ``/proc/self/cgroup``
(both injectable, so detection is testable on a fake tree); a probe child proves that we may
create groups and set a limit before any task relies on it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

_FILES = {  # version -> (limit, swap limit, peak)
    2: ("memory.max", "memory.swap.max", "memory.peak"),
    1: ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max_usage_in_bytes"),
}


@dataclass(frozen=True)
class MemoryCgroups:
    """Where attempt groups are created (``parent``) and which interface they speak."""

    parent: Path
    version: int

    def describe(self) -> str:
        limit, _, peak = _FILES[self.version]
        return f"cgroup v{self.version} {limit} + {peak}"

    def create(self, name: str, limit_mb: float) -> Path | None:
        """A fresh group limited to ``limit_mb`` with swap off, or None when the kernel refuses."""
        limit, swap, _ = _FILES[self.version]
        group = self.parent / name
        limit_bytes = str(int(limit_mb * 2**20))
        try:
            group.mkdir()
            (group / limit).write_text(limit_bytes)
            with contextlib.suppress(OSError):  # absent when swap accounting is off
                (group / swap).write_text("0" if self.version == 2 else limit_bytes)
        except OSError:
            self.remove(group)
            return None
        return group

    def peak_mb(self, group: Path) -> float:
        """The group's peak charge in MB (includes page cache the task caused), 0 if unknown."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int((group / _FILES[self.version][2]).read_text().split()[0]) / 2**20
        return 0.0

    def oom_killed(self, group: Path) -> bool:
        """Whether the kernel OOM-killed a process of the group (at its limit)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in (group / name).read_text().splitlines():
                key, value = line.split()
                if key == "oom_kill" and int(value) > 0:
                    return True
        return False

    def remove(self, group: Path) -> None:
        """Kill whatever is left in the group (a grandchild that outlived its parent) and remove
        it; never raises: cleanup must not take the dispatcher down."""
        for _ in range(50):
            try:
                pids = (group / "cgroup.procs").read_text().split()
            except OSError:
                pids = []
            for pid in pids:
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            try:
                group.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.002)  # killed processes leave the group once reaped


def _mounts(mountinfo: str) -> list[tuple[str, str, str, str]]:
    """(root, mount point, fs type, super options) of every mount in a mountinfo text."""
    found = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if sep and len(fields) >= 5 and len(tail) >= 3:
            found.append((fields[3], fields[4], tail[0], tail[2]))
    return found


def _own(mount: str, root: str, path: str) -> Path:
    """Our group's directory: the path in /proc/self/cgroup seen through a mount of ``root``."""
    if root != "/" and (path == root or path.startswith(root.rstrip("/") + "/")):
        path = path[len(root.rstrip("/")):]
    return Path(mount) / path.lstrip("/")


def _probe(candidate: MemoryCgroups) -> str:
    """Empty when a child group can be created and limited; else why not."""
    probe = candidate.parent / f"xbucket-probe-{os.getpid()}"
    limit = _FILES[candidate.version][0]
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot create a group in {candidate.parent} ({exc.strerror or exc})"
    try:
        if not (probe / limit).exists():
            return f"memory controller not enabled in {candidate.parent}/cgroup.subtree_control"
        (probe / limit).write_text(str(2**40))
        return ""
    except OSError as exc:
        return f"{limit} not writable ({exc.strerror or exc})"
    finally:
        candidate.remove(probe)


def _v2(mounts: list[tuple[str, str, str, str]], groups: list[str]) -> tuple[Path | None, str]:
    unified = [line.split("::", 1)[1] for line in groups if line.startswith("0::")]
    points = [(root, point) for root, point, fstype, _ in mounts if fstype == "cgroup2"]
    if not points:
        return None, "no cgroup2 mount"
    if not unified:
        return None, "this process has no cgroup v2 entry"
    root, point = points[0]
    own = _own(point, root, unified[0])
    try:
        controllers = (own / "cgroup.controllers").read_text().split()
    except OSError as exc:
        return None, f"cannot read {own}/cgroup.controllers ({exc.strerror or exc})"
    if "memory" not in controllers:
        return None, f"memory controller not delegated to {own}"
    return own, ""


def _v1(mounts: list[tuple[str, str, str, str]], groups: list[str]) -> tuple[Path | None, str]:
    points = [(root, point) for root, point, fstype, options in mounts
              if fstype == "cgroup" and "memory" in options.split(",")]
    if not points:
        return None, "no cgroup v1 memory mount"
    for line in groups:
        parts = line.split(":", 2)
        if len(parts) == 3 and "memory" in parts[1].split(","):
            root, point = points[0]
            return _own(point, root, parts[2]), ""
    return None, "this process has no cgroup v1 memory entry"


def detect(mountinfo: Path = Path("/proc/self/mountinfo"),
           proc_cgroup: Path = Path("/proc/self/cgroup")) -> tuple[MemoryCgroups | None, str]:
    """The memory cgroups we may use (v2 first, then v1), or None and why neither works."""
    try:
        mounts = _mounts(mountinfo.read_text())
        groups = proc_cgroup.read_text().splitlines()
    except OSError as exc:
        return None, f"cannot read {exc.filename} ({exc.strerror})"
    reasons = []
    for version, find in ((2, _v2), (1, _v1)):
        own, why = find(mounts, groups)
        if own is not None:
            candidate = MemoryCgroups(own, version)
            why = _probe(candidate)
            if not why:
                return candidate, "; ".join(reasons)
        reasons.append(f"v{version}: {why}")
    return None, "; ".join(reasons)
