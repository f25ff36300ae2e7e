"""The ahead-of-time compiled kernel (aot.py): same search as the JIT, no Numba in a solve.

The compiled module is built once per session into the user's cache (what ``solve`` itself
uses); every test that needs it skips when it cannot be built here (no C compiler, ...).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from schedlab.core.errors import ConfigError
from schedlab.hydra_mcs import aot, solve, solve_files
from schedlab.hydra_mcs import layout as aot_layout
from schedlab.hydra_mcs.graph import induced, mcsplit_order, to_bitsets
from schedlab.hydra_mcs.readers import read_graph
from schedlab.hydra_mcs.state import Searcher
from schedlab.hydra_mcs.workloads import gnp_pairs, planted_pair

HEAVY = ("numba", "llvmlite", "scipy", "polars", "pandas", "networkx", "matplotlib")


@pytest.fixture(scope="session")
def aot_ready():
    try:
        return aot.build()
    except aot.AotUnavailable as exc:
        pytest.skip(f"the AOT kernel cannot be built here: {exc}")


def _with(monkeypatch, kind: str) -> None:
    monkeypatch.setenv(aot.KIND_ENV, kind)


def test_exported_arguments_are_the_kernels():
    from schedlab.hydra_mcs import kernel

    params = list(inspect.signature(kernel.search.py_func).parameters)
    assert params == [name for name, _, _ in aot.ARGS]
    assert aot.signature().startswith("int64(uint64[:, :, ::1], uint64[:, :, ::1], ")


FLAGS = [
    {},
    {"labels": "all"},
    {"labels": "vertex"},
    {"connected": True},
    {"directed": True},
    {"directed": True, "labels": "all"},
    {"big_first": True},
    {"heuristic": "min_product"},
]


@pytest.mark.parametrize("pair", ["s20.?00", "s20.?02"])
@pytest.mark.parametrize(
    "flags", FLAGS, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()) or "plain"
)
def test_aot_and_jit_agree_on_arg_pairs(shared_data, aot_ready, monkeypatch, pair, flags):
    a, b = (shared_data / "mcs" / pair.replace("?", x) for x in "AB")
    seen = {}
    for kind in ("jit", "aot"):
        _with(monkeypatch, kind)
        r = solve_files(a, b, **flags)
        assert r.kernel == kind
        seen[kind] = (r.size, r.nodes, r.optimal)
    assert seen["aot"] == seen["jit"]


@pytest.mark.parametrize("seed", [1, 2])
def test_aot_and_jit_agree_on_gnp_and_planted(aot_ready, monkeypatch, seed):
    insts = gnp_pairs(3, 14, 0.35, seed=seed) + [planted_pair(16, 9, 0.3, seed=seed)]
    for inst in insts:
        for kw in ({}, {"connected": True}, {"big_first": True}):
            out = {}
            for kind in ("jit", "aot"):
                _with(monkeypatch, kind)
                r = solve(inst.g0, inst.g1, **kw)
                out[kind] = (r.size, r.nodes, r.mapping)
            assert out["aot"] == out["jit"]


def test_aot_threads_and_offload_buffers(shared_data, aot_ready, monkeypatch):
    """Two threads (tasks cut and resumed) find McSplit's optimum with the compiled kernel."""
    _with(monkeypatch, "aot")
    a, b = (shared_data / "mcs" / f"s20.{x}01" for x in "AB")
    for policy in ("hydra-cpu", "naive-parallel"):
        r = solve_files(a, b, policy=policy, threads=2)
        assert (r.kernel, r.size, r.optimal) == ("aot", 12, True)


