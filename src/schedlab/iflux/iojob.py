"""The I/O jobs of the evaluation: IOR-like fio patterns, a metadata storm, a DLIO-like loader and
a 1000-Genomes-like workflow. Each is run, unchanged, with and without IFlux.

Paper: IFlux (../shared/papers/10-iflux.md) evaluates IOR and DLIO patterns and full workflows.
A job here knows nothing of IFlux: it is given directories and does its I/O through
:class:`storage.Client` (or fio with the throttle of whatever backs its directory), so the only
thing IFlux changes is what sits behind the path. Each job prints one JSON line with the time it
measured itself (like IOR and DLIO report their own times), so interpreter start-up is not
counted. The IOR-like patterns run in fio when it is installed, else in the embedded generator
(:mod:`schedlab.iflux.ioload`, same job, same throttle); ``engine`` in the JSON says which
(``$IFLUX_IOLOAD`` = auto | fio | embedded chooses). Run as
``python -m schedlab.iflux.iojob KIND --dir D [--dir2 D] [k=v ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

from schedlab.iflux import ioload
from schedlab.iflux.storage import Client

FIO_PATTERNS = {
    # name: (rw, block size, files per worker ("1" = one shared file), fsync at end)
    "ior-n1": ("write", "1m", "shared", True),
    "ior-nn": ("write", "1m", "own", True),
    "small-random": ("randread", "4k", "shared", False),
    "checkpoint": ("write", "4m", "own", True),
}


def _bytes(text: str) -> int:
    return int(text[:-1]) << {"k": 10, "m": 20}[text[-1]]


def _tier_and_model(directory: Path):
    client = Client()
    tier = client.classifier.tier(directory)
    return tier, (client.site.model(tier) if client.site else None)


def run_pattern(kind: str, directory: Path, size: int, workers: int, io_ops: int = 0,
                engine: str | None = None) -> dict:
    """One IOR-like pattern in fio if it is installed (or ``engine``), else embedded."""
    if ioload.choose_engine(engine) == "fio":
        return run_fio(kind, directory, size, workers, io_ops)
    return run_embedded(kind, directory, size, workers, io_ops)


def run_embedded(kind: str, directory: Path, size: int, workers: int, io_ops: int = 0,
                 concurrency: str | None = None) -> dict:
    """The fio job of ``kind`` in the embedded generator, with the throttle fio would get.

    Workers are forked processes, as fio's ``numjobs`` are, unless ``concurrency`` (or
    ``$IFLUX_IOLOAD_WORKERS``) says ``threads``."""
    concurrency = concurrency or os.environ.get(ioload.WORKERS_ENV) or "processes"
    rw, bs, files, fsync = FIO_PATTERNS[kind]
    directory = Path(os.path.realpath(directory))
    tier, model = _tier_and_model(directory)
    rate = ioload.rate_from_fio_options(model.fio_options(workers, _bytes(bs)) if model else [])
    got = ioload.run_job(kind, directory, rw, _bytes(bs), files == "shared", fsync, size,
                         workers, io_ops, rate, concurrency=concurrency)
    return dict(kind=kind, tier=tier, seconds=got["seconds"], bytes=got["bytes"],
                iops=got["iops"], bw=got["bw"], engine="embedded", direct=got["direct"])


def run_fio(kind: str, directory: Path, size: int, workers: int, io_ops: int = 0) -> dict:
    """Run fio with the modelled throttle of the storage that backs ``directory``."""
    if shutil.which("fio") is None:
        raise SystemExit("fio is not installed (apt-get install fio)")
    rw, bs, files, fsync = FIO_PATTERNS[kind]
    directory = Path(os.path.realpath(directory))  # fio refuses a symlinked --directory
    tier, model = _tier_and_model(directory)
    cmd = ["fio", "--output-format=json", f"--name={kind}", f"--directory={directory}",
           f"--rw={rw}", f"--bs={bs}", f"--numjobs={workers}", "--ioengine=psync",
           "--group_reporting", "--randrepeat=1", f"--size={size // workers}"]
    if files == "shared":
        cmd += [f"--filename={kind}.dat", f"--offset_increment={size // workers}"]
    if io_ops:
        cmd.append(f"--number_ios={max(1, io_ops // workers)}")
    if fsync:
        cmd.append("--end_fsync=1")
    if model is not None:
        cmd += model.fio_options(workers, _bytes(bs))
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"fio failed: {out.stderr.strip()[:500]}")
    job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
    side = job["read" if "read" in rw else "write"]
    # fio's runtime is in whole ms; for very fast tiers the summed latency is more precise
    busy = side["lat_ns"]["mean"] * side["total_ios"] / max(1, workers) / 1e9
    seconds = max(side["runtime"] / 1000, busy)
    return dict(kind=kind, tier=tier, seconds=seconds, bytes=side["io_bytes"],
                iops=side["iops"], bw=side["bw_bytes"], engine=ioload.fio_version() or "fio",
                direct=False)


def metadata_storm(directory: Path, files: int, size: int) -> dict:
    """Create, stat and re-read ``files`` small files: the pattern that drowns a metadata server."""
    client = Client()
    payload = os.urandom(size)
    start = time.perf_counter()
    for i in range(files):
        sub = directory / f"d{i % 16:02d}"
        if i < 16:
            sub.mkdir(parents=True, exist_ok=True)
        client.write(sub / f"f{i:06d}.dat", payload)
    for i in range(files):
        client.stat(directory / f"d{i % 16:02d}" / f"f{i:06d}.dat")
    return dict(kind="mdstorm", tier=client.classifier.tier(directory),
                seconds=time.perf_counter() - start, files=files)


def dlio(directory: Path, epochs: int, batch: int, compute: float, seed: int) -> dict:
    """A DLIO-like loader: shuffled sample reads per epoch, a fixed compute time per batch."""
    client = Client()
    samples = sorted(p for p in directory.iterdir() if p.is_file())
    if not samples:
        raise SystemExit(f"no samples in {directory}")
    rng = random.Random(seed)
    start = time.perf_counter()
    read = 0
    for _ in range(epochs):
        order = samples[:]
        rng.shuffle(order)
        for b in range(0, len(order), batch):
            read += sum(len(client.read(p)) for p in order[b:b + batch])
            time.sleep(compute)
    return dict(kind="dlio", tier=client.classifier.tier(directory),
                seconds=time.perf_counter() - start, bytes=read)


def genomes(inputs: Path, scratch: Path, output: Path, tasks: int, chromosomes: int,
            compute: float) -> dict:
    """A 1000-Genomes-like workflow: individuals -> merge -> sifting -> overlap/frequency.

    ``individuals`` tasks each read one input chunk and write one small file per chromosome
    (metadata-heavy intermediate data); ``merge`` reads them all back; the analysis stages
    read the merged data and write many small result files.
    """
    client = Client()
    chunks = sorted(p for p in inputs.iterdir() if p.is_file())
    start = time.perf_counter()
    for t, chunk in enumerate(chunks[:tasks]):
        data = client.read(chunk)
        piece = max(1, len(data) // chromosomes)
        for c in range(chromosomes):
            client.write(scratch / f"ind{t:03d}-chr{c:02d}.vcf", data[c * piece:(c + 1) * piece])
        time.sleep(compute)
    merged = []
    for c in range(chromosomes):
        parts = [client.read(scratch / f"ind{t:03d}-chr{c:02d}.vcf")
                 for t in range(min(tasks, len(chunks)))]
        merged.append(b"".join(parts))
        client.write(scratch / f"merged-chr{c:02d}.vcf", merged[-1])
        time.sleep(compute)
    for c in range(chromosomes):
        data = client.read(scratch / f"merged-chr{c:02d}.vcf")
        for pop in range(8):
            client.write(output / f"overlap-chr{c:02d}-pop{pop}.txt", data[pop::97][:4096])
            client.write(output / f"freq-chr{c:02d}-pop{pop}.txt", data[pop::89][:4096])
        time.sleep(compute)
    return dict(kind="genomes", tier=client.classifier.tier(scratch),
                seconds=time.perf_counter() - start)


def _count(least: int):
    """An argparse type: an integer of at least ``least`` (a clean usage error otherwise)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"{text}: must be at least {least}")
        return value

    parse.__name__ = f"integer >= {least}"
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="schedlab.iflux.iojob")
    p.add_argument("kind", choices=[*FIO_PATTERNS, "mdstorm", "dlio", "genomes"])
    p.add_argument("--dir", type=Path, action="append", required=True)
    p.add_argument("--size", type=_count(1), default=64 << 20)
    p.add_argument("--workers", type=_count(1), default=2)
    p.add_argument("--ops", type=_count(0), default=0)
    p.add_argument("--files", type=int, default=500)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--compute", type=float, default=0.002)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--chromosomes", type=int, default=22)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    d = a.dir
    if a.kind in FIO_PATTERNS:
        try:
            ioload.choose_engine()
        except ValueError as exc:
            p.error(str(exc))
        result = run_pattern(a.kind, d[0], a.size, a.workers, a.ops)
    elif a.kind == "mdstorm":
        result = metadata_storm(d[0], a.files, a.size)
    elif a.kind == "dlio":
        result = dlio(d[0], a.epochs, a.batch, a.compute, a.seed)
    else:
        if len(d) < 3:
            raise SystemExit("genomes needs --dir INPUTS --dir SCRATCH --dir OUTPUT")
        result = genomes(d[0], d[1], d[2], a.tasks, a.chromosomes, a.compute)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
