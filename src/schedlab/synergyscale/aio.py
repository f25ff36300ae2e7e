"""Asynchronous NVMe I/O for :func:`schedlab.synergyscale.initialize` (SynergyScale, paper 11).

A thread pool of readers and a separate pool of writers issue ``O_DIRECT`` ``pread``/``pwrite``
calls on 4 KiB-aligned host buffers (plain I/O where the file system refuses ``O_DIRECT``).
Python releases the GIL inside those system calls, so several reads and writes are in flight
at once while the main thread computes: that is the prefetch the engine schedules ahead of use.

Writers never wait on readers, and readers only wait on the writes of the same key (a read
after a write of the same file is ordered), so the two pools cannot deadlock.
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from schedlab.core.errors import SchedlabError
from schedlab.synergyscale.tiers import BLOCK, FLOAT_BYTES, NvmeStore, aligned_host_buffer

__all__ = ["AsyncNvme"]


class AsyncNvme:
    """Files of fp32 tensors under ``directory``, read and written by thread pools."""

    def __init__(
        self, directory: str | Path, readers: int = 2, writers: int = 1, direct: bool = True
    ) -> None:
        self.directory = Path(directory)
        self._files = NvmeStore(self.directory, direct)  # the raw O_DIRECT I/O, shared
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="ss-nvme-read")
        self._writers = ThreadPoolExecutor(writers, thread_name_prefix="ss-nvme-write")
        self._pending_write: dict[str, Future] = {}
        self._lock = threading.Lock()
        self.bytes_read = 0
        self.bytes_written = 0
        self.files: set[str] = set()

    # ------------------------------------------------------------------ set-up
    def preflight(self, needed_bytes: int) -> None:
        """Fail before training if the directory is a file, read-only, full or too small."""
        self._files.preflight(needed_bytes)

    @property
    def direct(self) -> bool:
        """Whether files are opened with ``O_DIRECT`` (False once the file system refused)."""
        return self._files.direct

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.bin"

    # ---------------------------------------------------------------- raw I/O
    def _write_now(self, key: str, buffer) -> None:
        self._files._write_file(self.path(key), buffer)
        with self._lock:
            self.bytes_written += buffer.numel() * FLOAT_BYTES

    def _read_now(self, key: str, numel: int):
        pending = self._pending_write.get(key)
        if pending is not None:
            pending.result()  # read after write of the same file
        buffer = aligned_host_buffer(numel)
        self._files._read_file(self.path(key), buffer)
        with self._lock:
            self.bytes_read += buffer.numel() * FLOAT_BYTES
        return buffer[:numel]

    # ------------------------------------------------------------- async API
    def write(self, key: str, tensor, wait: bool = False) -> Future:
        """Write an fp32 tensor as ``key``; returns a future (the bytes are copied first into
        an aligned buffer unless ``tensor`` already is one, so the caller may reuse it)."""
        buffer = _as_aligned(tensor)
        self.files.add(key)
        with self._lock:
            previous = self._pending_write.get(key)

        def job() -> None:
            if previous is not None:
                previous.result()
            self._write_now(key, buffer)

        future = self._writers.submit(job)
        with self._lock:
            self._pending_write[key] = future
        future.add_done_callback(lambda f, k=key: self._forget(k, f))
        if wait:
            future.result()
        return future

    def _forget(self, key: str, future: Future) -> None:
        with self._lock:
            if self._pending_write.get(key) is future:
                del self._pending_write[key]

    def read(self, key: str, numel: int) -> Future:
        """Read ``key`` into a fresh aligned fp32 tensor of ``numel`` elements (a future)."""
        if key not in self.files:
            raise SchedlabError(f"NVMe store has no '{key}'")
        return self._readers.submit(self._read_now, key, numel)

    def read_now(self, key: str, numel: int):
        if key not in self.files:
            raise SchedlabError(f"NVMe store has no '{key}'")
        return self._read_now(key, numel)

    def drain(self) -> None:
        """Wait for every write in flight."""
        with self._lock:
            pending = list(self._pending_write.values())
        for future in pending:
            future.result()

    def close(self, remove: bool = True) -> None:
        with contextlib.suppress(Exception):
            self.drain()
        self._readers.shutdown(wait=True)
        self._writers.shutdown(wait=True)
        if remove:
            for key in self.files:
                with contextlib.suppress(OSError):
                    self.path(key).unlink()
            self.files.clear()


def _as_aligned(tensor):
    """``tensor`` (fp32, contiguous) as a 4 KiB-aligned, block-padded buffer."""
    import torch

    flat = tensor.detach().reshape(-1)
    if flat.dtype != torch.float32:
        flat = flat.float()
    numel = flat.numel()
    padded = -(-numel * FLOAT_BYTES // BLOCK) * BLOCK // FLOAT_BYTES
    if (
        flat.device.type == "cpu"
        and flat.data_ptr() % BLOCK == 0
        and flat.untyped_storage().nbytes() - flat.storage_offset() * FLOAT_BYTES
        >= padded * FLOAT_BYTES
    ):
        return torch.as_strided(flat, (padded,), (1,))
    buffer = aligned_host_buffer(numel)
    buffer[:numel].copy_(flat)
    return buffer
