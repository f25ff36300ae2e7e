"""Heterogeneous request streams for edge-cloud replays: seeded generators and trace readers.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). The paper replays heterogeneous request mixes; ours are
three request classes (stated below, our choice) with per-user uplink/downlink SNRs, Poisson
arrivals, and hard deadlines D = TTFT target + TPOT target x (output - 1).

A user brings their own data as a CSV (``arrival,input_len,output_len`` plus optional
``snr_up_db,snr_down_db,ttft_slo,tpot_slo``) or any trace schedlab.llm reads (Mooncake, Azure,
BurstGPT), to which SNRs and SLOs are added from the seeded class model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.core.io import atomic_write, read_frame
from schedlab.edge_llm.config import SNR_DB_RANGE, check_snr

#: class -> (share, input median, input sigma, output median, output sigma, TTFT s, TPOT s)
CLASSES: dict[str, tuple[float, int, float, int, float, float, float]] = {
    "chat": (0.5, 256, 0.7, 128, 0.6, 1.0, 0.08),
    "rag": (0.3, 1536, 0.5, 96, 0.5, 2.5, 0.10),
    "agent": (0.2, 768, 0.6, 256, 0.5, 1.5, 0.06),
}
MAX_INPUT = 6144
MAX_OUTPUT = 1024
COLUMNS = ("rid", "arrival", "input_len", "output_len", "snr_up_db", "snr_down_db",
           "ttft_slo", "tpot_slo")


@dataclass(slots=True)
class EdgeRequest:
    """One request from a mobile user: lengths, radio quality and its latency targets."""

    rid: int
    arrival: float
    input_len: int
    output_len: int
    snr_up_db: float
    snr_down_db: float
    ttft_slo: float
    tpot_slo: float

    @property
    def deadline(self) -> float:
        """Hard end-to-end deadline (seconds after arrival)."""
        return self.ttft_slo + self.tpot_slo * (self.output_len - 1)


def _check_snr_range(snr_db: tuple[float, float]) -> None:
    for bound in snr_db:
        check_snr(bound)
    if snr_db[0] > snr_db[1]:
        raise BadInputError(f"SNR range [{snr_db[0]:g}, {snr_db[1]:g}] dB has min > max",
                            field="snr_db")


def generate(n: int, rate: float, seed: int, snr_db: tuple[float, float] = (5.0, 25.0),
             classes: dict[str, tuple] | None = None) -> list[EdgeRequest]:
    """``n`` Poisson arrivals at ``rate`` req/s from the class mix; seeded and reproducible."""
    if n < 1:
        raise BadInputError("must be >= 1", field="requests")
    if not math.isfinite(rate) or rate <= 0:
        raise BadInputError(f"must be a positive rate, got {rate}", field="rate")
    _check_snr_range(snr_db)
    table = classes or CLASSES
    rng = np.random.default_rng(seed)
    names = list(table)
    shares = np.array([table[c][0] for c in names], dtype=float)
    kind = rng.choice(len(names), size=n, p=shares / shares.sum())
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n))
    snr = rng.uniform(snr_db[0], snr_db[1], size=(n, 2))
    out = []
    for i in range(n):
        _, in_med, in_sig, out_med, out_sig, ttft, tpot = table[names[kind[i]]]
        inp = int(np.clip(round(in_med * math.exp(in_sig * rng.standard_normal())), 16,
                          MAX_INPUT))
        outl = int(np.clip(round(out_med * math.exp(out_sig * rng.standard_normal())), 2,
                           MAX_OUTPUT))
        out.append(EdgeRequest(i, float(arrivals[i]), inp, outl, float(snr[i, 0]),
                               float(snr[i, 1]), ttft, tpot))
    return out


def from_trace(trace, seed: int = 0, snr_db: tuple[float, float] = (5.0, 25.0),
               ttft_slo: float = 2.0, tpot_slo: float = 0.08) -> list[EdgeRequest]:
    """Turn a schedlab.llm Trace into edge requests with seeded SNRs and the given SLOs."""
    _check_snr_range(snr_db)
    rng = np.random.default_rng(seed)
    reqs = list(trace)
    snr = rng.uniform(snr_db[0], snr_db[1], size=(len(reqs), 2))
    return [EdgeRequest(i, float(r.arrival), max(1, int(r.input_len)), max(2, int(r.output_len)),
                        float(snr[i, 0]), float(snr[i, 1]), ttft_slo, tpot_slo)
            for i, r in enumerate(reqs)]


def read_requests(path: str | Path, seed: int = 0) -> list[EdgeRequest]:
    """Read our CSV/Parquet request table; missing optional columns are filled (seeded)."""
    path = Path(path)
    frame = read_frame(path, required=dict(arrival=float, input_len=int, output_len=int))
    optional = {c: float for c in ("snr_up_db", "snr_down_db", "ttft_slo", "tpot_slo")
                if c in frame.columns}
    if optional:
        frame = read_frame(path, required=dict(arrival=float, input_len=int, output_len=int,
                                               **optional))
    if frame.height == 0:
        raise BadInputError("has no requests", path=path)
    rng = np.random.default_rng(seed)
    fill = dict(snr_up_db=lambda: float(rng.uniform(5, 25)),
                snr_down_db=lambda: float(rng.uniform(5, 25)),
                ttft_slo=lambda: 2.0, tpot_slo=lambda: 0.08)
    line_offset = 2 if path.suffix.lower() == ".csv" else 1
    out = []
    for i, row in enumerate(frame.iter_rows(named=True)):
        values = {k: (row[k] if k in optional and row[k] is not None else fill[k]())
                  for k in fill}
        out.append(_checked(i, row, values, path, i + line_offset))
    out.sort(key=lambda r: (r.arrival, r.rid))
    return out


def _checked(i: int, row: dict, values: dict, path: Path, line: int) -> EdgeRequest:
    for name, low in (("arrival", 0.0), ("input_len", 1), ("output_len", 2)):
        value = row[name]
        if value is None or not math.isfinite(value) or value < low:
            raise BadInputError(f"{value!r} must be a finite number >= {low}", path=path,
                                line=line, field=name)
    for name in ("snr_up_db", "snr_down_db"):
        low, high = SNR_DB_RANGE
        if not math.isfinite(values[name]) or not low <= values[name] <= high:
            raise BadInputError(f"SNR {values[name]!r} dB is outside [{low:g}, {high:g}]",
                                path=path, line=line, field=name)
    for name in ("ttft_slo", "tpot_slo"):
        if not math.isfinite(values[name]) or values[name] <= 0:
            raise BadInputError(f"{values[name]!r} must be positive seconds", path=path,
                                line=line, field=name)
    return EdgeRequest(i, float(row["arrival"]), int(row["input_len"]), int(row["output_len"]),
                       float(values["snr_up_db"]), float(values["snr_down_db"]),
                       float(values["ttft_slo"]), float(values["tpot_slo"]))


def write_requests(requests: list[EdgeRequest], path: str | Path) -> Path:
    """Write requests as CSV in the format :func:`read_requests` reads, atomically."""
    with atomic_write(path) as handle:
        handle.write(",".join(COLUMNS) + "\n")
        for r in requests:
            handle.write(f"{r.rid},{r.arrival:.6f},{r.input_len},{r.output_len},"
                         f"{r.snr_up_db:.3f},{r.snr_down_db:.3f},{r.ttft_slo},{r.tpot_slo}\n")
    return Path(path)


#: the first 600 requests of Mooncake's FAST'25 conversation trace (kvcache-ai/Mooncake,
#: FAST25-release/traces/conversation_trace.jsonl, Apache-2.0): timestamp (ms), prompt and output
#: lengths; hash_ids dropped. See data/README.md.
MOONCAKE_SLICE = Path(__file__).with_name("data") / "mooncake_conversation_600.csv"


def mooncake(stretch: float = 1.0, seed: int = 0, snr_db: tuple[float, float] = (5.0, 25.0),
             ttft_slo: float = 2.0, tpot_slo: float = 0.08,
             path: str | Path = MOONCAKE_SLICE) -> list[EdgeRequest]:
    """Real request lengths and arrivals (stretched ``stretch`` times) from a Mooncake-format
    CSV (``timestamp_ms,input_length,output_length``); SNRs seeded, SLOs as ``from_trace``."""
    if not math.isfinite(stretch) or stretch <= 0:
        raise BadInputError(f"must be a positive factor, got {stretch}", field="stretch")
    _check_snr_range(snr_db)
    frame = read_frame(Path(path), required=dict(timestamp_ms=float, input_length=int,
                                                 output_length=int))
    rng = np.random.default_rng(seed)
    snr = rng.uniform(snr_db[0], snr_db[1], size=(frame.height, 2))
    return [EdgeRequest(i, t / 1e3 * stretch, max(1, int(n)), max(2, int(m)), float(snr[i, 0]),
                        float(snr[i, 1]), ttft_slo, tpot_slo)
            for i, (t, n, m) in enumerate(frame.select("timestamp_ms", "input_length",
                                                       "output_length").iter_rows())]
