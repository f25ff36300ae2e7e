"""The control plane's side of the region a virtual device's processes share with the shim.

gPooling (../shared/papers/14-gpooling.md) reports usage from the data plane to the control
plane. Here that path is a 512-byte memory-mapped file per virtual device (layout in
``csrc/gpooling_shared.h``): the shim counts into it, the control plane reads it, and writing
the quota fields resizes a running virtual device in place (the shim re-reads them on every
call), which is what makes virtual devices elastic without restarting the job.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from schedlab.core.errors import BadInputError

MAGIC = struct.unpack("<Q", b"GPOOLSHM")[0]
VERSION = 1
SLOTS = 64
SIZE = SLOTS * 8
#: slot names in order; must match gpooling_region in csrc/gpooling_shared.h
FIELDS = (
    "magic", "version", "lock", "memory_limit", "memory_used", "memory_peak", "share_ppm",
    "window_ns", "tokens_ns", "last_refill_ns", "alloc_calls", "free_calls", "launch_calls",
    "oom_rejections", "throttle_ns", "busy_ns", "attached", "live", "sync_calls", "reaped_bytes",
)
PROCS_OFFSET, PROCS = 24, 20  # (pid, bytes) pairs from slot 24 on
_INDEX = {name: i for i, name in enumerate(FIELDS)}
_SIGNED = {"tokens_ns"}


def _pack(name: str, value: int) -> bytes:
    return struct.pack("<q" if name in _SIGNED else "<Q", int(value))


def share_to_ppm(share: float) -> int:
    """A compute share in (0, 1] as the shim's parts-per-million (1e6 means unthrottled)."""
    if not 0.0 < share <= 1.0:
        raise BadInputError(f"compute share must be in (0, 1], got {share}", field="compute")
    return 1_000_000 if share >= 1.0 else int(round(share * 1e6))


def create_region(path: str | Path, memory_limit: int, share: float, window_ms: int = 100) -> Path:
    """Write a fresh, initialised region (magic last, so a shim never sees a half-made one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    values = dict.fromkeys(FIELDS, 0)
    ppm = share_to_ppm(share)
    values.update(version=VERSION, memory_limit=int(memory_limit), share_ppm=ppm,
                  window_ns=window_ms * 1_000_000, tokens_ns=window_ms * 1_000_000 * ppm // 10**6,
                  last_refill_ns=_monotonic_ns())
    body = b"".join(_pack(name, values[name]) for name in FIELDS[1:])
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(b"\0" * 8 + body + b"\0" * (SIZE - 8 - len(body)))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), SIZE) as view:
        view[0:8] = struct.pack("<Q", MAGIC)
    return path


def _monotonic_ns() -> int:
    import time

    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def read_region(path: str | Path) -> dict[str, int]:
    """All counters of a region, by name; a file that is not a region is a BadInputError."""
    path = Path(path)
    try:
        data = path.read_bytes()[:SIZE]
    except OSError as exc:
        raise BadInputError(f"cannot read usage region: {exc.strerror}", path=path) from exc
    if len(data) < len(FIELDS) * 8:
        raise BadInputError(f"usage region is {len(data)} bytes, expected {SIZE}", path=path)
    values = {}
    for i, name in enumerate(FIELDS):
        (values[name],) = struct.unpack_from("<q" if name in _SIGNED else "<Q", data, i * 8)
    if values["magic"] != MAGIC:
        raise BadInputError("not a gPooling usage region (bad magic)", path=path, field="magic")
    return values


def update_quota(path: str | Path, memory_limit: int | None = None,
                 share: float | None = None) -> None:
    """Change a live region's quota; aligned 8-byte stores, which the shim reads atomically."""
    path = Path(path)
    read_region(path)  # refuse to scribble on something that is not a region
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), SIZE) as view:
        if memory_limit is not None:
            i = _INDEX["memory_limit"] * 8
            view[i:i + 8] = _pack("memory_limit", memory_limit)
        if share is not None:
            i = _INDEX["share_ppm"] * 8
            view[i:i + 8] = _pack("share_ppm", share_to_ppm(share))


def holders(path: str | Path) -> dict[int, int]:
    """Bytes held per attached process id (the shim's per-process slots)."""
    data = Path(path).read_bytes()[:SIZE]
    pairs = struct.unpack_from(f"<{2 * PROCS}Q", data, PROCS_OFFSET * 8)
    return {pairs[i]: pairs[i + 1] for i in range(0, len(pairs), 2)
            if pairs[i] and pairs[i] != 2**64 - 1}


def reap(path: str | Path, shim: str | Path) -> int:
    """Give back the memory of processes that died without detaching (SIGKILL, OOM killer).

    Runs the shim's own ``gpooling_reap`` (loaded locally with ctypes) so that the bytes are
    subtracted with the same atomic operations the running processes use.
    """
    import ctypes

    read_region(path)
    library = ctypes.CDLL(str(shim), mode=os.RTLD_LOCAL)
    function = library.gpooling_reap
    function.argtypes, function.restype = [ctypes.c_char_p], ctypes.c_longlong
    given = int(function(str(path).encode()))
    if given < 0:
        raise BadInputError("cannot map the usage region to reap it", path=Path(path))
    return given