def test_aot_kernel_releases_the_gil(shared_data, aot_ready, monkeypatch):
    _with(monkeypatch, "aot")
    g0 = read_graph(shared_data / "mcs" / "s30.A02")
    g1 = read_graph(shared_data / "mcs" / "s30.B02")
    o0, o1 = mcsplit_order(g0, g1)
    s0 = induced(g0, o0)
    s = Searcher(to_bitsets(s0, induced(g1, o1)), s0.n)
    assert s.kernel == "aot"
    s.load_root()
    done = threading.Event()
    window: list[float] = []

    def work():
        window.append(time.perf_counter())
        s.run(np.zeros(4, np.int64), 3_000_000)
        window.append(time.perf_counter())
        done.set()

    ticks: list[float] = []
    worker = threading.Thread(target=work)
    worker.start()
    while not done.is_set():
        time.sleep(0.002)
        ticks.append(time.perf_counter())
    worker.join()
    enter, leave = window
    if leave - enter < 0.1:
        pytest.skip(f"the budget ran out too fast ({leave - enter:.3f} s) to tell")
    assert s.nodes >= 3_000_000  # the budget counts steps (a pruned child may add one)
    # a kernel holding the GIL would let this thread run no iteration between enter and leave
    inside = [t for t in ticks if enter < t < leave]
    assert len(inside) >= 3, (len(inside), leave - enter)


def test_wrong_array_types_go_to_the_jit(aot_ready, monkeypatch):
    _with(monkeypatch, "aot")
    inst = gnp_pairs(1, 10, 0.4, seed=3)[0]
    o0, o1 = mcsplit_order(inst.g0, inst.g1)
    s0 = induced(inst.g0, o0)
    bits = to_bitsets(s0, induced(inst.g1, o1))
    ref = Searcher(bits, s0.n)
    ref.load_root()
    ref.run(np.zeros(4, np.int64), 1 << 62)
    s = Searcher(bits, s0.n)
    s.trace = np.asfortranarray(np.zeros((3, 8)))  # 2-D, float64, but not C-contiguous
    s.load_root()
    s.run(np.zeros(4, np.int64), 1 << 62)
    assert s.kernel == "jit" and (s.nodes, s.best) == (ref.nodes, ref.best)
    t = Searcher(bits, s0.n)
    t.load_root()
    assert t.run(np.zeros(4, np.int64), 10) == aot_layout.BUDGET_SPENT
    assert t.kernel == "aot" and t.nodes >= 10
    t.run(np.zeros(4, np.int32), 1 << 62)  # a wrong ``shared`` array on a later call
    assert t.kernel == "jit" and (t.nodes, t.best) == (ref.nodes, ref.best)


