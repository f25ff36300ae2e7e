"""An embedded I/O load generator: fio's IOR-like jobs in pure Python, for machines without fio.

Paper: IFlux (../shared/papers/10-iflux.md) is evaluated with IOR and DLIO patterns. Our IOR-like
jobs are fio jobs (:data:`schedlab.iflux.iojob.FIO_PATTERNS`); fio gives the higher-fidelity
measurement and is used whenever it is installed. Without it, :func:`run_job` issues the same
job: the same files (one shared file with one region per worker, or one file per worker, named
as fio names them), the same block size, sequential or seeded-random block order (every block of
a region once, like fio's random map with ``randrepeat=1``), the same op count (``number_ios``),
``numjobs`` workers as forked processes (as fio forks them) or threads, an fsync at the end
(``end_fsync``), with ``os.pwrite``/``os.preadv`` on a page-aligned buffer through ``O_DIRECT``
where the file system takes it, falling back to buffered I/O where it does not (``EINVAL`` on
open or on the first op, or a region that is not 4 KiB-aligned); a buffered job first drops the
file's cached pages, as fio's default ``invalidate=1`` does.

The throttle is fio's, not a second model: the rate comes from the very options fio would get
(:meth:`StorageModel.fio_options`, ``--rate_iops`` per worker) and is enforced the way fio
enforces a rate, after each op each worker sleeps until ``start + ops_done / rate``: a token
bucket with no burst, on an absolute clock so sleep overshoot does not accumulate. fio is not
given the tier's metadata latency, so neither is this generator. Reported figures are fio's:
``seconds`` is the larger of the group run time (the slowest worker, end fsync included) and the
summed op latency per worker; ``iops`` and ``bw`` are per run time.

Which engine runs: ``$IFLUX_IOLOAD`` = ``auto`` (default: fio if on PATH, else embedded),
``fio`` or ``embedded``. This module imports only the standard library (jobs start fast).
"""

from __future__ import annotations

import errno
import functools
import mmap
import multiprocessing
import os
import random
import re
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ENGINE_ENV = "IFLUX_IOLOAD"
WORKERS_ENV = "IFLUX_IOLOAD_WORKERS"  # processes (fio's default, and iojob's) or threads
ENGINES = ("auto", "fio", "embedded")
ALIGN = 4096  # O_DIRECT needs offsets, lengths and buffers aligned to the logical block size


@functools.lru_cache(maxsize=1)
def fio_version() -> str | None:
    """``"fio 3.33"`` when fio is on PATH (``None`` when not)."""
    path = shutil.which("fio")
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"(\d+(?:\.\d+)+)", out.stdout)
    return f"fio {found.group(1)}" if found else "fio"


def choose_engine(requested: str | None = None) -> str:
    """``"fio"`` or ``"embedded"``: the request (or ``$IFLUX_IOLOAD``), else fio when present."""
    want = (requested or os.environ.get(ENGINE_ENV) or "auto").strip().lower()
    if want not in ENGINES:
        raise ValueError(f"{ENGINE_ENV}={want!r}: valid values are {', '.join(ENGINES)}")
    if want == "auto":
        return "fio" if shutil.which("fio") else "embedded"
    return want


def rate_from_fio_options(options: list[str]) -> float:
    """The per-worker op rate fio would be held to by ``options`` (0: unthrottled)."""
    rate = 0.0
    for option in options:
        if option.startswith("--rate_iops="):
            rate = float(option.split("=", 1)[1].split(",")[0])
    return rate


@dataclass
class WorkerStats:
    """What one worker did, as fio reports a job: bytes, ops, run time, summed op latency."""

    bytes: int = 0
    ops: int = 0
    runtime: float = 0.0
    latency: float = 0.0
    direct: bool = False


def _open(path: Path, flags: int, direct: bool) -> tuple[int, bool]:
    if direct and hasattr(os, "O_DIRECT"):
        try:
            return os.open(path, flags | os.O_DIRECT, 0o644), True
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
    return os.open(path, flags, 0o644), False


def _invalidate(fd: int) -> None:
    """Drop the file's cached pages before a buffered job, as fio does (``invalidate=1``, its
    default): a read job then reads the device, not the page cache the layout just filled."""
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


def _layout(path: Path, end: int, block: int) -> None:
    """A read job's file must hold its region; fio lays out (writes) a missing or short file."""
    size = path.stat().st_size if path.exists() else 0
    if size >= end:
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        chunk = bytes(min(block, 1 << 20) or 1)
        offset = size
        while offset < end:
            offset += os.pwrite(fd, chunk[:end - offset], offset)
    finally:
        os.close(fd)


