"""The control plane's side of the two regions a virtual device shares with the shim.

gPooling (../shared/papers/14-gpooling.md) reports usage from the data plane to the control
plane and resizes running virtual devices in place. The layouts are in
``csrc/gpooling_shared.h``:

- the **limits** region (``<region>.limits``, one page): quota, compute share, host limit,
  revocation. Only the agent and control plane write it; the shim maps it read-only. For a job
  that must not be able to change it even as the same user (or root), :class:`SealedLimits`
  hands it over as a write-sealed memfd instead of a file.
- the **usage** region (``<region>``): counters and the per-process table, written by every
  process of the virtual device; no limit is ever read from it.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path

from schedlab.core.errors import BadInputError

MAGIC = struct.unpack("<Q", b"GPOOLSHM")[0]
LIMITS_MAGIC = struct.unpack("<Q", b"GPOOLLIM")[0]
VERSION = 2
HEADER_SLOTS = 64
PROCS = 1024  # process slots per virtual device (GPOOLING_PROCS)
PROC_SLOTS = 4  # pid, device bytes, host bytes, spare
PROCS_OFFSET = HEADER_SLOTS
SIZE = (HEADER_SLOTS + PROCS * PROC_SLOTS) * 8
LIMITS_SIZE = 4096
#: usage-region slot names in order; must match gpooling_usage in csrc/gpooling_shared.h
FIELDS = (
    "magic", "version", "lock", "memory_limit", "memory_used", "memory_peak", "share_ppm",
    "window_ns", "tokens_ns", "last_refill_ns", "alloc_calls", "free_calls", "launch_calls",
    "oom_rejections", "throttle_ns", "busy_ns", "attached", "live", "sync_calls", "reaped_bytes",
    "host_used", "host_peak", "slots_high", "denied_calls", "context_bytes", "reaped_procs",
    "tampered",
)
#: limits-region slot names in order; must match gpooling_limits
LIMIT_FIELDS = ("magic", "version", "memory_limit", "share_ppm", "window_ns", "host_limit",
                "revoked", "generation", "context_charge")
VDEV_OFFSET = 128  # char[64] id of the virtual device
_INDEX = {name: i for i, name in enumerate(FIELDS)}
_LIMIT_INDEX = {name: i for i, name in enumerate(LIMIT_FIELDS)}
#: the one counter that may go negative (a token bucket in debt)
SIGNED_FIELDS = frozenset({"tokens_ns"})
#: what a reader of a usage region sees of the limits (merged by read_region)
_MERGED = ("memory_limit", "share_ppm", "window_ns", "host_limit", "revoked", "generation",
           "context_charge")

F_ADD_SEALS, F_GET_SEALS = 1033, 1034
F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE, F_SEAL_FUTURE_WRITE = 1, 2, 4, 8, 16


def _pack(name: str, value: int) -> bytes:
    return struct.pack("<q" if name in SIGNED_FIELDS else "<Q", int(value))


def share_to_ppm(share: float) -> int:
    """A compute share in (0, 1] as the shim's parts-per-million (1e6 means unthrottled)."""
    if not 0.0 < share <= 1.0:
        raise BadInputError(f"compute share must be in (0, 1], got {share}", field="compute")
    return 1_000_000 if share >= 1.0 else int(round(share * 1e6))


def limits_path(region: str | Path) -> Path:
    """The limits file that goes with a usage region (what the shim opens by default)."""
    return Path(f"{region}.limits")


