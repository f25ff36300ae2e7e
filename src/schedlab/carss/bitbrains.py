"""Bitbrains VM traces (GWA-T-12 "Rnd"/"fastStorage"): a reader and COSCO's BWGD2 workload.

COSCO (Tuli et al., IEEE TPDS 2022; imperial-qore/COSCO ``simulator/workload/BitbrainWorkload2.py``)
drives its simulator with Bitbrains VM traces: every interval a Gaussian number of new
containers (mean 5, sigma 1.5 for 50 hosts) arrives; each picks a VM trace at random among those
whose ``CPU usage [MHZ]`` x 2054/1200 at row 10 lies in (500, 3000) MIPS; its CPU demand per
300-s sample is that column x 2054/1200 (a Pentium III gives 2054 MIPS at 600 MHz x 2), its SLA
is Gaussian(20, 3) intervals and its work is the demand summed over its first int(1.2 x SLA)
samples; its RAM is ``Memory usage [KB]`` / 4000 (COSCO's scaling; we take its maximum over the
task's life). We follow that, with one change: arrivals per interval come from any arrival
series (a real trace such as Alibaba's GenAI requests, scaled) instead of Gaussian counts.

File format (one header line, ``;`` separated, optionally followed by a tab, ``.csv`` or
``.csv.gz``): ``Timestamp [ms]`` (Unix seconds despite the name), ``CPU cores``, ``CPU capacity
provisioned [MHZ]``, ``CPU usage [MHZ]``, ``CPU usage [%]``, ``Memory capacity provisioned [KB]``,
``Memory usage [KB]``, disk and network throughputs. Bad input raises one
:class:`~schedlab.core.errors.BadInputError` naming the file, line and field.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from schedlab.carss.simulator import Tasks, new_tasks
from schedlab.carss.workloads import Workload
from schedlab.core.errors import BadInputError

#: MIPS per MHz (COSCO: "Intel Pentium III gives 2054 MIPS at 600 MHz", x 1/(2 x 600))
IPS_PER_MHZ = 2054.0 / (2 * 600)
#: the columns we use; the others (throughputs) are read when present and ignored
REQUIRED = (
    "Timestamp [ms]",
    "CPU cores",
    "CPU capacity provisioned [MHZ]",
    "CPU usage [MHZ]",
    "Memory usage [KB]",
)
SAMPLE_S = 300.0
#: COSCO's RMBitbrain size: ``Memory usage [KB] / 4000``
RAM_DIVISOR = 4000.0


@dataclass(frozen=True)
class VMTrace:
    """One VM's trace: Unix seconds, provisioned cores and MHz, used MHz and memory (KB)."""

    name: str
    time_s: np.ndarray
    cores: np.ndarray
    capacity_mhz: np.ndarray
    usage_mhz: np.ndarray
    memory_kb: np.ndarray

    def __len__(self) -> int:
        return int(self.time_s.size)

    @property
    def mips(self) -> np.ndarray:
        return self.usage_mhz * IPS_PER_MHZ


def _open_text(path: Path) -> list[str]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise BadInputError(f"is not a valid gzip file ({exc})", path=path) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise BadInputError("is not UTF-8 text", path=path, line=line) from None
    return text.splitlines()


def parse_vm_trace(lines: list[str], path: str | Path = "<trace>") -> VMTrace:
    """Parse the lines of one Bitbrains CSV (header first)."""
    path = Path(path)
    if not lines or not lines[0].strip():
        raise BadInputError("is empty (expected a Bitbrains header line)", path=path, line=1)
    header = [h.strip() for h in lines[0].split(";")]
    index = {}
    for name in REQUIRED:
        if name not in header:
            raise BadInputError(
                "missing column (not a Bitbrains VM trace?)", path=path, line=1, field=name
            )
        index[name] = header.index(name)
    rows = [(n + 1, line) for n, line in enumerate(lines[1:], start=1) if line.strip()]
    if not rows:
        raise BadInputError("has a header but no data rows", path=path, line=2)
    out = np.empty((len(rows), len(REQUIRED)))
    for r, (number, line) in enumerate(rows):
        cells = line.split(";")
        if len(cells) != len(header):
            raise BadInputError(
                f"has {len(cells)} fields, the header has {len(header)}", path=path, line=number
            )
        for c, name in enumerate(REQUIRED):
            cell = cells[index[name]].strip()
            try:
                value = float(cell)
            except ValueError:
                raise BadInputError(
                    f"{cell!r} is not a number", path=path, line=number, field=name
                ) from None
            if not math.isfinite(value) or value < 0:
                raise BadInputError(
                    f"{cell!r} must be a finite number >= 0", path=path, line=number, field=name
                )
            out[r, c] = value
    back = np.flatnonzero(np.diff(out[:, 0]) < 0)
    if back.size:
        raise BadInputError(
            "timestamp earlier than the previous row",
            path=path,
            line=rows[int(back[0]) + 1][0],
            field=REQUIRED[0],
        )
    return VMTrace(path.name.split(".")[0], out[:, 0], out[:, 1], out[:, 2], out[:, 3], out[:, 4])


