"""Tier manager: chunked model states across device memory, host memory and NVMe files.

SynergyScale (11-synergyscale.md) keeps parameters, gradients and optimizer states in chunks
whose placement spans GPU, CPU and secondary storage. Here:

* :class:`ChunkLayout` packs whole stages into flat fp32 chunks (offsets aligned to 64 bytes) so
  one copy moves one chunk and a stage's parameters are views into its chunk.
* :class:`MemoryTier` is a budgeted allocator for the device tier (CUDA memory, or a separate
  CPU arena standing in for it) and the host tier (pinned memory when CUDA is present). An
  allocation past the budget raises, so a plan that would not fit is caught, never tolerated.
* :class:`NvmeStore` keeps each chunk state in a real file, written and read with ``O_DIRECT``
  into 4 KiB-aligned buffers where the file system allows it (plain large I/O otherwise), and
  checks before training that the directory is writable and has room.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError, SchedlabError

FLOAT_BYTES = 4
ALIGN_FLOATS = 16  # 64-byte aligned parameter offsets inside a chunk
BLOCK = 4096  # O_DIRECT alignment of buffers, sizes and file offsets


class BudgetExceededError(SchedlabError):
    """A tier allocation would pass that tier's budget: the plan does not fit."""


@dataclass(frozen=True)
class Chunk:
    """Whole stages packed into one flat buffer; ``views`` maps stage -> name -> (offset, shape)."""

    index: int
    stages: tuple[int, ...]
    numel: int
    views: dict[int, dict[str, tuple[int, tuple[int, ...]]]]

    @property
    def nbytes(self) -> int:
        return self.numel * FLOAT_BYTES


@dataclass(frozen=True)
class ChunkLayout:
    chunks: tuple[Chunk, ...]
    stage_chunk: tuple[int, ...]

    @property
    def total_numel(self) -> int:
        return sum(c.numel for c in self.chunks)


