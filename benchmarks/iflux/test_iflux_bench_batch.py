"""IFlux's full intent path on a columnar batch: parse + validate + map, on one core.

Run with ``pytest benchmarks/iflux/test_iflux_bench_batch.py``. Target (paper, issue 31):
3.5M intents/s on one core for the *full* path, not just the table lookup on pre-encoded codes.
The process is pinned to one CPU (``sched_setaffinity``) for the measurement, so Polars' thread
pool cannot use a second core. The batch has every enum column as strings (the worst case for
parsing), absolute paths and integer sizes; intents/s is in ``extra_info``.
"""

from __future__ import annotations

import os

import polars as pl
import pytest

from schedlab.iflux import batch
from schedlab.iflux.experiment import batch_frame
from schedlab.iflux.intents import FEATURES
from schedlab.iflux.policies import shared_mapper

N = 2_000_000


@pytest.fixture(scope="module")
def frame() -> pl.DataFrame:
    return batch_frame(N, 0)  # the batch reproduce's mapping_throughput measures


@pytest.fixture
def one_core():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs sched_setaffinity (Linux) to pin to one core")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    yield
    os.sched_setaffinity(0, before)


def _rate(benchmark, n: int) -> float:
    return n / benchmark.stats.stats.median if benchmark.stats else float("nan")


def test_iflux_bench_batch_full_path_one_core(benchmark, frame, one_core):
    """parse (7 string enum columns, paths, sizes) + validate + map, 2M intents."""
    table = shared_mapper("iflux").table
    batch.map_batch(frame.head(1000), table)
    benchmark.pedantic(batch.map_batch, args=(frame, table), rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(intents_per_s=_rate(benchmark, N), target=3.5e6)


def test_iflux_bench_batch_categorical_one_core(benchmark, frame, one_core):
    """The same batch with categorical enum columns (Arrow dictionary input)."""
    table = shared_mapper("iflux").table
    cat = frame.with_columns([pl.col(name).cast(pl.Categorical) for name, _ in FEATURES[:-1]])
    benchmark.pedantic(batch.map_batch, args=(cat, table), rounds=5, warmup_rounds=1)
    benchmark.extra_info.update(intents_per_s=_rate(benchmark, N), target=3.5e6)


def test_iflux_bench_batch_path_checks_one_core(benchmark, frame, one_core):
    """The cross-intent check (a path declared twice differently): a group-by, not per row."""
    benchmark.pedantic(batch.check_paths, args=(frame,), rounds=3, warmup_rounds=0)
    benchmark.extra_info.update(intents_per_s=_rate(benchmark, N))


def test_iflux_bench_per_intent_path(benchmark):
    """The per-intent path for comparison: Pydantic model per intent + table (5k intents)."""
    from schedlab.iflux.engine import decide
    from schedlab.iflux.intents import intent_from_dict
    from schedlab.iflux.rules import Tier
    from schedlab.iflux.workloads import intent_stream

    raws = intent_stream(5000, 0)
    unlimited = {tier: 1 << 62 for tier in Tier}
    mapper = shared_mapper("iflux")

    def once():
        decide([intent_from_dict(r, {}) for r in raws], mapper, unlimited)

    benchmark.pedantic(once, rounds=3, warmup_rounds=1)
    benchmark.extra_info.update(intents_per_s=_rate(benchmark, 5000))