def _worker(path: Path, write: bool, sequential: bool, block: int, start: int, length: int,
            ops: int, fsync: bool, rate: float, direct: bool, seed: int,
            ready: threading.Barrier | None) -> WorkerStats:
    """Issue one fio job's ops on ``[start, start + length)`` of ``path``."""
    blocks = [start + i * block for i in range(length // block)]
    if not sequential:
        random.Random(seed).shuffle(blocks)
    if ops:
        blocks = blocks[:ops]
    todo = [(offset, block) for offset in blocks]
    if length % block and not ops:  # the region's last, partial block (fio does it too)
        todo.append((start + length - length % block, length % block))
    aligned = start % ALIGN == 0 and all(n % ALIGN == 0 for _, n in todo)
    flags = (os.O_WRONLY | os.O_CREAT) if write else os.O_RDONLY
    fd, direct = _open(path, flags, direct and aligned)
    if not direct:
        _invalidate(fd)
    buffer = mmap.mmap(-1, max(block, ALIGN))  # page-aligned, as O_DIRECT needs
    if write:
        buffer.write(os.urandom(block))  # fio fills its buffers with random data too
    view = memoryview(buffer)
    stats = WorkerStats(direct=direct)

    def once(offset: int, n: int) -> int:
        part = view[:n]
        try:
            return os.pwrite(fd, part, offset) if write else os.preadv(fd, [part], offset)
        finally:
            part.release()

    try:
        if ready is not None:
            ready.wait()
        began = time.perf_counter()
        for offset, n in todo:
            t = time.perf_counter()
            try:
                done = once(offset, n)
            except OSError as exc:  # a file system that accepted O_DIRECT on open, not on I/O
                if not (direct and exc.errno == errno.EINVAL and stats.ops == 0):
                    raise
                os.close(fd)
                fd, direct = _open(path, flags, False)
                stats.direct = False
                _invalidate(fd)
                done = once(offset, n)
            stats.latency += time.perf_counter() - t
            stats.bytes += done
            stats.ops += 1
            if rate:  # fio's rate: sleep until this many ops are due, on an absolute clock
                due = began + stats.ops / rate
                now = time.perf_counter()
                if now < due:
                    time.sleep(due - now)
        if fsync and write:
            os.fsync(fd)
        stats.runtime = time.perf_counter() - began
    finally:
        os.close(fd)
        view.release()
        buffer.close()
    return stats


def _process_main(queue, index: int, args: tuple) -> None:
    try:
        queue.put((index, asdict(_worker(*args))))
    except BaseException as exc:  # reported to the parent, which raises it
        queue.put((index, repr(exc)))


def run_job(name: str, directory: str | Path, rw: str, block: int, shared: bool, fsync: bool,
            size: int, workers: int = 1, io_ops: int = 0, rate: float = 0.0,
            direct: bool = True, concurrency: str = "threads", seed: int = 0) -> dict:
    """One fio-equivalent job; ``rate`` is fio's ``rate_iops`` per worker (0: unthrottled).

    Returns fio's figures: ``seconds``, ``bytes``, ``iops``, ``bw`` (bytes/s), plus ``ops``,
    ``runtime``, ``busy`` (summed op latency per worker) and ``direct`` (whether every worker
    ran with O_DIRECT).
    """
    if rw not in ("read", "write", "randread", "randwrite"):
        raise ValueError(f"rw={rw!r}: read, write, randread or randwrite")
    if concurrency not in ("threads", "processes"):
        raise ValueError(f"concurrency={concurrency!r}: threads or processes")
    workers = max(1, int(workers))
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    write, sequential = "write" in rw, not rw.startswith("rand")
    per_job = size // workers
    ops = max(1, io_ops // workers) if io_ops else 0
    jobs = []
    for k in range(workers):
        path = directory / (f"{name}.dat" if shared else f"{name}.{k}.0")
        start = k * per_job if shared else 0
        if not write:
            _layout(path, start + per_job, block)
        jobs.append((path, write, sequential, block, start, per_job, ops, fsync, rate, direct,
                     seed * 1_000_003 + k))
    if concurrency == "threads":
        ready = threading.Barrier(workers, timeout=120)
        results: list[WorkerStats | BaseException] = [WorkerStats()] * workers

        def body(k: int) -> None:
            try:
                results[k] = _worker(*jobs[k], ready)
            except BaseException as exc:
                ready.abort()
                results[k] = exc

        threads = [threading.Thread(target=body, args=(k,)) for k in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:  # the root cause, not the other workers' broken barrier
            raise next((r for r in failed if not isinstance(r, threading.BrokenBarrierError)),
                       failed[0])
        stats = [r for r in results if isinstance(r, WorkerStats)]
    else:
        context = multiprocessing.get_context("fork")
        barrier, queue = context.Barrier(workers, timeout=120), context.Queue()
        procs = [context.Process(target=_process_main, args=(queue, k, (*jobs[k], barrier)))
                 for k in range(workers)]
        for p in procs:
            p.start()
        got = dict(queue.get() for _ in procs)
        for p in procs:
            p.join()
        errors = [v for v in got.values() if isinstance(v, str)]
        if errors:
            raise OSError(f"an I/O worker failed: {errors[0]}")
        stats = [WorkerStats(**got[k]) for k in range(workers)]
    total = sum(s.bytes for s in stats)
    count = sum(s.ops for s in stats)
    runtime = max(s.runtime for s in stats)
    busy = sum(s.latency for s in stats) / workers
    seconds = max(runtime, busy)
    return dict(seconds=seconds, bytes=total, iops=count / max(runtime, 1e-9),
                bw=total / max(runtime, 1e-9), ops=count, runtime=runtime, busy=busy,
                direct=all(s.direct for s in stats))


def describe(direct: bool | None = None) -> str:
    """The generator as ``Result.ran_with`` names it."""
    how = {True: "O_DIRECT", False: "buffered: O_DIRECT refused", None: "O_DIRECT where taken"}
    return f"the embedded I/O generator (os.pwrite/os.preadv, {how[direct]})"
