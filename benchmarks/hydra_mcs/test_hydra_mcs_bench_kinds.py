"""Issue 49: whole CLI calls vs the reference McSplit, per kind of instance, CPU and memory.

One ``schedlab hydra-mcs solve A B --json --no-mapping [flags]`` process per pair against one
reference ``mcsp [flags] A B`` process per pair (james-cpp, built unmodified under /tmp with
``g++ -O3 -march=native``; set ``HYDRA_MCS_REF``), run alternately in the same minutes. Each
process is timed by ``os.wait4`` (user + sys CPU and max RSS of that process alone). Every size
and node count must equal the reference's.

Kinds (all written as ARG files both programs read byte for byte):

* dense: the real s30 pairs of ../shared/data/mcs and seeded G(n,p) pairs (as in issue 27);
* connected: seeded G(n,p) pairs, ``--connected`` / ``-c``;
* vertex-labelled: 4 vertex labels, ``--labels all`` / ``-a``;
* edge-labelled: 2 vertex and 2 edge labels, ``--labels all`` / ``-a``;
* directed labelled: 2 edge labels, ``--labels all --directed`` / ``-i -a``;
* sparse: a k=40 breadth-first ball pattern in G(3000 or 8000, 4/n) (``workloads.sparse_pair``).

Run as a script (the table of docs/systems/hydra_mcs.md)::

    HYDRA_MCS_REF=/tmp/ref-mcsplit/mcsp python benchmarks/hydra_mcs/test_hydra_mcs_bench_kinds.py

(``--rounds3``: the least CPU of three runs of each program; ``--skip=s30.00,lab50-p0.3-s11``
leaves pairs out; ``--quick``: the sparse pairs and s30.02 only.)

or under pytest-benchmark (rows in ``extra_info``; no timed assertions, sizes/nodes asserted).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from schedlab.core.data import data_dir

DATA = data_dir() / "mcs"
# name: (n, p, seed, vertex labels, edge labels, directed, kind)
GNP = {
    "gnp30-p0.3-s2": (30, 0.3, 2, 0, 0, False, "dense"),
    "gnp26-p0.5-s3": (26, 0.5, 3, 0, 0, False, "dense"),
    "con30-p0.3-s6": (30, 0.3, 6, 0, 0, False, "connected"),
    "con26-p0.5-s7": (26, 0.5, 7, 0, 0, False, "connected"),
    "lab46-p0.5-s12": (46, 0.5, 12, 4, 0, False, "vertex-labelled"),
    "lab50-p0.3-s11": (50, 0.3, 11, 4, 0, False, "vertex-labelled"),
    "elab44-p0.5-s22": (44, 0.5, 22, 2, 2, False, "edge-labelled"),
    "dlab44-p0.3-s27": (44, 0.3, 27, 1, 2, True, "directed-labelled"),
    "dlab52-p0.5-s28": (52, 0.5, 28, 1, 2, True, "directed-labelled"),
}
SPARSE = {"sparse3000": (3000, 40, 4.0, 1), "sparse8000": (8000, 40, 4.0, 1)}
OURS = {
    "dense": [],
    "connected": ["--connected"],
    "vertex-labelled": ["--labels", "all"],
    "edge-labelled": ["--labels", "all"],
    "directed-labelled": ["--labels", "all", "--directed"],
    "sparse": [],
}
REF = {
    "dense": [],
    "connected": ["-c"],
    "vertex-labelled": ["-a"],
    "edge-labelled": ["-a"],
    "directed-labelled": ["-i", "-a"],
    "sparse": [],
}


def write_instances(folder: Path, quick: bool = False) -> list[tuple[str, str, Path, Path]]:
    """(kind, name, A, B) for every pair; ``quick`` keeps the sparse pairs and s30.A02 only."""
    from schedlab.hydra_mcs.workloads import (
        edge_labelled,
        gnp,
        sparse_pair,
        vertex_labelled,
        write_arg,
    )

    out = []
    if not quick:
        for name, (n, p, seed, vl, el, directed, kind) in GNP.items():
            rng = np.random.default_rng(seed)
            g0, g1 = gnp(n, p, rng, directed), gnp(n, p, rng, directed)
            if vl:
                g0, g1 = vertex_labelled(g0, vl, rng), vertex_labelled(g1, vl, rng)
            if el:
                g0, g1 = edge_labelled(g0, el, rng), edge_labelled(g1, el, rng)
            a = write_arg(g0, folder / f"{name}.A00")
            b = write_arg(g1, folder / f"{name}.B00")
            out.append((kind, name, a, b))
    if DATA.is_dir():
        for k in ("02",) if quick else ("00", "01", "02"):
            out.append(("dense", f"s30.{k}", DATA / f"s30.A{k}", DATA / f"s30.B{k}"))
    for name, (n, k, degree, seed) in SPARSE.items():
        inst = sparse_pair(n, k, degree, seed)
        a = write_arg(inst.g0, folder / f"{name}.A00")
        b = write_arg(inst.g1, folder / f"{name}.B00")
        out.append(("sparse", name, a, b))
    return out


def _timed(cmd: list[str]) -> tuple[float, int, str]:
    """(CPU s, max RSS MB, stdout) of one process: CPU by wait4 for that process alone; the
    peak RSS by GNU time's %M when present (a child forked from this Python process would
    report this process's RSS as its own until it execs), else by wait4."""
    gnu_time = Path("/usr/bin/time")
    with tempfile.TemporaryFile() as sink, tempfile.NamedTemporaryFile("r") as mem:
        full = [str(gnu_time), "-f", "%M", "-o", mem.name, *cmd] if gnu_time.is_file() else cmd
        proc = subprocess.Popen(full, stdout=sink, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{cmd} exited {proc.returncode}")
        sink.seek(0)
        text = mem.read().strip().splitlines()
        peak_kb = int(text[-1]) if gnu_time.is_file() and text else ru.ru_maxrss
        return ru.ru_utime + ru.ru_stime, peak_kb // 1024, sink.read().decode()


def _schedlab() -> list[str]:
    exe = shutil.which("schedlab")
    return [exe] if exe else [sys.executable, "-m", "schedlab.cli"]


def run_pair(binary: str, kind: str, a: Path, b: Path) -> dict:
    ref_cpu, ref_mb, out = _timed([binary, "-q", *REF[kind], str(a), str(b)])
    ref_size = int(re.search(r"Solution size (\d+)", out).group(1))
    ref_nodes = int(re.search(r"Nodes:\s+(\d+)", out).group(1))
    cmd = [*_schedlab(), "hydra-mcs", "solve", str(a), str(b), "--json", "--no-mapping"]
    cpu, mb, out = _timed(cmd + OURS[kind])
    doc = json.loads(out)
    return dict(
        ref_cpu=ref_cpu,
        ref_mb=ref_mb,
        ref_size=ref_size,
        ref_nodes=ref_nodes,
        cpu=cpu,
        mb=mb,
        size=doc["size"],
        nodes=doc["nodes"],
        ratio=cpu / ref_cpu if ref_cpu > 0 else float("inf"),
    )


def compare(
    binary: str, folder: Path, quick: bool = False, rounds: int = 1, skip: tuple = ()
) -> list[dict]:
    rows = []
    for kind, name, a, b in write_instances(folder, quick):
        if name in skip:
            continue
        runs = [run_pair(binary, kind, a, b) for _ in range(rounds)]
        best = dict(runs[0])  # the least CPU of the rounds, for each program
        best["ref_cpu"] = min(r["ref_cpu"] for r in runs)
        best["cpu"] = min(r["cpu"] for r in runs)
        best["ratio"] = best["cpu"] / best["ref_cpu"]
        rows.append(dict(kind=kind, pair=name, **best))
    return rows


def test_bench_kinds_vs_reference(benchmark, tmp_path):
    binary = os.environ.get("HYDRA_MCS_REF")
    if not binary or not Path(binary).is_file():
        pytest.skip("set HYDRA_MCS_REF to the reference McSplit binary (mcsp)")
    rows = benchmark.pedantic(lambda: compare(binary, tmp_path, quick=True), rounds=1)
    for r in rows:
        assert (r["size"], r["nodes"]) == (r["ref_size"], r["ref_nodes"]), r
    benchmark.extra_info["rows"] = rows


def main() -> None:
    binary = os.environ.get("HYDRA_MCS_REF", "/tmp/ref-mcsplit/mcsp")
    quick = "--quick" in sys.argv
    rounds = 3 if "--rounds3" in sys.argv else 1
    skip = tuple(a.split("=", 1)[1] for a in sys.argv if a.startswith("--skip="))
    skip = tuple(x for s in skip for x in s.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        rows = compare(binary, Path(tmp), quick, rounds, skip)
    for r in rows:
        same = (
            "same"
            if (r["size"], r["nodes"]) == (r["ref_size"], r["ref_nodes"])
            else f"DIFFER ours {r['size']}/{r['nodes']}"
        )
        print(
            f"{r['kind']:18} {r['pair']:16} ref {r['ref_cpu']:7.3f} s {r['ref_mb']:4d} MB  "
            f"ours {r['cpu']:7.3f} s {r['mb']:4d} MB  ({r['ratio']:.3f}x)  "
            f"size {r['ref_size']} nodes {r['ref_nodes']:>11,} {same}"
        )
    for kind in dict.fromkeys(r["kind"] for r in rows):
        sel = [r for r in rows if r["kind"] == kind]
        ref, ours = sum(r["ref_cpu"] for r in sel), sum(r["cpu"] for r in sel)
        print(
            f"{kind:18} {len(sel)} pairs: ref {ref:.2f} s  ours {ours:.2f} s -> {ours / ref:.3f}x"
        )


if __name__ == "__main__":
    main()