def _limits_bytes(memory_limit: int, share: float, window_ms: int, host_limit: int,
                  context_charge: int, vdev: str, revoked: bool = False,
                  generation: int = 1) -> bytes:
    if int(memory_limit) < 0:
        raise BadInputError("memory limit must not be negative", field="memory")
    values = dict(magic=LIMITS_MAGIC, version=VERSION, memory_limit=int(memory_limit),
                  share_ppm=share_to_ppm(share), window_ns=int(window_ms) * 1_000_000,
                  host_limit=int(host_limit), revoked=int(revoked), generation=generation,
                  context_charge=int(context_charge))
    body = b"".join(_pack(name, values[name]) for name in LIMIT_FIELDS)
    name = vdev.encode()[:63]
    out = bytearray(LIMITS_SIZE)
    out[:len(body)] = body
    out[VDEV_OFFSET:VDEV_OFFSET + len(name)] = name
    return bytes(out)


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def create_region(path: str | Path, memory_limit: int, share: float, window_ms: int = 100, *,
                  host_limit: int = 0, context_charge: int = 0, vdev: str = "") -> Path:
    """Write a fresh usage region at ``path`` and its limits file beside it.

    The limits file is 0644 (the job's user must not own it for it to be tamper-proof; see
    :class:`SealedLimits` for the same-user case); the usage region 0600 (the job writes it).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    limits = _limits_bytes(memory_limit, share, window_ms, host_limit, context_charge, vdev)
    _write_atomically(limits_path(path), limits, 0o644)
    values = dict.fromkeys(FIELDS, 0)
    ppm = share_to_ppm(share)
    values.update(magic=MAGIC, version=VERSION, memory_limit=int(memory_limit), share_ppm=ppm,
                  window_ns=window_ms * 1_000_000, tokens_ns=window_ms * 1_000_000 * ppm // 10**6,
                  last_refill_ns=_monotonic_ns())
    body = b"".join(_pack(name, values[name]) for name in FIELDS)
    _write_atomically(path, body + b"\0" * (SIZE - len(body)), 0o600)
    return path


def _monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _decode_limits(data: bytes, path: Path) -> dict[str, int | str]:
    if len(data) < LIMITS_SIZE:
        raise BadInputError(f"limits region is {len(data)} bytes, expected {LIMITS_SIZE}",
                            path=path)
    values: dict[str, int | str] = dict(zip(LIMIT_FIELDS, struct.unpack_from(
        f"<{len(LIMIT_FIELDS)}Q", data, 0), strict=True))
    if values["magic"] != LIMITS_MAGIC or values["version"] != VERSION:
        raise BadInputError("not a gPooling limits region (bad magic or version)", path=path,
                            field="magic")
    values["vdev"] = data[VDEV_OFFSET:VDEV_OFFSET + 64].split(b"\0", 1)[0].decode(
        errors="replace")
    return values


def read_limits(path: str | Path) -> dict[str, int | str]:
    """The limits file of a region (``path`` may be the usage region or the limits file)."""
    path = Path(path)
    target = path if path.name.endswith(".limits") else limits_path(path)
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read limits region: {exc.strerror}", path=target) from exc
    return _decode_limits(data, target)


def read_region(path: str | Path) -> dict[str, int]:
    """All counters of a usage region by name, with its limits merged in.

    A file that is not a region is a BadInputError. Where the limits file is absent (a region
    copied from another host) the usage region's mirrors of the limits are reported.
    """
    path = Path(path)
    try:
        data = path.read_bytes()[:SIZE]
    except OSError as exc:
        raise BadInputError(f"cannot read usage region: {exc.strerror}", path=path) from exc
    if len(data) < SIZE:
        raise BadInputError(f"usage region is {len(data)} bytes, expected {SIZE}", path=path)
    values = {}
    for i, name in enumerate(FIELDS):
        (values[name],) = struct.unpack_from("<q" if name in SIGNED_FIELDS else "<Q", data, i * 8)
    if values["magic"] != MAGIC or values["version"] != VERSION:
        raise BadInputError("not a gPooling usage region (bad magic or version)", path=path,
                            field="magic")
    if limits_path(path).is_file():
        limits = read_limits(path)
        values.update({k: int(limits[k]) for k in _MERGED})
    return values


def _store(view: mmap.mmap, index: int, name: str, value: int) -> None:
    view[index * 8:index * 8 + 8] = _pack(name, value)  # one aligned 8-byte store


def _apply(view: mmap.mmap, memory_limit: int | None, share: float | None,
           revoked: bool | None, host_limit: int | None = None) -> None:
    if memory_limit is not None:
        if int(memory_limit) < 0:
            raise BadInputError("memory limit must not be negative", field="memory")
        _store(view, _LIMIT_INDEX["memory_limit"], "memory_limit", memory_limit)
    if share is not None:
        _store(view, _LIMIT_INDEX["share_ppm"], "share_ppm", share_to_ppm(share))
    if host_limit is not None:
        _store(view, _LIMIT_INDEX["host_limit"], "host_limit", host_limit)
    if revoked is not None:
        _store(view, _LIMIT_INDEX["revoked"], "revoked", int(revoked))
    i = _LIMIT_INDEX["generation"] * 8
    (generation,) = struct.unpack_from("<Q", view, i)
    _store(view, _LIMIT_INDEX["generation"], "generation", generation + 1)


def update_quota(path: str | Path, memory_limit: int | None = None, share: float | None = None,
                 *, revoked: bool | None = None) -> None:
    """Change a live virtual device's limits (what the shim enforces) and the usage mirrors.

    Aligned 8-byte stores, which the shim reads atomically; it sees them on its next call.
    """
    path = Path(path)
    read_region(path)  # refuse to scribble on something that is not a region
    target = limits_path(path)
    if share is not None:
        share_to_ppm(share)
    with open(target, "r+b") as handle, mmap.mmap(handle.fileno(), LIMITS_SIZE) as view:
        _decode_limits(bytes(view[:LIMITS_SIZE]), target)
        _apply(view, memory_limit, share, revoked)
    with open(path, "r+b") as handle, mmap.mmap(handle.fileno(), SIZE) as view:
        if memory_limit is not None:
            _store(view, _INDEX["memory_limit"], "memory_limit", memory_limit)
        if share is not None:
            _store(view, _INDEX["share_ppm"], "share_ppm", share_to_ppm(share))


def revoke(path: str | Path) -> None:
    """Tell every process of a virtual device that it was released: the shim refuses all."""
    update_quota(path, memory_limit=None, share=None, revoked=True)


def holders(path: str | Path) -> dict[int, int]:
    """Device bytes held per attached process id (the shim's per-process slots)."""
    data = Path(path).read_bytes()[:SIZE]
    values = struct.unpack_from(f"<{PROCS * PROC_SLOTS}Q", data, PROCS_OFFSET * 8)
    return {values[i]: values[i + 1] for i in range(0, len(values), PROC_SLOTS) if values[i]}


def reap(path: str | Path, shim: str | Path) -> int:
    """Give back the memory of processes that died without detaching (SIGKILL, OOM killer).

    Runs the shim's own ``gpooling_reap`` (loaded locally with ctypes) so that the bytes are
    given back under the same lock the running processes use.
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


class SealedLimits:
    """A virtual device's limits as a write-sealed memfd, for a job running as the agent's user.

    The agent keeps the only writable mapping (made before sealing); ``F_SEAL_FUTURE_WRITE``
    then refuses every new writable mapping and every ``write()``, to any process, root
    included, so the job can read its limits but never change them. Pass :attr:`fd` to the
    job (``pass_fds``) with ``GPOOLING_LIMITS_FD``; call :meth:`update` to resize it live.
    """

    def __init__(self, memory_limit: int, share: float, window_ms: int = 100, *,
                 host_limit: int = 0, context_charge: int = 0, vdev: str = "") -> None:
        data = _limits_bytes(memory_limit, share, window_ms, host_limit, context_charge, vdev)
        self.fd = os.memfd_create("gpooling-limits", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, LIMITS_SIZE)
            self._view = mmap.mmap(self.fd, LIMITS_SIZE)
            self._view[:LIMITS_SIZE] = data
            import fcntl

            fcntl.fcntl(self.fd, F_ADD_SEALS,
                        F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL)
        except OSError:
            os.close(self.fd)
            raise
        os.set_inheritable(self.fd, True)

    @classmethod
    def from_file(cls, path: str | Path, vdev: str = "") -> SealedLimits:
        """A sealed copy of a region's limits file."""
        limits = read_limits(path)
        return cls(int(limits["memory_limit"]), int(limits["share_ppm"]) / 1e6,
                   int(limits["window_ns"]) // 1_000_000, host_limit=int(limits["host_limit"]),
                   context_charge=int(limits["context_charge"]), vdev=vdev or str(limits["vdev"]))

    def update(self, memory_limit: int | None = None, share: float | None = None, *,
               revoked: bool | None = None, host_limit: int | None = None) -> None:
        _apply(self._view, memory_limit, share, revoked, host_limit)

    def read(self) -> dict[str, int | str]:
        return _decode_limits(bytes(self._view[:LIMITS_SIZE]), Path("(memfd)"))

    def environment(self) -> dict[str, str]:
        """What the job needs: the descriptor, and a path a child that lost it can reopen."""
        return {"GPOOLING_LIMITS_FD": str(self.fd),
                "GPOOLING_LIMITS": f"/proc/{os.getpid()}/fd/{self.fd}",
                "GPOOLING_LIMITS_SEALED": "1"}

    def close(self) -> None:
        self._view.close()
        os.close(self.fd)

    def __enter__(self) -> SealedLimits:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
