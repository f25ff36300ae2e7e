"""The evaluation's workloads as data: seeded input data on the PFS, intents, and the job command.

Paper: IFlux (../shared/papers/10-iflux.md) runs IOR (N-1, N-N), small random reads, metadata
storms, checkpoint bursts, a DLIO data loader and the 1000 Genomes workflow with and without
IFlux. A :class:`Case` bundles one of these; :func:`cases` builds all of them for a scale, and
:func:`intent_stream` generates random intent dicts for throughput measurements.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.iflux.intents import FEATURES, Intent

JOB = [sys.executable, "-m", "schedlab.iflux.iojob"]


@dataclass
class Case:
    """One workload: its intents and command, given the directory it may use on the PFS."""

    name: str
    paper_class: str
    intents: Callable[[Path], list[Intent]]
    command: Callable[[Path], list[str]]
    setup: Callable[[Path, np.random.Generator], None] | None = None


def _write_random(directory: Path, files: int, size: int, rng: np.random.Generator) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        # half-compressible bytes, like real scientific data
        data = rng.integers(0, 256, size // 2, dtype=np.uint8).tobytes() + bytes(size - size // 2)
        (directory / f"s{i:05d}.bin").write_bytes(data)


def cases(scale: dict, inputs: Path) -> list[Case]:
    """All six workload classes at ``scale`` (sizes in bytes, counts); inputs live in ``inputs``."""
    s = scale
    small_file = inputs / "small-random"

    def setup_random(_: Path, rng: np.random.Generator) -> None:
        small_file.mkdir(parents=True, exist_ok=True)
        target = small_file / "small-random.dat"
        if not target.exists():
            target.write_bytes(rng.integers(0, 256, s["random_bytes"], dtype=np.uint8).tobytes())

    return [
        Case("ior-n1", "simulation: IOR N-1 shared file",
             lambda d: [Intent(path=str(d / "out"), usage="output", sharing="shared",
                               mode="write-only", pattern="large-sequential",
                               size=s["ior_bytes"])],
             lambda d: [*JOB, "ior-n1", "--dir", str(d / "out"), "--size", str(s["ior_bytes"])]),
        Case("ior-nn", "simulation: IOR N-N file per process",
             lambda d: [Intent(path=str(d / "out"), usage="output", mode="write-only",
                               pattern="large-sequential", size=s["ior_bytes"], files=2)],
             lambda d: [*JOB, "ior-nn", "--dir", str(d / "out"), "--size", str(s["ior_bytes"])]),
        Case("small-random", "analytics: small random reads",
             lambda d: [Intent(path=str(d / "in"), source=str(small_file), usage="input",
                               mode="read-only", sharing="shared", pattern="small-random",
                               size=s["random_bytes"])],
             lambda d: [*JOB, "small-random", "--dir", str(d / "in"), "--size",
                        str(s["random_bytes"]), "--ops", str(s["random_ops"])],
             setup_random),
        Case("mdstorm", "analytics: metadata storm (many small files)",
             lambda d: [Intent(path=str(d / "out"), usage="output", mode="write-only",
                               pattern="metadata-heavy", size=s["md_files"] * 4096,
                               files=s["md_files"])],
             lambda d: [*JOB, "mdstorm", "--dir", str(d / "out"), "--files", str(s["md_files"]),
                        "--size", "4096"]),
        Case("checkpoint", "simulation: checkpoint burst",
             lambda d: [Intent(path=str(d / "ckpt"), usage="output", mode="write-only",
                               pattern="checkpoint", size=s["ckpt_bytes"])],
             lambda d: [*JOB, "checkpoint", "--dir", str(d / "ckpt"), "--size",
                        str(s["ckpt_bytes"]), "--workers", "1"]),
        _dlio_case(s, inputs),
        _genomes_case(s, inputs),
    ]


def _dlio_case(s: dict, inputs: Path) -> Case:
    data = inputs / "dlio"
    return Case(
        "dlio", "AI: DLIO-like data loader",
        lambda d: [Intent(path=str(d / "data"), source=str(data), usage="input",
                          mode="read-only", data="sample", level="operation",
                          pattern="small-random", sharing="shared",
                          size=s["dlio_samples"] * s["dlio_sample_bytes"],
                          files=s["dlio_samples"])],
        lambda d: [*JOB, "dlio", "--dir", str(d / "data"), "--epochs", str(s["dlio_epochs"]),
                   "--batch", "16", "--compute", str(s["compute"])],
        lambda _, rng: data.is_dir() or _write_random(data, s["dlio_samples"],
                                                      s["dlio_sample_bytes"], rng))


def _genomes_case(s: dict, inputs: Path) -> Case:
    data = inputs / "genomes"
    return Case(
        "genomes", "workflow: 1000 Genomes-like",
        lambda d: [
            Intent(path=str(d / "inputs"), source=str(data), usage="input", mode="read-only",
                   pattern="large-sequential", level="workflow", size=s["genome_chunks"] << 21),
            Intent(path=str(d / "scratch"), usage="temporary", pattern="metadata-heavy",
                   level="workflow", size=s["genome_chunks"] << 22, files=1000),
            Intent(path=str(d / "results"), usage="output", mode="write-only",
                   pattern="metadata-heavy", size=8 << 20, files=400),
        ],
        lambda d: [*JOB, "genomes", "--dir", str(d / "inputs"), "--dir", str(d / "scratch"),
                   "--dir", str(d / "results"), "--tasks", str(s["genome_chunks"]),
                   "--chromosomes", str(s["chromosomes"]),
                   "--compute", str(s["compute"] * 5)],
        lambda _, rng: data.is_dir() or _write_random(data, s["genome_chunks"], 2 << 20, rng))


def intent_stream(n: int, seed: int) -> list[dict]:
    """``n`` random, valid intent dicts (as a user would write them) for throughput tests."""
    rng = np.random.default_rng(seed)
    names = {name: [e.value for e in enum] for name, enum in FEATURES[:-1]}
    out = []
    for i in range(n):
        raw = {k: v[int(rng.integers(len(v)))] for k, v in names.items()}
        raw.update(path=f"/pfs/job/d{i}", size=int(rng.integers(0, 1 << 40)))
        if raw["usage"] == "input" and raw["mode"] == "write-only":
            raw["mode"] = "read-only"
        if raw["usage"] == "output" and raw["mode"] == "read-only":
            raw["mode"] = "write-only"
        if raw["pattern"] == "checkpoint" and raw["mode"] == "read-only":
            raw["pattern"] = "large-sequential"
        if raw["usage"] == "temporary" and raw["level"] == "workflow":
            raw["level"] = "job"
        out.append(raw)
    return out
