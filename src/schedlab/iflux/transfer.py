"""Moving data between the PFS and an accelerator tier without ever losing the job's output.

Paper: IFlux (../shared/papers/10-iflux.md) stages data in before a job and flushes it out
after. Rules here: every file lands on its destination by write-to-temporary-sibling, fsync,
rename, so a reader never sees half a file; a failed copy is retried with backoff; whatever still
fails is listed, and the caller keeps the tier copy instead of deleting it. Software
accelerators act here too: ``prefetch`` stages with parallel streams (overlapping per-file
metadata latency), ``compress`` really compresses (zlib) and charges the PFS only the compressed
bytes (a compressed wire; files are stored as written so outputs stay byte-identical), and
``aggregate`` ships many small files to the PFS as one tar bundle (one metadata operation) that
the PFS side unpacks. Standard library only: the write-back daemon imports this module.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import tarfile
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from schedlab.iflux.storage import Client

SMALL_FILE = 1 << 20
SAMPLE = 256 << 10
TMP_SUFFIX = ".iflux-tmp"
Copier = Callable[[Client, Path, Path, bool], int]


@dataclass
class TransferStats:
    files: int = 0
    bytes: int = 0
    wire_bytes: int = 0
    seconds: float = 0.0
    retries: int = 0
    failed: list[str] = field(default_factory=list)

    def add(self, other: TransferStats) -> None:
        self.files += other.files
        self.bytes += other.bytes
        self.wire_bytes += other.wire_bytes
        self.retries += other.retries
        self.failed += other.failed

    def to_dict(self) -> dict:
        return asdict(self)


def _syncfs(path: Path) -> bool:
    """One syncfs(2) for a whole batch instead of an fsync per small file (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            return libc.syncfs(fd) == 0
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        return False


def _publish(data: bytes, dst: Path, fsync: bool = True) -> None:
    """Write-then-rename: ``dst`` is either absent, its old self, or complete."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}{TMP_SUFFIX}")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def wire_size(data: bytes, compress: bool) -> int:
    """Bytes on the wire: compressed when worthwhile. A 256 KiB sample decides, so incompressible
    data (random, already compressed) is sent raw instead of burning CPU for nothing."""
    if not compress or not data:
        return len(data)
    sample = data[:SAMPLE]
    if len(zlib.compress(sample, 1)) > 0.9 * len(sample):
        return len(data)
    return len(zlib.compress(data, 1))


def copy_file(client: Client, src: Path, dst: Path, compress: bool = False) -> int:
    """Copy one file paying each side's modelled cost; returns the bytes that crossed the wire."""
    data = client.read(src)
    wire = wire_size(data, compress)
    throttle = client.throttle(dst.parent if dst.parent.exists() else dst.parent.parent)
    throttle.meta()
    _publish(data, dst)
    throttle.charge(wire, max(1, -(-wire // (1 << 20))))
    return wire


def _with_retry(copier: Copier, client: Client, src: Path, dst: Path, compress: bool,
                retries: int, stats: TransferStats) -> None:
    for attempt in range(retries + 1):
        try:
            stats.wire_bytes += copier(client, src, dst, compress)
            stats.files += 1
            stats.bytes += src.stat().st_size
            return
        except OSError:
            if attempt == retries:
                stats.failed.append(str(src))
                return
            stats.retries += 1
            time.sleep(0.02 * 2**attempt)


def list_files(root: Path) -> list[Path]:
    """Regular files under ``root`` (sorted), skipping our own temporaries."""
    found = []
    for dirpath, _, names in os.walk(root):
        found += [Path(dirpath) / n for n in names if not n.endswith(TMP_SUFFIX)]
    return sorted(found)


def stage_tree(client: Client, src: Path, dst: Path, streams: int = 1,
               copier: Copier = copy_file, retries: int = 3) -> TransferStats:
    """Copy every file under ``src`` to ``dst`` with ``streams`` parallel copiers."""
    start = time.perf_counter()
    stats = TransferStats()
    files = list_files(src) if src.is_dir() else []
    if files:
        client.listdir(src)

    def one(path: Path) -> TransferStats:
        own = TransferStats()
        _with_retry(copier, client, path, dst / path.relative_to(src), False, retries, own)
        return own

    with ThreadPoolExecutor(max_workers=max(1, streams)) as pool:
        for part in pool.map(one, files):
            stats.add(part)
    stats.seconds = time.perf_counter() - start
    return stats


def snapshot(root: Path) -> dict[str, list[int]]:
    """relative path -> [mtime_ns, size]: what a flush has already made durable."""
    out = {}
    for path in list_files(root):
        st = path.stat()
        out[str(path.relative_to(root))] = [st.st_mtime_ns, st.st_size]
    return out


def flush_tree(client: Client, src: Path, dst: Path, *, compress: bool = False,
               aggregate: bool = False, done: dict[str, list[int]] | None = None,
               settle: float = 0.0, copier: Copier = copy_file, retries: int = 3,
               streams: int = 8) -> tuple[TransferStats, dict[str, list[int]]]:
    """Flush files under ``src`` that changed since ``done`` to ``dst``; returns stats and the
    new ``done``. Files modified less than ``settle`` seconds ago are left for later (the
    write-back daemon uses this so it does not copy a file the job is still writing)."""
    start = time.perf_counter()
    done = dict(done or {})
    stats = TransferStats()
    now = time.time_ns()
    todo = []
    for path in list_files(src):
        st = path.stat()
        key = str(path.relative_to(src))
        if done.get(key) == [st.st_mtime_ns, st.st_size]:
            continue
        if settle and now - st.st_mtime_ns < settle * 1e9:
            continue
        todo.append((path, key, [st.st_mtime_ns, st.st_size]))
    small = [t for t in todo if aggregate and t[2][1] < SMALL_FILE]
    if small:
        part = _bundle(client, src, dst, [p for p, _, _ in small], retries, streams)
        stats.add(part)
        if not part.failed:
            done.update({k: s for _, k, s in small})
    rest = [t for t in todo if not (aggregate and t[2][1] < SMALL_FILE)]

    def one(item: tuple[Path, str, list[int]]) -> TransferStats:
        own = TransferStats()
        _with_retry(copier, client, item[0], dst / item[1], compress, retries, own)
        return own

    # Independent files go out on ``streams`` copiers at once: on a network file system each
    # file is several round trips (create, write, fsync, rename), which parallel requests hide.
    with ThreadPoolExecutor(max_workers=max(1, min(streams, len(rest)))) as pool:
        for (_, key, state), part in zip(rest, pool.map(one, rest), strict=True):
            stats.add(part)
            if not part.failed:
                done[key] = state
    stats.seconds = time.perf_counter() - start
    return stats, done


def _bundle(client: Client, src: Path, dst: Path, files: list[Path],
            retries: int, streams: int = 1) -> TransferStats:
    """Ship small files as one tar (one PFS metadata op) and unpack them on the PFS side."""
    stats = TransferStats()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in files:
            tar.add(path, arcname=str(path.relative_to(src)))
    blob = buffer.getvalue()
    dst.mkdir(parents=True, exist_ok=True)
    throttle = client.throttle(dst)
    for attempt in range(retries + 1):
        try:
            throttle.meta()
            throttle.charge(len(blob), max(1, -(-len(blob) // (1 << 20))))
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
                batched = _syncfs(dst)  # probe: can the batch be made durable in one call?
                members = [(m.name, tar.extractfile(m).read())  # type: ignore[union-attr]
                           for m in tar.getmembers()]
            # unpacked on ``streams`` copiers: on a network file system each file's create,
            # write and rename are round trips that parallel requests overlap
            with ThreadPoolExecutor(max_workers=max(1, min(streams, len(members)))) as pool:
                list(pool.map(_publish, [d for _, d in members], [dst / n for n, _ in members],
                              [not batched] * len(members)))
            if batched and not _syncfs(dst):
                raise OSError("syncfs failed after unpacking the bundle")
            stats.files += len(files)
            stats.bytes += sum(p.stat().st_size for p in files)
            stats.wire_bytes += len(blob)
            return stats
        except OSError:
            if attempt == retries:
                stats.failed += [str(p) for p in files]
                return stats
            stats.retries += 1
            time.sleep(0.02 * 2**attempt)
    return stats


def save_state(path: Path, done: dict[str, list[int]]) -> None:
    _publish(json.dumps(done).encode(), path)


def load_state(path: Path) -> dict[str, list[int]]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
