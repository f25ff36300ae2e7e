"""Issue 52: every process's I/O in a foreign trace (a multiprocessing parent's own reads,
dftracer annotations as phases, DXT_MPIIO), a floor on findings ("not I/O-bound"), the MPI
runtime's own files set aside, and the vectorised report.

``data/dftracer_multiprocess`` is a real dftracer 2.2 trace (pydftracer, MIT) of ``app.py``
beside it: the parent writes 4 shards of 512 KiB (region ``setup``), reads them back in 4 KiB
calls (``scan``), starts 2 multiprocessing workers (``epoch`` with one ``step`` per shard) and
reduces their outputs (``reduce``). Recorded on a loaded machine: the spawned workers took
~55 s to start."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from schedlab.core.data import data_dir
from schedlab.dataflowdrs import read_trace
from schedlab.dataflowdrs.engine import diagnose
from schedlab.dataflowdrs.tracedata import is_runtime_file

MP = Path(__file__).parent / "data" / "dftracer_multiprocess"
LOGS = data_dir() / "darshan"
MIB = 1 << 20


def _task_bytes(trace, prefix: str, op: str) -> int:
    pids = trace.tasks.filter(pl.col("task").str.starts_with(prefix))["pid"].to_list()
    ops = trace.ops.filter(pl.col("pid").is_in(pids) & (pl.col("op") == op))
    return int(ops["bytes"].sum())


def test_multiprocessing_parent_keeps_its_own_io_and_annotations_are_phases():
    trace = read_trace(MP)
    groups = trace.tasks["group"].to_list()
    assert sorted(g for g in groups if g != "python") == ["epoch", "epoch", "reduce", "scan",
                                                          "setup"]
    # the parent's own 4 KiB reads of the 4 shards (512 calls) are a task, not dropped
    assert _task_bytes(trace, "scan-", "read") == 2 * MIB
    scan = trace.tasks.filter(pl.col("group") == "scan")["pid"][0]
    assert trace.ops.filter((pl.col("pid") == scan) & (pl.col("op") == "read")).height >= 512
    assert _task_bytes(trace, "setup-", "write") == 2 * MIB
    assert _task_bytes(trace, "epoch-", "read") == 2 * MIB  # each worker hashes 2 shards
    # no byte is lost: the tasks' bytes are every traced byte
    assert int(trace.ops.filter(pl.col("op") == "read")["bytes"].sum()) == sum(
        _task_bytes(trace, p, "read") for p in ("scan-", "epoch-", "reduce-", "python-"))
    d = diagnose(MP)
    critical = d.analysis.dfl.tasks.filter(pl.col("critical"))["task"].to_list()
    assert any(t.startswith("scan-") for t in critical)
    assert any(t.startswith("reduce-") for t in critical)  # the parent's tail ends the run
    # spawned workers started ~55 s late: not "queued for a worker" (no scheduler events)
    assert "parallelism" not in [b.kind for b in d.ranked]


def _pfw(path: Path, events: list[dict]) -> None:
    path.write_text("[\n" + "\n".join(json.dumps(e) for e in events) + "\n")


def _io(pid: int, name: str, ts: float, dur: float, fname: str, ret: int = 0) -> dict:
    return dict(name=name, cat="POSIX", pid=pid, tid=pid, ts=int(ts * 1e6), dur=int(dur * 1e6),
                args=dict(fname=fname, ret=ret))


def test_parent_io_outside_its_childrens_lives_is_its_own_task(tmp_path):
    """No annotations: a parent reads before and after its child runs; both stretches are
    tasks of their own; its calls during the child's life stay with the container (and so
    does a stretch of a few small calls: a shell reading its script, test_dataflowdrs_outside)."""
    start = lambda pid, ppid: dict(name="start", cat="dftracer", pid=pid, tid=pid,  # noqa: E731
                                   ts=0, dur=0, args=dict(ppid=ppid, cmd_hash="python"))
    parent = [start(100, 1)] + [_io(100, "read", 1.0 + i * 0.01, 0.005, "/d/in", 4096)
                                for i in range(200)]
    parent += [_io(100, "read", 5.0, 0.001, "/d/mid", 10)]
    parent += [_io(100, "read", 9.0 + i * 0.001, 0.0005, "/d/out", 4096) for i in range(100)]
    child = [start(200, 100), _io(200, "write", 3.0, 0.1, "/d/out", 4096),
             _io(200, "read", 7.0, 0.1, "/d/in", 4096)]
    _pfw(tmp_path / "p.pfw", parent)
    _pfw(tmp_path / "c.pfw", child)
    trace = read_trace(tmp_path)
    own = trace.tasks.filter(pl.col("task").str.contains(r"\.own"))
    assert own.height == 2
    assert sorted(own["start"].to_list()) == pytest.approx([1.0, 9.0])
    pids = own["pid"].to_list()
    assert trace.ops.filter(pl.col("pid").is_in(pids))["bytes"].sum() == 300 * 4096
    container = trace.tasks.filter(pl.col("pid") == 100)
    assert container.height == 1 and container["end"][0] == container["start"][0]


@pytest.mark.parametrize("path, runtime", [
    ("/tmp/ompi.node1.1000/pid.5/1/vader_segment.node1.0", True),
    ("/dev/shm/vader_segment.n1.c8a20001.0", True),
    ("/tmp/prte.host.0/dvm/1/session", True),
    ("/proc/self/maps", True), ("/sys/devices/system/cpu/online", True),
    ("/dev/null", True), ("<STDOUT>", True),
    ("/dev/shm/schedlab-dfd-x/tmpfs/part0", False),  # data kept in /dev/shm is data
    ("/tmp/ompi_results.h5", False), ("/scratch/run/out.h5", False), ("rel/a.txt", False),
])
def test_runtime_files_are_known(path, runtime):
    assert is_runtime_file(path) is runtime


def test_mpi_shm_is_never_shared_file_contention_or_pack_files(tmp_path):
    """Two ranks hammer OpenMPI's shared-memory segment and /proc; the job's one data file is
    written once. The shm and /proc are set aside and counted, not findings."""
    shm = "/tmp/ompi.n1.0/pid.7/1/vader_segment.n1.0"
    events = []
    for pid in (10, 11):
        events += [dict(name="start", cat="dftracer", pid=pid, tid=pid, ts=0, dur=0,
                        args=dict(ppid=1, cmd_hash="a.out"))]
        events += [_io(pid, "open64", 0.01, 0.001, f"/proc/{pid}/status")]
        events += [_io(pid, "write", 0.02 + i * 0.001, 0.0008, shm, 64) for i in range(200)]
        events += [_io(pid, "open64", 0.3 + i * 0.001, 0.0005, f"/dev/shm/sem.mpi{i}")
                   for i in range(5)]
    events += [_io(10, "write", 0.5, 0.3, "/scratch/out.dat", 8 * MIB)]
    _pfw(tmp_path / "t.pfw", events)
    trace = read_trace(tmp_path)
    # /proc and /dev are not kept from a bare trace at all; the MPI segment is set aside
    assert shm in trace.meta["runtime_files"]["examples"]
    assert not trace.ops.filter(pl.col("path").map_elements(
        is_runtime_file, return_dtype=pl.Boolean)).height
    d = diagnose(tmp_path)
    kinds = {(b.kind, b.target) for b in d.ranked + d.below_floor}
    assert ("shared-file", shm) not in kinds
    assert "metadata" not in {k for k, _ in kinds}  # 5 sem files + /proc: not pack-files


def test_small_io_share_is_not_io_bound_and_says_by_how_much(tmp_path):
    """3 small files opened and read, then 10 s of compute: I/O is ~0.1% of the run."""
    events = [dict(name="start", cat="dftracer", pid=5, tid=5, ts=0, dur=0,
                   args=dict(ppid=1, cmd_hash="app"))]
    for i in range(3):
        events += [_io(5, "open64", 0.01 * i, 0.002, f"/d/f{i}"),
                   _io(5, "read", 0.01 * i + 0.003, 0.002, f"/d/f{i}", 100)]
    events += [_io(5, "read", 10.0, 0.001, "/d/f0", 0)]
    _pfw(tmp_path / "t.pfw", events)
    d = diagnose(tmp_path)
    io = d.summary()["io"]
    assert not io["io_bound"] and io["verdict"].startswith("not I/O-bound")
    assert "points under the 10% floor" in io["verdict"]
    assert not [b for b in d.ranked if b.kind in ("metadata", "small-io")]
    assert d.below_floor  # what was found is still said, below the floor


def test_timeline_is_three_collections_not_a_patch_per_bar():
    from schedlab.dataflowdrs.viz import timeline_figure

    class D:  # the DFL's task table is all the timeline reads
        tasks = pl.DataFrame({"task": [f"r{i}" for i in range(3000)],
                              "start": [float(i % 7) for i in range(3000)],
                              "wait": [0.1] * 3000, "io": [0.5] * 3000,
                              "compute": [0.2] * 3000, "duration": [0.7] * 3000,
                              "critical": [i == 5 for i in range(3000)]})

    import matplotlib.pyplot as plt

    fig = timeline_figure(D())
    ax = fig.axes[0]
    assert len(ax.collections) == 3 and not ax.patches
    assert fig.get_size_inches()[1] <= 14.0 and not ax.get_yticklabels()
    plt.close(fig)


def test_darshan_dxt_mpiio_is_read_and_used_where_posix_dxt_is_missing():
    pytest.importorskip("darshan", reason="PyDarshan is not installed")
    from schedlab.dataflowdrs.darshan import _ops

    if not (LOGS / "ior_hdf5_example.darshan").is_file():
        pytest.skip(f"example Darshan logs not found under {LOGS}")
    trace = read_trace(LOGS / "ior_hdf5_example.darshan")
    assert trace.meta["dxt"]["DXT_POSIX"] > 0 and trace.meta["dxt"]["DXT_MPIIO"] > 0
    assert "<STDOUT>" in trace.meta["runtime_files"]["examples"]
    mpi = pl.DataFrame({"rank": [0, 1], "id": [1, 1], "write": [1, 0], "offset": [0, 4096],
                        "length": [4096, 100], "start": [0.5, 0.7], "end": [0.6, 0.8],
                        "path": ["/f.h5", "/f.h5"]},
                       schema_overrides={"id": pl.UInt64, "write": pl.Int8})
    ops = _ops(trace.profile.with_columns(pl.lit(0.0).alias("_start")).clear(),
               {"DXT_MPIIO": mpi}, 100.0)
    assert ops["op"].to_list() == ["write", "read"] and ops["offset"].to_list() == [0, 4096]
    assert ops["ts"].to_list() == pytest.approx([100.5, 100.7])