def _aligned(n: int, to: int) -> int:
    return -(-n // to) * to


def build_layout(stage_shapes: list[list[tuple[str, tuple[int, ...]]]],
                 groups: tuple[tuple[int, ...], ...]) -> ChunkLayout:
    """Lay out the stages of each group (a plan's chunks) in one flat buffer per chunk."""
    covered = [s for g in groups for s in g]
    if covered != list(range(len(stage_shapes))):
        raise SchedlabError("chunk groups must cover every stage once, in order")
    chunks, stage_chunk = [], [0] * len(stage_shapes)
    for index, group in enumerate(groups):
        views: dict[int, dict[str, tuple[int, tuple[int, ...]]]] = {}
        offset = 0
        for stage in group:
            stage_chunk[stage] = index
            views[stage] = {}
            for name, shape in stage_shapes[stage]:
                views[stage][name] = (offset, tuple(shape))
                offset += _aligned(int(np.prod(shape)), ALIGN_FLOATS)
        chunks.append(Chunk(index, tuple(group), offset, views))
    return ChunkLayout(tuple(chunks), tuple(stage_chunk))


def stage_views(buffer, chunk: Chunk, stage: int) -> dict:
    """The stage's parameters as views into a chunk buffer (no copy)."""
    out = {}
    for name, (offset, shape) in chunk.views[stage].items():
        numel = int(np.prod(shape))
        out[name] = buffer[offset:offset + numel].view(shape)
    return out


class MemoryTier:
    """A budgeted allocator; tracks bytes in use and the peak, and refuses to pass the budget.

    Thread-safe: the streams of the runtime allocate and free concurrently.
    """

    def __init__(self, name: str, budget: int, device: str = "cpu", pinned: bool = False) -> None:
        self.name, self.budget, self.device, self.pinned = name, budget, device, pinned
        self.used = 0
        self.peak = 0
        self.live: dict[str, int] = {}
        self._lock = threading.Lock()

    def reserve(self, key: str, nbytes: int) -> None:
        """Count ``nbytes`` against the budget (for memory allocated by someone else)."""
        with self._lock:
            if key in self.live:
                raise SchedlabError(f"{self.name} tier: '{key}' is already allocated")
            if self.used + nbytes > self.budget:
                raise BudgetExceededError(
                    f"{self.name} tier: allocating {nbytes:,} B for '{key}' would use "
                    f"{self.used + nbytes:,} B of a {self.budget:,} B budget",
                    field=f"{self.name}_budget")
            self.used += nbytes
            self.peak = max(self.peak, self.used)
            self.live[key] = nbytes

    def alloc(self, key: str, numel: int, aligned: bool = False):
        """A zeroed fp32 buffer; ``aligned`` gives 4 KiB-aligned host memory padded to whole
        blocks (O_DIRECT-safe; slice ``[:numel]`` for the payload)."""
        import torch

        if aligned:
            self.reserve(key, _aligned(numel * FLOAT_BYTES, BLOCK))
            return aligned_host_buffer(numel).zero_()
        self.reserve(key, numel * FLOAT_BYTES)
        if self.pinned:
            return torch.zeros(numel, dtype=torch.float32).pin_memory()
        return torch.zeros(numel, dtype=torch.float32, device=self.device)

    def free(self, key: str) -> None:
        with self._lock:
            self.used -= self.live.pop(key)


def aligned_host_buffer(numel: int):
    """A float32 torch tensor over 4 KiB-aligned memory, padded to whole blocks (O_DIRECT-safe)."""
    import torch

    nbytes = _aligned(numel * FLOAT_BYTES, BLOCK)
    raw = np.empty(nbytes + BLOCK, dtype=np.uint8)
    start = (-raw.ctypes.data) % BLOCK
    array = raw[start:start + nbytes].view(np.float32)
    return torch.from_numpy(array)


class NvmeStore:
    """Chunk states as files in ``directory``; O_DIRECT when supported, plain I/O otherwise."""

    def __init__(self, directory: str | Path, direct: bool = True) -> None:
        self.directory = Path(directory)
        self.direct = direct and hasattr(os, "O_DIRECT")
        self.bytes_read = 0
        self.bytes_written = 0
        self.files: dict[str, Path] = {}

    def preflight(self, needed_bytes: int) -> None:
        """Fail before training if the directory is unusable, read-only or too small."""
        path = self.directory
        if path.exists() and not path.is_dir():
            raise BadInputError("NVMe path exists and is not a directory", path=path, field="nvme")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInputError(f"cannot create NVMe directory: {exc.strerror}", path=path,
                                field="nvme") from exc
        free = shutil.disk_usage(path).free
        if free < needed_bytes:
            raise BadInputError(f"NVMe directory has {free} B free but the plan needs "
                                f"{needed_bytes} B", path=path, field="nvme")
        probe = path / ".synergyscale-probe"
        try:
            self._write_file(probe, aligned_host_buffer(BLOCK // FLOAT_BYTES))
        except OSError as exc:
            reason = "is read-only" if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) \
                else "is full" if exc.errno == errno.ENOSPC else f"failed: {exc.strerror}"
            raise BadInputError(f"NVMe directory {reason}", path=path, field="nvme") from exc
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()

    def _open(self, path: Path, flags: int) -> int:
        if self.direct:
            try:
                return os.open(path, flags | os.O_DIRECT, 0o644)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # tmpfs and friends refuse O_DIRECT
                    raise
                self.direct = False
        return os.open(path, flags, 0o644)

    def _write_file(self, path: Path, buffer) -> None:
        fd = self._open(path, os.O_WRONLY | os.O_CREAT)
        try:
            view = memoryview(buffer.numpy()).cast("B")
            done = 0
            while done < len(view):
                done += os.pwrite(fd, view[done:], done)
        finally:
            os.close(fd)

    def write(self, key: str, buffer) -> None:
        """Write an aligned host buffer (from :func:`aligned_host_buffer`) as ``key``'s file."""
        path = self.files.setdefault(key, self.directory / f"{key}.bin")
        self._write_file(path, buffer)
        self.bytes_written += buffer.numel() * FLOAT_BYTES

    def _read_file(self, path: Path, buffer) -> None:
        fd = self._open(path, os.O_RDONLY)
        try:
            view = memoryview(buffer.numpy()).cast("B")
            done = 0
            while done < len(view):
                got = os.preadv(fd, [view[done:]], done)
                if got == 0:
                    raise BadInputError("NVMe file is shorter than its buffer", path=path)
                done += got
        finally:
            os.close(fd)

    def read(self, key: str, buffer) -> None:
        """Fill an aligned host buffer with ``key``'s file."""
        if key not in self.files:
            raise SchedlabError(f"NVMe store has no '{key}'")
        self._read_file(self.files[key], buffer)
        self.bytes_read += buffer.numel() * FLOAT_BYTES

    def cleanup(self) -> None:
        for path in self.files.values():
            with contextlib.suppress(OSError):
                path.unlink()
        self.files.clear()
