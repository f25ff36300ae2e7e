"""Devices as OS processes over shared memory (``multiprocessing`` + ``shared_memory``).

Each device is a spawned process that maps, zero-copy, one shared arena holding every task's
data (basis values when cached, else the grid points; the XC kernel; AO indices), the grid
coordinates, the response density matrices of the current iteration, its own output slot and the
per-task time arrays. Per iteration the parent writes the density matrices once and sends each
device the ids of its tasks (a few kB through a pipe); the device's streams (threads) run them,
write each task's wall and thread-CPU time into the shared time arrays at the task's id, merge
their exact fixed-point partials into the device's output slot and answer with the iteration's
process CPU time. Nothing per task crosses a process boundary, which keeps the backend's
overhead (CPU outside the tasks) a small share of the task time; it is measured every
iteration (``IterationStats.overhead_fraction``).

With fixed-point accumulation (the default) every device count gives bit-identical results.
Tasks stay with their process, so a stealing plan runs as its initial split, as on Ray.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import shared_memory
from multiprocessing.connection import Client, Listener
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.hip_dfpt.devicerun import Throttle, stretch_cpu
from schedlab.hip_dfpt.dft import TaskStore
from schedlab.hip_dfpt.kernels import AoSource, StoredTask, response_task
from schedlab.hip_dfpt.memory import BufferPool, NoPool, PoolStats, merge_stats
from schedlab.hip_dfpt.policies import Plan
from schedlab.hip_dfpt.reduction import FixedPoint

#: the most response matrices one call may carry (the polarisability has 3)
MAX_DMS = 3
#: seconds a device may take to start (spawn + imports) or to finish one iteration
START_TIMEOUT, RUN_TIMEOUT = 120.0, 3600.0
#: weight of a device's latest task in its running rate (device CPU seconds per predicted second)
RATE_WEIGHT = 0.1
#: an idle device re-checks for a worthwhile steal after this long, doubling up to the maximum
#: (decisions are made in device time, so a late re-check costs wall time, not balance)
POLL_MIN, POLL_MAX = 1e-3, 2e-2
#: a device claims min(CHUNK[0], queued // CHUNK[1]) tasks at once (at least one)
CHUNK = (4, 16)

Spec = dict[str, tuple[int, tuple[int, ...], str]]  # name -> (offset, shape, dtype)


class Arena:
    """Named arrays packed into one ``SharedMemory`` block (64-byte aligned)."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.spec: Spec = {}
        offset = 0
        for name, array in arrays.items():
            self.spec[name] = (offset, tuple(array.shape), array.dtype.str)
            offset += -(-max(array.nbytes, 8) // 64) * 64
        self.shm = shared_memory.SharedMemory(create=True, size=max(offset, 64))
        self.name = self.shm.name
        try:
            views = attach_views(self.shm, self.spec)
            for name, array in arrays.items():
                views[name][...] = array
        except BaseException:
            views = {}
            with contextlib.suppress(BufferError):  # a view may still be alive in a frame
                self.shm.close()
            self.shm.unlink()
            raise
        self.views = views

    def close(self) -> None:
        self.views = {}
        self.shm.close()
        self.shm.unlink()


def attach_views(shm: shared_memory.SharedMemory, spec: Spec) -> dict[str, np.ndarray]:
    return {
        name: np.ndarray(shape, dtype=np.dtype(dt), buffer=shm.buf, offset=off)
        for name, (off, shape, dt) in spec.items()
    }


def pack_tasks(store: TaskStore, coords: np.ndarray | None) -> dict[str, np.ndarray]:
    """Flatten every task into a few arrays plus an int64 table of offsets and shapes."""
    tasks = store.tasks
    gga = bool(tasks and tasks[0].gga)
    # table columns: ao offset, fxc offset, idx offset, points offset, n_points, n_cols, branch
    table = np.zeros((len(tasks), 7), dtype=np.int64)
    ao_total = fxc_total = idx_total = pts_total = 0
    for i, t in enumerate(tasks):
        n_g, n_c = t.n_points, len(t.idx)
        table[i] = (ao_total, fxc_total, idx_total, pts_total, n_g, n_c, t.branch)
        ao_total += t.ao.size if t.ao is not None else 0
        fxc_total += t.fxc_w.size
        idx_total += n_c
        pts_total += len(t.points) if t.points is not None else 0
    ao = np.empty(ao_total)
    fxc, idx, pts = (
        np.empty(fxc_total),
        np.empty(idx_total, np.int64),
        np.empty(pts_total, np.int64),
    )
    for i, t in enumerate(tasks):
        a, f, x, p, n_g, n_c, _ = table[i]
        if t.ao is not None:
            ao[a : a + t.ao.size] = t.ao.ravel()
        fxc[f : f + t.fxc_w.size] = t.fxc_w.ravel()
        idx[x : x + n_c] = t.idx
        if t.points is not None:
            pts[p : p + len(t.points)] = t.points
    arrays = dict(
        table=table,
        ao=ao,
        fxc=fxc,
        idx=idx,
        points=pts,
        gga=np.array([int(gga), int(store.cached)], dtype=np.int64),
    )
    if coords is not None:
        arrays["coords"] = np.ascontiguousarray(coords, dtype=np.float64)
    return arrays


def unpack_tasks(views: dict[str, np.ndarray]) -> list[StoredTask]:
    """Zero-copy task views over the shared arena."""
    gga, cached = (bool(v) for v in views["gga"])
    nd = 4 if gga else 1
    tasks = []
    for a, f, x, p, n_g, n_c, branch in views["table"].tolist():
        ao = None
        if cached:
            flat = views["ao"][a : a + nd * n_g * n_c]
            ao = flat.reshape((4, n_g, n_c) if gga else (n_g, n_c))
        fflat = views["fxc"][f : f + (16 if gga else 1) * n_g]
        fxc = fflat.reshape((4, 4, n_g)) if gga else fflat
        points = views["points"][p : p + n_g] if not cached else None
        tasks.append(StoredTask(ao, views["idx"][x : x + n_c], fxc, int(branch), points))
    return tasks


def _attach(name: str) -> shared_memory.SharedMemory:
    """Map the parent's block without adopting it: before Python 3.13 every attaching process
    registers the block with its own resource tracker, which unlinks it when that process
    exits; the parent owns (and unlinks) it."""
    shm = shared_memory.SharedMemory(name=name)
    from multiprocessing import resource_tracker

    try:
        resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - tracker absent or already unregistered
        pass
    return shm


def _worker(
    device: int,
    streams: int,
    pooled: bool,
    deterministic: bool,
    arena: tuple,
    io: tuple,
    mol_dump: str | None,
    lock_path: str,
    throttle: Throttle | None,
    conn: Any,
) -> None:
    """A device process: map the arenas, then serve ("sample", ids, repeats) and ("run", ndm,
    steal) until "stop"."""
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    except ImportError:
        pass
    from pyscf import lib

    lib.num_threads(1)
    data_shm, io_shm = _attach(arena[0]), _attach(io[0])
    try:
        views, iov = attach_views(data_shm, arena[1]), attach_views(io_shm, io[1])
        tasks = unpack_tasks(views)
        source = None
        if mol_dump is not None:
            from pyscf import gto

            source = AoSource(gto.loads(mol_dump), views["coords"], tasks[0].gga)
        allocs = (
            [BufferPool() for _ in range(1)] * streams
            if pooled
            else [NoPool() for _ in range(streams)]
        )
        nao = iov["dms"].shape[1]
        queues = SharedQueues(iov, device, lock_path, streams)
        iteration = 0
        conn.send(("ready", device))
        while True:
            try:
                message = conn.recv()
            except EOFError:  # the parent is gone: nothing to report to
                break
            if message[0] == "stop":
                break
            if message[0] == "sample":
                _, ids, repeats = message
                reply = _sample(tasks, ids, repeats, iov, allocs[0], source, throttle)
            else:
                _, ndm, steal = message
                iteration += 1
                reply = _run(
                    device, streams, deterministic, tasks, queues, steal, iov, ndm, nao, allocs,
                    source, throttle, iteration,
                )
            conn.send(("done", reply))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        with contextlib.suppress(OSError):  # unless the parent is gone
            conn.send(("error", f"device {device}: {type(exc).__name__}: {exc}"))
    finally:
        data_shm.close()
        io_shm.close()


#: columns of the shared per-device state row (float64; the cursors are exact integers)
FRONT, BACK, CLOCK, INFLIGHT, RATE, REM, STEALS, FIELDS = range(8)


class SharedQueues:
    """A device's side of the iteration's shared queues, with stealing in *device time*.

    Every device's queue (its plan, largest predicted cost first) lies in one shared array;
    its row of ``state`` holds the queue's (front, back), the device's clock (CPU seconds of
    its finished tasks), in-flight reservations, ``rate`` (its running CPU seconds per
    predicted second, so a device that slows down shows it within a few tasks) and the
    predicted cost still queued. The owner's streams pop from the front. A device whose queue
    is empty takes the *last* (smallest) task of the device expected to finish last
    (clock + in-flight + rate x queued cost) when that makes it finish earlier than that device
    would. Clocks are CPU time, the yardstick of the live balance: on a machine with fewer
    free cores than devices, wall-time order would hand work to whichever process the OS
    scheduled, not to the faster device. State changes happen under one lock (``flock`` on a
    shared file, plus a thread lock when the device has several streams); a task's finish and
    the next claim share one locked section, and a row is read and written whole."""

    def __init__(
        self, iov: dict[str, np.ndarray], device: int, lock_path: str, streams: int = 1
    ) -> None:
        self.state, self.queue, self.pred = iov["state"], iov["queue"], iov["pred"]
        self.device = device
        # one lock per device queue: the owner's pops never wait for other devices' pops;
        # only a thief and its victim meet
        self.fds = [os.open(f"{lock_path}.{d}", os.O_RDWR) for d in range(len(self.state))]
        self.tlock = threading.Lock() if streams > 1 else contextlib.nullcontext()

    @contextlib.contextmanager
    def locked(self, device: int) -> Any:
        fcntl.flock(self.fds[device], fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self.fds[device], fcntl.LOCK_UN)

    def next(
        self, steal: bool, done: tuple[float, float, float, int] | None = None
    ) -> tuple[list[int], float, float] | bool:
        """Record the finished claim ``done`` = (reserved, cpu seconds, predicted cost, tasks),
        then claim the next: (task ids, reserved device seconds, predicted cost). Far from the
        end of its queue a device claims a few tasks at once (``CHUNK``: fewer locked
        sections), near the end one at a time. False when this device is done (every queue
        empty, or its own when not stealing); True when only a steal that would not help is
        left (poll again)."""
        d, state = self.device, self.state
        with self.tlock:
            fd = self.fds[d]
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                row = state[d].tolist()
                if done is not None:
                    reserved, cpu, p, k = done
                    row[INFLIGHT] -= reserved
                    row[CLOCK] += cpu
                    if p > 0:
                        weight = 1.0 - (1.0 - RATE_WEIGHT) ** k
                        row[RATE] += weight * (cpu / p - row[RATE])
                front = int(row[FRONT])
                left = int(row[BACK]) - front
                if left > 0:
                    k = max(1, min(CHUNK[0], left // CHUNK[1]))
                    ids = self.queue[front : front + k].tolist()
                    p = float(self.pred[ids].sum()) if k > 1 else float(self.pred[ids[0]])
                    cost = row[RATE] * p
                    row[FRONT] += k
                    row[REM] -= p
                    row[INFLIGHT] += cost
                    state[d] = row
                    return ids, cost, p
                state[d] = row
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            if not steal:
                return False
            # a snapshot without locks chooses the victim; the claim re-checks under its lock
            rows = state.tolist()
            victim, latest = -1, -np.inf
            for v, r in enumerate(rows):
                if v != d and r[FRONT] < r[BACK]:
                    finish = r[CLOCK] + r[INFLIGHT] + r[RATE] * r[REM]
                    if finish > latest:
                        victim, latest = v, finish
            if victim < 0:
                return False
            with self.locked(victim):
                front, back = (int(x) for x in state[victim, FRONT : BACK + 1])
                if front >= back:
                    return True  # emptied meanwhile: look again
                task = int(self.queue[back - 1])
                p = float(self.pred[task])
                cost = row[RATE] * p
                if row[CLOCK] + row[INFLIGHT] + cost >= latest:
                    return True
                state[victim, BACK] = back - 1
                state[victim, REM] -= p
            with self.locked(d):
                state[d, INFLIGHT] += cost
                state[d, STEALS] += 1
            return [task], cost, p


def _sample(
    tasks: list[StoredTask],
    ids: np.ndarray,
    repeats: int,
    iov: dict[str, np.ndarray],
    alloc: Any,
    source: AoSource | None,
    throttle: Throttle | None,
) -> np.ndarray:
    """Thread CPU time of each sample task run alone (min of ``repeats``), throttle included:
    this device's side of the 5%-sample calibration."""
    dms = iov["dms"]
    out = np.zeros_like(dms)
    slow = throttle is not None and throttle.active(0, 0)
    seconds = np.empty(len(ids))
    for k, task in enumerate(ids.tolist()):
        best = np.inf
        for _ in range(repeats):
            c0 = time.thread_time()
            response_task(tasks[task], dms, out, alloc, np, source)
            if slow:
                stretch_cpu(c0, throttle.factor)  # type: ignore[union-attr]
            best = min(best, time.thread_time() - c0)
        seconds[k] = best
    return seconds


def _run(
    device: int,
    streams: int,
    deterministic: bool,
    tasks: list[StoredTask],
    queues: SharedQueues,
    steal: bool,
    iov: dict[str, np.ndarray],
    ndm: int,
    nao: int,
    allocs: list,
    source: AoSource | None,
    throttle: Throttle | None,
    iteration: int,
) -> dict[str, Any]:
    start, cpu0 = time.perf_counter(), time.process_time()
    dms = iov["dms"][:ndm]
    wall, cpu = iov["task_wall"], iov["task_cpu"]
    owner, order = iov["task_dev"], iov["task_seq"]
    lock = queues.tlock
    count = [0]  # tasks started in this iteration (the throttle's trigger; the run order)
    parts = [
        FixedPoint((ndm, nao, nao)) if deterministic else np.zeros((ndm, nao, nao))
        for _ in range(streams)
    ]

    def stream(s: int) -> None:
        pause, done = POLL_MIN, None
        while True:
            got = queues.next(steal, done)
            done = None
            if got is False:
                return
            if got is True:  # work is left elsewhere, but taking any of it would not help yet
                time.sleep(pause)
                pause = min(2 * pause, POLL_MAX)
                continue
            pause = POLL_MIN
            claimed, cost, predicted = got
            spent_all = 0.0
            for task in claimed:
                with lock:
                    slow = throttle is not None and throttle.active(iteration, count[0])
                    count[0] += 1
                    order[task] = count[0]
                    owner[task] = device
                t0, c0 = time.perf_counter(), time.thread_time()
                response_task(tasks[task], dms, parts[s], allocs[s], np, source)
                if slow:
                    stretch_cpu(c0, throttle.factor)  # type: ignore[union-attr]
                spent = time.thread_time() - c0
                wall[task] = time.perf_counter() - t0
                cpu[task] = spent
                spent_all += spent
            done = (cost, spent_all, predicted, len(claimed))

    if streams == 1:
        stream(0)
    else:
        threads = [threading.Thread(target=stream, args=(s,)) for s in range(streams)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    hi, lo = iov["out_hi"][device, :ndm], iov["out_lo"][device, :ndm]
    if deterministic:
        total = parts[0]
        for part in parts[1:]:
            total.merge(part)
        total.carry()
        hi[...], lo[...] = total.hi, total.lo
    else:
        iov["out_float"][device, :ndm] = sum(parts[1:], parts[0])
    end = time.perf_counter()
    pool = merge_stats(list({id(a): a.stats for a in allocs}.values()))
    return dict(
        start=start,
        end=end,
        process_cpu=time.process_time() - cpu0,
        pool=(pool.requests, pool.hits, pool.allocations, pool.bytes_allocated, pool.peak_in_use),
    )


class ProcessBackend:
    """D device processes (spawned), each with S stream threads, over shared memory."""

    def __init__(
        self,
        store: TaskStore,
        devices: int,
        streams: int,
        pooled: bool,
        xp: Any,
        deterministic: bool = True,
        throttle: dict[int, Throttle] | None = None,
    ) -> None:
        if xp is not np:
            raise ConfigError(
                "the process backend runs on CPU (use --executor local with --gpu)",
                field="executor",
            )
        self.devices, self.nao, self.ntasks = devices, store.nao, len(store.tasks)
        coords = mol_dump = None
        if not store.cached:
            source = store.ao_source
            coords, mol_dump = source.coords, source.mol.dumps()  # type: ignore[union-attr]
        self.deterministic = deterministic
        self.conns, self.procs = [], []
        self.arena = Arena(pack_tasks(store, coords))
        shape = (devices, MAX_DMS, store.nao, store.nao)
        try:  # a failure here (no room in /dev/shm, Ctrl-C) must not leave the first arena
            self.io = Arena(
                dict(
                    dms=np.zeros((MAX_DMS, store.nao, store.nao)),
                    out_hi=np.zeros(shape, np.int64),
                    out_lo=np.zeros(shape, np.int64),
                    out_float=np.zeros(shape) if not deterministic else np.zeros(1),
                    task_wall=np.full(self.ntasks, np.nan),
                    task_cpu=np.full(self.ntasks, np.nan),
                    # the iteration's queues and the device-time state stealing reads
                    pred=np.ones(self.ntasks),
                    queue=np.zeros(self.ntasks, np.int64),
                    state=np.zeros((devices, FIELDS)),
                    task_dev=np.full(self.ntasks, -1, np.int64),
                    task_seq=np.zeros(self.ntasks, np.int64),
                )
            )
            lock_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
            handle, self.lock_path = tempfile.mkstemp(prefix="hip_dfpt_", dir=lock_dir)
            os.close(handle)
            for d in range(devices):  # one lock file per device queue
                os.close(os.open(f"{self.lock_path}.{d}", os.O_CREAT | os.O_RDWR, 0o600))
            key = secrets.token_bytes(32)
            listener = Listener(family="AF_UNIX", authkey=key)
        except BaseException:
            self.close()
            raise
        env = dict(
            os.environ,
            HIP_DFPT_AUTHKEY=key.hex(),
            OMP_NUM_THREADS="1",
            OPENBLAS_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
        )
        try:
            for _ in range(devices):
                # a fresh interpreter per device (not fork: PySCF's OpenMP is not fork-safe;
                # not multiprocessing's spawn: that re-imports the caller's main script)
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "schedlab.hip_dfpt.procdevice", listener.address],
                        env=env,
                        stdin=subprocess.DEVNULL,
                    )
                )
            for d in range(devices):
                conn = self._accept(listener)
                conn.send(
                    (
                        d,
                        streams,
                        pooled,
                        deterministic,
                        (self.arena.name, self.arena.spec),
                        (self.io.name, self.io.spec),
                        mol_dump,
                        self.lock_path,
                        (throttle or {}).get(d),
                    )
                )
                self.conns.append(conn)
            for conn in self.conns:
                self._receive(conn, START_TIMEOUT, "ready")
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()

    def _accept(self, listener: Listener) -> Any:
        box: list[Any] = []
        thread = threading.Thread(target=lambda: box.append(listener.accept()), daemon=True)
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(0.2)
            dead = [p.returncode for p in self.procs if p.poll() is not None]
            if dead and not box:
                raise ConfigError(
                    f"a device process exited at start (code {dead[0]})", field="executor"
                )
        if not box:
            raise ConfigError(
                f"no device process connected in {START_TIMEOUT:.0f} s", field="executor"
            )
        return box[0]

    def _receive(self, conn: Any, timeout: float, expect: str) -> Any:
        if not conn.poll(timeout):
            raise ConfigError(
                f"a device process gave no '{expect}' in {timeout:.0f} s", field="executor"
            )
        try:
            kind, payload = conn.recv()
        except EOFError:
            raise ConfigError(
                f"a device process died before '{expect}'", field="executor"
            ) from None
        if kind == "error":
            raise ConfigError(str(payload), field="executor")
        return payload

    def time_sample(self, ids: np.ndarray, dms: np.ndarray, repeats: int = 2) -> np.ndarray:
        """(devices, len(ids)) thread CPU seconds: every device times the same sample tasks
        (min of ``repeats``), so their speeds compare on equal work."""
        self.io.views["dms"][: len(dms)] = dms
        for conn in self.conns:
            conn.send(("sample", np.asarray(ids, np.int64), repeats))
        return np.array([self._receive(conn, RUN_TIMEOUT, "done") for conn in self.conns])

    def execute(
        self,
        plan: Plan,
        dms: Any,
        seed: int,
        predicted: np.ndarray | None = None,
        rates: np.ndarray | None = None,
        steal: bool = False,
    ) -> list[Any]:
        """Run one iteration. With ``steal`` idle devices take tasks from the device expected
        to finish last (in device CPU time, from ``predicted`` costs and each device's
        ``rates``, CPU seconds per predicted second, refined live); without it every device
        runs exactly its part of the plan."""
        from schedlab.hip_dfpt.devicerun import DeviceResult

        ndm = dms.shape[0]
        if ndm > MAX_DMS:
            raise ConfigError(
                f"the process backend takes at most {MAX_DMS} response matrices "
                f"per call, got {ndm}",
                field="dms",
            )
        views = self.io.views
        views["dms"][:ndm] = dms
        views["task_wall"][...] = np.nan
        views["task_cpu"][...] = np.nan
        views["task_dev"][...] = -1
        assignment = [plan.device_tasks(d) for d in range(plan.devices)]
        pred = np.ones(self.ntasks) if predicted is None else np.asarray(predicted, float)
        views["pred"][...] = pred
        views["queue"][...] = np.concatenate(assignment)
        sizes = np.array([len(a) for a in assignment])
        state = views["state"]
        state[...] = 0.0
        state[:, BACK] = np.cumsum(sizes)
        state[:, FRONT] = state[:, BACK] - sizes
        state[:, RATE] = 1.0 if rates is None else rates
        state[:, REM] = [pred[a].sum() for a in assignment]
        for conn in self.conns:
            conn.send(("run", ndm, steal))
        replies = [self._receive(conn, RUN_TIMEOUT, "done") for conn in self.conns]
        owner, seq = views["task_dev"], views["task_seq"]
        if (owner < 0).any():
            raise ConfigError("a task was not run by any device", field="executor")
        results = []
        for d, reply in enumerate(replies):
            ran = np.flatnonzero(owner == d)
            ran = ran[np.argsort(seq[ran], kind="stable")]  # the device's completion order
            wall, cpu = views["task_wall"][ran], views["task_cpu"][ran]
            if self.deterministic:
                out = FixedPoint(
                    (ndm, self.nao, self.nao),
                    np,
                    views["out_hi"][d, :ndm].copy(),
                    views["out_lo"][d, :ndm].copy(),
                )
            else:
                out = views["out_float"][d, :ndm].copy()
            results.append(
                DeviceResult(
                    out=out,
                    task_seconds=dict(zip(ran.tolist(), wall.tolist(), strict=True)),
                    start=reply["start"],
                    end=reply["end"],
                    steals=int(state[d, STEALS]),
                    pool=PoolStats(*reply["pool"]),
                    task_cpu=dict(zip(ran.tolist(), cpu.tolist(), strict=True)),
                    overhead_cpu=float(reply["process_cpu"] - cpu.sum()),
                )
            )
        return results

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.terminate()
                proc.wait(timeout=10)
        self.conns, self.procs = [], []
        for arena in ("arena", "io"):
            if hasattr(self, arena):
                getattr(self, arena).close()
        if getattr(self, "lock_path", None):
            for path in [self.lock_path] + [f"{self.lock_path}.{d}" for d in range(self.devices)]:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            self.lock_path = ""


def main(address: str) -> None:
    """Entry point of a device process: connect back, take the configuration, serve.

    Ctrl-C reaches the whole process group; the parent handles it (stops, then terminates its
    devices and unlinks the arenas), so a device ignores SIGINT rather than printing a
    traceback each. A device whose parent vanished sees EOF on its pipe and exits."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Client(address, authkey=bytes.fromhex(os.environ["HIP_DFPT_AUTHKEY"]))
    config = conn.recv()
    _worker(*config, conn)
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