def read_vm_trace(path: str | Path) -> VMTrace:
    """Read one Bitbrains VM trace (``.csv`` or gzip-compressed)."""
    path = Path(path)
    return parse_vm_trace(_open_text(path), path)


@lru_cache(maxsize=8)
def _read_dir(directory: str) -> tuple[VMTrace, ...]:
    root = Path(directory)
    if not root.is_dir():
        raise BadInputError("is not a directory of Bitbrains traces", path=root)
    files = sorted(
        (p for p in root.iterdir() if p.name.endswith((".csv", ".csv.gz"))),
        key=lambda p: (len(p.name), p.name),
    )
    if not files:
        raise BadInputError("has no .csv or .csv.gz files", path=root)
    return tuple(read_vm_trace(p) for p in files)


def read_vm_traces(directory: str | Path) -> tuple[VMTrace, ...]:
    """Every ``*.csv``/``*.csv.gz`` in ``directory`` (cached per directory)."""
    return _read_dir(str(Path(directory).resolve()))


def seeded_vm_traces(seed: int, count: int = 36, samples: int = 2016) -> tuple[VMTrace, ...]:
    """A seeded stand-in for the Bitbrains Rnd traces, used (and named) only when
    ../shared/data/bitbrains is absent: ``count`` VMs of ``samples`` 5-min rows (a week), 1-8
    cores of 2.6 GHz, a daily cycle and AR(1) noise around a mean demand drawn so that most
    VMs pass COSCO's 500-3000 MIPS filter, and a slowly varying memory footprint."""
    rng = np.random.default_rng(seed)
    t = np.arange(samples, dtype=np.float64)
    out = []
    for k in range(count):
        cores = float(rng.choice([1, 2, 4, 8]))
        capacity = np.full(samples, 2600.0 * cores)
        mean = rng.uniform(400.0, 2800.0) / IPS_PER_MHZ
        noise = np.zeros(samples)
        shocks = rng.normal(0.0, 0.15, samples)
        for i in range(1, samples):
            noise[i] = 0.9 * noise[i - 1] + shocks[i]
        daily = 1.0 + rng.uniform(0.1, 0.4) * np.sin(2 * math.pi * t / 288 + rng.uniform(0, 6.3))
        usage = np.clip(mean * daily * np.exp(noise), 0.0, capacity)
        memory = rng.uniform(2e5, 4e6) * np.exp(np.cumsum(rng.normal(0.0, 0.01, samples)))
        out.append(
            VMTrace(
                f"seeded-{k}",
                1.3779866e9 + 300.0 * t,
                np.full(samples, cores),
                capacity,
                usage,
                memory,
            )
        )
    return tuple(out)


def cosco_eligible(trace: VMTrace, low: float = 500.0, high: float = 3000.0) -> bool:
    """COSCO's BWGD2 filter: demand at row 10 strictly between 500 and 3000 MIPS."""
    return len(trace) > 10 and low < float(trace.mips[10]) < high


def demand_table(
    traces: tuple[VMTrace, ...] | list[VMTrace], floor: float = 0.01
) -> tuple[np.ndarray, np.ndarray]:
    """Traces as the simulator's (rows x samples MIPS, lengths) table, padded by wrapping.
    A zero sample is raised to ``floor`` x the VM's mean so a task can never stall forever."""
    lengths = np.array([len(t) for t in traces], dtype=np.int64)
    table = np.zeros((len(traces), int(lengths.max())))
    for r, trace in enumerate(traces):
        mips = trace.mips
        mips = np.maximum(mips, floor * max(float(mips.mean()), 1.0))
        table[r] = np.resize(mips, table.shape[1])
    return table, lengths


