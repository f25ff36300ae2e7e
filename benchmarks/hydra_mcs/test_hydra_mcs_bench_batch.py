"""Whole-call CPU of ``schedlab hydra-mcs solve --pairs`` vs the reference McSplit's processes.

Issue 27's yardstick: whole CLI calls in CPU time (user + sys of the processes) against the
reference C++ McSplit (james-cpp, ``g++ -O3 -march=native``, built under /tmp, never committed;
set ``HYDRA_MCS_REF`` to its ``mcsp``), every size exact. McSplit has no batch mode, so its cost
is the sum of one process per pair; ours is one ``solve --pairs`` process per flag set (plain,
``--connected``, vertex-labelled), start-up included.

Instances: the real ARG pairs of ../shared/data/mcs (s20.*, s30.*) and seeded G(n,p) pairs that
take McSplit 1.6-12.4 s here (:data:`GNP`, written as ARG files so both programs read the same
bytes). Run as a script for the table in docs/systems/hydra_mcs.md::

    HYDRA_MCS_REF=/tmp/ref-mcsplit/mcsp python benchmarks/hydra_mcs/test_hydra_mcs_bench_batch.py

(add ``--single`` for one ``solve A B`` process per pair instead of one ``--pairs`` call per flag
set), or under pytest-benchmark (CPU figures in ``extra_info``). No timed assertions; sizes and node
counts *are* asserted equal to the reference's.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from schedlab.core.data import data_dir

DATA = data_dir() / "mcs"
# name: (n, p, seed, vertex labels (0 = none), kind); the reference's CPU here in the comment
GNP = {
    "gnp28-p0.3-s1": (28, 0.3, 1, 0, "plain"),  # 2.5 s
    "gnp30-p0.3-s2": (30, 0.3, 2, 0, "plain"),  # 6.3 s
    "gnp26-p0.5-s3": (26, 0.5, 3, 0, "plain"),  # 1.6 s
    "con30-p0.3-s6": (30, 0.3, 6, 0, "connected"),  # 6.5 s
    "con26-p0.5-s7": (26, 0.5, 7, 0, "connected"),  # 1.9 s
    "lab46-p0.5-s12": (46, 0.5, 12, 4, "labelled"),  # 3.2 s
    "lab46-p0.3-s13": (46, 0.3, 13, 4, "labelled"),  # 3.9 s
    "lab50-p0.3-s11": (50, 0.3, 11, 4, "labelled"),  # 12.1 s
}
OUR_FLAGS = {"plain": [], "connected": ["--connected"], "labelled": ["--labels", "all"]}
REF_FLAGS = {"plain": [], "connected": ["-c"], "labelled": ["-a"]}


def write_gnp(folder: Path) -> dict[str, list[tuple[str, Path, Path]]]:
    """Write the seeded G(n,p) pairs as ARG files; returns {kind: [(name, A, B), ...]}."""
    from schedlab.hydra_mcs.workloads import gnp, vertex_labelled, write_arg

    out: dict[str, list[tuple[str, Path, Path]]] = {}
    for name, (n, p, seed, labels, kind) in GNP.items():
        rng = np.random.default_rng(seed)
        g0, g1 = gnp(n, p, rng), gnp(n, p, rng)
        if labels:
            g0, g1 = vertex_labelled(g0, labels, rng), vertex_labelled(g1, labels, rng)
        a, b = write_arg(g0, folder / f"{name}.A00"), write_arg(g1, folder / f"{name}.B00")
        out.setdefault(kind, []).append((name, a, b))
    return out


def instances(folder: Path, which: str = "all") -> dict[str, list[tuple[str, Path, Path]]]:
    sets: dict[str, list[tuple[str, Path, Path]]] = {}
    if which in ("all", "gnp"):
        sets = write_gnp(folder)
    if which in ("all", "arg") and DATA.is_dir():
        sets.setdefault("plain", [])
        for a in sorted(DATA.glob("s*.A0?")):
            sets["plain"].append(
                (a.name.replace(".A", "."), a, a.with_name(a.name.replace(".A", ".B")))
            )
    return sets


def _cpu_of(cmd: list[str], **kw) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.stdout


def _schedlab() -> list[str]:
    exe = shutil.which("schedlab")
    return [exe] if exe else [sys.executable, "-m", "schedlab.cli"]


def run_ours(kind: str, pairs: list[tuple[str, Path, Path]], folder: Path) -> tuple[float, dict]:
    listing = folder / f"pairs-{kind}.txt"
    listing.write_text("".join(f"{a} {b}\n" for _, a, b in pairs))
    cmd = [
        *_schedlab(),
        "hydra-mcs",
        "solve",
        "--pairs",
        str(listing),
        "--json",
        "--no-mapping",
        *OUR_FLAGS[kind],
    ]
    cpu, out = _cpu_of(cmd)
    rows = [json.loads(line) for line in out.splitlines() if line.strip()]
    return cpu, {name: row for (name, _, _), row in zip(pairs, rows, strict=True)}


def run_ref(binary: str, kind: str, a: Path, b: Path) -> tuple[float, int, int]:
    cpu, out = _cpu_of([binary, *REF_FLAGS[kind], str(a), str(b)])
    size = int(re.search(r"Solution size (\d+)", out).group(1))
    nodes = int(re.search(r"Nodes:\s+(\d+)", out).group(1))
    return cpu, size, nodes


def compare(binary: str, folder: Path, which: str = "all") -> list[dict]:
    """One row per pair (reference CPU, size, nodes) plus one per batch call (our CPU)."""
    rows = []
    for kind, pairs in instances(folder, which).items():
        ours_cpu, ours = run_ours(kind, pairs, folder)
        ref_total = 0.0
        for name, a, b in pairs:
            cpu, size, nodes = run_ref(binary, kind, a, b)
            ref_total += cpu
            o = ours[name]
            rows.append(
                dict(
                    kind=kind,
                    pair=name,
                    ref_cpu=cpu,
                    ref_size=size,
                    ref_nodes=nodes,
                    size=o["size"],
                    nodes=o["nodes"],
                    cpu_in_batch=o["cpu_s"],
                )
            )
        rows.append(
            dict(
                kind=kind,
                pair="(whole call)",
                ref_cpu=ref_total,
                ours_cpu=ours_cpu,
                ratio=ours_cpu / ref_total,
            )
        )
    return rows


def compare_single(binary: str, folder: Path, which: str = "all") -> list[dict]:
    """One ``schedlab hydra-mcs solve A B`` process per pair (how a benchmark user without
    ``--pairs`` runs it, and how issue 27 checks) vs one reference process per pair."""
    rows = []
    for kind, pairs in instances(folder, which).items():
        for name, a, b in pairs:
            cmd = [
                *_schedlab(),
                "hydra-mcs",
                "solve",
                str(a),
                str(b),
                "--json",
                "--no-mapping",
                *OUR_FLAGS[kind],
            ]
            ours_cpu, out = _cpu_of(cmd)
            o = json.loads(out)
            cpu, size, nodes = run_ref(binary, kind, a, b)
            rows.append(
                dict(
                    kind=kind,
                    pair=name,
                    ref_cpu=cpu,
                    ref_size=size,
                    ref_nodes=nodes,
                    size=o["size"],
                    nodes=o["nodes"],
                    ours_cpu=ours_cpu,
                    ratio=ours_cpu / cpu,
                )
            )
    return rows


@pytest.mark.parametrize("which", ["gnp", "arg"])
def test_bench_single_calls_vs_reference(benchmark, which, tmp_path):
    binary = os.environ.get("HYDRA_MCS_REF")
    if not binary or not Path(binary).is_file():
        pytest.skip("set HYDRA_MCS_REF to the reference McSplit binary (mcsp)")
    if which == "arg" and not DATA.is_dir():
        pytest.skip("../shared/data/mcs is not present")
    rows = benchmark.pedantic(
        lambda: compare_single(binary, tmp_path, which), rounds=1, iterations=1
    )
    for r in rows:
        assert (r["size"], r["nodes"]) == (r["ref_size"], r["ref_nodes"]), r
    benchmark.extra_info["rows"] = rows


@pytest.mark.parametrize("which", ["gnp", "arg"])
def test_bench_batch_vs_reference(benchmark, which, tmp_path):
    binary = os.environ.get("HYDRA_MCS_REF")
    if not binary or not Path(binary).is_file():
        pytest.skip("set HYDRA_MCS_REF to the reference McSplit binary (mcsp)")
    if which == "arg" and not DATA.is_dir():
        pytest.skip("../shared/data/mcs is not present")
    rows = benchmark.pedantic(lambda: compare(binary, tmp_path, which), rounds=1, iterations=1)
    for r in rows:
        if "ref_size" in r:
            assert (r["size"], r["nodes"]) == (r["ref_size"], r["ref_nodes"]), r
    benchmark.extra_info["rows"] = rows


def main_single(binary: str, which: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = compare_single(binary, Path(tmp), which)
    for r in rows:
        same = (
            "same"
            if (r["size"], r["nodes"]) == (r["ref_size"], r["ref_nodes"])
            else f"DIFFER ours {r['size']}/{r['nodes']}"
        )
        print(
            f"{r['kind']:9} {r['pair']:16} ref {r['ref_cpu']:7.3f} s  ours {r['ours_cpu']:7.3f} s"
            f"  ({r['ratio']:.3f}x)  nodes {r['ref_nodes']:>11,}  {same}"
        )
    for kind in sorted({r["kind"] for r in rows}) + ["all"]:
        sel = [r for r in rows if kind in ("all", r["kind"])]
        ref, ours = sum(r["ref_cpu"] for r in sel), sum(r["ours_cpu"] for r in sel)
        print(
            f"{kind:9} {len(sel)} single calls: ref {ref:.2f} s  ours {ours:.2f} s  -> "
            f"{ours / ref:.3f}x"
        )


def main() -> None:
    binary = os.environ.get("HYDRA_MCS_REF", "/tmp/ref-mcsplit/mcsp")
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if "--single" in sys.argv:
        main_single(binary, which)
        return
    with tempfile.TemporaryDirectory() as tmp:
        rows = compare(binary, Path(tmp), which)
    for r in rows:
        if "ref_size" in r:
            same = (
                "same"
                if (r["size"], r["nodes"]) == (r["ref_size"], r["ref_nodes"])
                else f"DIFFER ours {r['size']}/{r['nodes']}"
            )
            print(
                f"{r['kind']:9} {r['pair']:16} ref {r['ref_cpu']:7.2f} s  size {r['ref_size']}"
                f"  nodes {r['ref_nodes']:>11,}  ours-in-batch {r['cpu_in_batch']:7.2f} s"
                f"  ({r['cpu_in_batch'] / r['ref_cpu']:.2f}x)  {same}"
            )
        else:
            print(
                f"{r['kind']:9} whole call: ref {r['ref_cpu']:.2f} s  ours {r['ours_cpu']:.2f} s"
                f"  -> {r['ratio']:.3f}x"
            )
    total_ref = sum(r["ref_cpu"] for r in rows if "ratio" in r)
    total_ours = sum(r["ours_cpu"] for r in rows if "ratio" in r)
    print(
        f"all       whole calls: ref {total_ref:.2f} s  ours {total_ours:.2f} s  -> "
        f"{total_ours / total_ref:.3f}x"
    )


if __name__ == "__main__":
    main()