def test_build_failure_falls_back_to_jit_with_one_note(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(aot.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(aot, "_CHOSEN", {})
    monkeypatch.setattr(
        aot,
        "_build_command",
        lambda out, name: [sys.executable, "-c", "import sys; sys.exit('cc: command not found')"],
    )
    _with(monkeypatch, "auto")
    inst = gnp_pairs(1, 10, 0.4, seed=5)[0]
    first = solve(inst.g0, inst.g1)
    second = solve(inst.g0, inst.g1)
    err = capsys.readouterr().err.strip().splitlines()
    assert first.kernel == second.kernel == "jit" and first.nodes == second.nodes
    assert len(err) == 1 and "cc: command not found" in err[0] and "JIT" in err[0], err
    failed = list((tmp_path / "cache").glob("hmk_*.failed"))
    assert len(failed) == 1 and not list((tmp_path / "cache").glob("hmk_*.*.*"))
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]  # temp dir removed
    # a new process (fresh choice) does not retry the failed build; "aot" says why, one line
    monkeypatch.setattr(aot, "_CHOSEN", {})
    monkeypatch.setattr(aot, "_build_command", lambda out, name: pytest.fail("rebuilt"))
    assert solve(inst.g0, inst.g1).kernel == "jit"
    _with(monkeypatch, "aot")
    with pytest.raises(aot.AotUnavailable, match="cc: command not found"):
        solve(inst.g0, inst.g1)


def test_damaged_cache_file_is_rebuilt_not_left_to_jit(tmp_path, aot_ready, monkeypatch, capsys):
    monkeypatch.setenv(aot.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(aot, "_CHOSEN", {})
    target = aot.module_path()
    target.write_bytes(b"garbage\n")  # a truncated copy, a full disk, ...
    monkeypatch.setattr(
        aot,
        "_build_command",
        lambda out, name: [
            sys.executable,
            "-c",
            "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])",
            str(aot_ready),
            str(out / aot_ready.name),
        ],
    )
    _with(monkeypatch, "auto")
    inst = gnp_pairs(1, 10, 0.4, seed=5)[0]
    assert solve(inst.g0, inst.g1).kernel == "aot"
    assert target.read_bytes() == aot_ready.read_bytes()
    assert "rebuilding" in capsys.readouterr().err


def test_bad_kernel_choice_names_the_variable(monkeypatch):
    _with(monkeypatch, "pycc")
    inst = gnp_pairs(1, 6, 0.4, seed=5)[0]
    with pytest.raises(ConfigError, match=aot.KIND_ENV):
        solve(inst.g0, inst.g1)


_PROBE = """
import json, sys
sys.argv = ["schedlab", "hydra-mcs", "solve", sys.argv[1], sys.argv[2], "--json"]
from schedlab.cli import main
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r}
               or m == "schedlab.hydra_mcs.kernel")
print("MODULES " + json.dumps(heavy), file=sys.stderr)
"""


def test_solve_process_imports_no_numba_scipy_polars(shared_data, aot_ready):
    a, b = (shared_data / "mcs" / f"s20.{x}00" for x in "AB")
    env = {k: v for k, v in os.environ.items() if k != aot.KIND_ENV}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), str(a), str(b)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout)
    assert (result["size"], result["nodes"], result["kernel"]) == (12, 261018, "aot")
    line = [ln for ln in done.stderr.splitlines() if ln.startswith("MODULES ")]
    assert json.loads(line[0][len("MODULES ") :]) == []


def test_build_command_reports_the_module(aot_ready):
    from typer.testing import CliRunner

    from schedlab.hydra_mcs.cli import app

    out = CliRunner().invoke(app, ["build", "--json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.stdout)
    assert row["module"] == str(aot_ready) and row["built"] is False


def test_jit_choice_never_builds(tmp_path, monkeypatch):
    monkeypatch.setenv(aot.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(aot, "_CHOSEN", {})
    _with(monkeypatch, "jit")
    assert aot.search_function()[0] == "jit"
    assert not list(tmp_path.iterdir())  # "jit" never builds


@pytest.mark.slow
def test_concurrent_builders_share_one_build(tmp_path):
    """Two processes building into an empty cache at once: one compiles, the other waits."""
    env = {**os.environ, aot.CACHE_ENV: str(tmp_path)}
    code = "from schedlab.hydra_mcs import aot; print(aot.build())"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=900) for p in procs]
    if any(p.returncode for p in procs):
        if "failed" in outs[0][1]:
            pytest.skip("the AOT kernel cannot be built here")
        raise AssertionError(outs)
    paths = {o[0].strip() for o in outs}
    assert len(paths) == 1
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")] == [
        os.path.basename(paths.pop())
    ]


def test_prune_removes_only_stale_leftovers(tmp_path):
    old = time.time() - 7200
    stale_dir = tmp_path / "hmk_aaaa.x1y2"
    stale_dir.mkdir()
    fresh_dir = tmp_path / "hmk_bbbb.z3w4"
    fresh_dir.mkdir()
    for name in ("hmk_aaaa.lock", "hmk_keep.lock", "hmk_cccc.cpython-311-x86_64-linux-gnu.so"):
        (tmp_path / name).write_text("")
    for p in (
        stale_dir,
        tmp_path / "hmk_aaaa.lock",
        tmp_path / "hmk_keep.lock",
        tmp_path / "hmk_cccc.cpython-311-x86_64-linux-gnu.so",
    ):
        os.utime(p, (old, old))
    aot._prune(tmp_path, keep="hmk_keep")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "hmk_bbbb.z3w4",
        "hmk_cccc.cpython-311-x86_64-linux-gnu.so",
        "hmk_keep.lock",
    ]
