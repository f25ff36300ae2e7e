"""Real arrival process for edge-cloud replays: the Alibaba GenAI production request trace.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). No LLM request trace with lengths (Azure LLM inference,
BurstGPT, Mooncake) is present in ``../shared/data``; the readers in ``schedlab.llm.traces`` take
any such file (``--trace``). What *is* present is Alibaba's cluster-trace-v2026-GenAI
(``../shared/data/alibaba/genai_lora_request_trace.csv``, read by path, never vendored): 26,823
timestamped requests of a production text-to-image service. Its arrival process is real (bursts,
diurnal swings, idle gaps); its requests are diffusion jobs, so prompt/output *lengths* are not
LLM lengths and come from the seeded class model (``workloads.CLASSES``). We take ``n``
consecutive requests starting at a seeded offset, spread the trace's 1-second timestamps
uniformly within their second (seeded), and rescale time so the window's mean rate is
``rate`` req/s (the burst structure is kept; the service's absolute rate, ~0.013 req/s, is far
below one GPU's).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from schedlab.core.data import data_path
from schedlab.core.errors import BadInputError
from schedlab.edge_llm.workloads import EdgeRequest, generate
from schedlab.traces.alibaba_genai import read_requests


def default_path() -> Path:
    """``<data dir>/alibaba/genai_lora_request_trace.csv`` (the data dir: schedlab.core.data)."""
    return data_path("alibaba", "genai_lora_request_trace.csv")


def read_arrivals(path: str | Path) -> np.ndarray:
    """Sorted arrival times (seconds from the first request) of the trace's ``gmt_create``."""
    path = Path(path)
    frame = read_requests(path)
    if frame.height < 2:
        raise BadInputError("needs at least two requests", path=path)
    t = np.sort(frame["time"].dt.epoch("s").to_numpy().astype(float))
    return t - t[0]


def window(arrivals: np.ndarray, n: int, rate: float, seed: int) -> np.ndarray:
    """``n`` consecutive arrivals from a seeded offset, jittered within their second and
    rescaled to a mean of ``rate`` req/s; starts at 0."""
    if n < 2 or n > arrivals.size:
        raise BadInputError(f"needs 2 <= n <= {arrivals.size} requests, got {n}", field="requests")
    if not np.isfinite(rate) or rate <= 0:
        raise BadInputError(f"must be a positive rate, got {rate}", field="rate")
    rng = np.random.default_rng(seed)
    start = int(rng.integers(0, arrivals.size - n + 1))
    t = arrivals[start : start + n] + rng.uniform(0.0, 1.0, n)
    t = np.sort(t - t.min())
    span = t[-1] if t[-1] > 0 else 1.0
    return t * (n - 1) / (rate * span)


def replay(
    n: int, rate: float, seed: int, path: str | Path | None = None, classes: dict | None = None
) -> list[EdgeRequest]:
    """Requests whose arrivals are the real trace's (rescaled) and whose lengths, SNRs and
    SLOs come from the seeded class model."""
    arrivals = window(read_arrivals(path or default_path()), n, rate, seed)
    base = generate(n, rate, seed, classes=classes)
    return [replace(r, arrival=float(a)) for r, a in zip(base, arrivals, strict=True)]