def bitbrains_workload(
    counts: np.ndarray,
    traces: tuple[VMTrace, ...] | list[VMTrace],
    interval_s: float,
    seed: int,
    sla_mean: float = 20.0,
    sla_sigma: float = 3.0,
    eligible_only: bool = True,
) -> Workload:
    """COSCO's BWGD2 containers for an arrival series: one random (eligible) VM trace per task."""
    pool = [t for t in traces if cosco_eligible(t)] if eligible_only else list(traces)
    if not pool:
        raise BadInputError(
            "no VM trace passes COSCO's 500-3000 MIPS filter at row 10", field="traces"
        )
    table, lengths = demand_table(pool)
    memory_mb = [np.maximum(t.memory_kb / RAM_DIVISOR, 16.0) for t in pool]
    rng = np.random.default_rng(seed)
    sampler = TaskSampler(table, lengths, memory_mb, interval_s, _caps(pool), sla_mean, sla_sigma)
    batches, tid = [], 0
    for t, c in enumerate(np.asarray(counts, dtype=np.int64)):
        batches.append(sampler(int(c), t * interval_s, tid, rng))
        tid += int(c)
    return Workload(
        np.asarray(counts, dtype=np.int64),
        tuple(batches),
        float(interval_s),
        traces=(table, lengths),
    )


class TaskSampler:
    """Draws BWGD2 tasks; also what COSCO-style schedulers use for their offline training data
    (the same generator, other random numbers: COSCO trains GOBI on runs of BWGD2)."""

    def __init__(
        self,
        table: np.ndarray,
        lengths: np.ndarray,
        memory_mb: list[np.ndarray],
        interval_s: float,
        cap: np.ndarray,
        sla_mean: float = 20.0,
        sla_sigma: float = 3.0,
    ) -> None:
        self.table, self.lengths, self.memory_mb = table, lengths, memory_mb
        self.cap = cap  # COSCO's max IPS: provisioned MHz x 2054/1200, per table row
        self.interval_s, self.sla_mean, self.sla_sigma = interval_s, sla_mean, sla_sigma
        # work of a task on row r lasting k samples: prefix sums of each (wrapped) row
        self.cumulative = np.cumsum(table, axis=1) * SAMPLE_S

    def __call__(
        self, count: int, arrival: float, first_tid: int, rng: np.random.Generator
    ) -> Tasks:
        n = int(count)
        rows = rng.integers(0, self.table.shape[0], n)
        sla_intervals = np.maximum(rng.normal(self.sla_mean, self.sla_sigma, n), 2.0)
        samples = np.clip(
            (1.2 * sla_intervals * self.interval_s / SAMPLE_S).astype(np.int64),
            1,
            self.table.shape[1],
        )
        work = self.cumulative[rows, samples - 1]
        ram = np.array(
            [self.memory_mb[r][: max(int(s), 1)].max() for r, s in zip(rows, samples, strict=True)]
        )
        cpu = self.table[rows, 0]
        return new_tasks(
            tid=np.arange(first_tid, first_tid + n),
            arrival=np.full(n, float(arrival)),
            work=work,
            cpu=cpu,
            amp=np.zeros(n),
            period=np.full(n, 3600.0),
            phase=np.zeros(n),
            ram=ram,
            disk=1000.0 * (1 + rows % 3),
            deadline=sla_intervals * self.interval_s,
            trace=rows,
            cap=self.cap[rows],
        )


def sampler_for(
    workload: Workload, traces: tuple[VMTrace, ...] | list[VMTrace], eligible_only: bool = True
) -> TaskSampler:
    """A sampler over the same VM traces as ``workload`` (for offline surrogate training)."""
    pool = [t for t in traces if cosco_eligible(t)] if eligible_only else list(traces)
    table, lengths = workload.traces if workload.traces is not None else demand_table(pool)
    return TaskSampler(
        table,
        lengths,
        [np.maximum(t.memory_kb / RAM_DIVISOR, 16.0) for t in pool],
        workload.interval_s,
        _caps(pool),
    )


def _caps(pool: list[VMTrace]) -> np.ndarray:
    """COSCO's ``getMaxIPS``: the first provisioned capacity x 2054/1200, at least the peak
    demand (so a task can always run at its trace)."""
    return np.array(
        [max(float(t.capacity_mhz[0]) * IPS_PER_MHZ, float(t.mips.max())) for t in pool]
    )


def bitbrains_dir() -> Path | None:
    """``<data dir>/bitbrains`` when present (the data dir: schedlab.core.data)."""
    from schedlab.core.data import data_path

    path = data_path("bitbrains")
    return path if path.is_dir() else None
