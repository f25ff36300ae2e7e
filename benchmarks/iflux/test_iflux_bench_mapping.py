"""IFlux (paper 10) speeds: mapping throughput, scheduler decision time, deployment overhead.

Run with ``pytest benchmarks/iflux``. Targets from the paper: 3.5M intents/s on one core,
0.02% scheduler overhead and 0.01% runtime overhead relative to job time. Each benchmark stores
its throughput in ``extra_info`` so ``--benchmark-json`` carries intents/s directly.
"""

import sys
import tempfile
from pathlib import Path

import pytest

from schedlab.core.io import write_text
from schedlab.iflux import deploy
from schedlab.iflux.engine import decide, run
from schedlab.iflux.intents import intent_from_dict, random_codes
from schedlab.iflux.policies import shared_mapper
from schedlab.iflux.storage import Site
from schedlab.iflux.workloads import intent_stream

N = 2_000_000


def _median(benchmark) -> float:
    """Median seconds per round; NaN under --benchmark-disable (no stats are kept)."""
    return benchmark.stats.stats.median if benchmark.stats else float("nan")


@pytest.fixture(scope="module")
def codes():
    return random_codes(N, 0)


def test_iflux_bench_compiled_mapping(benchmark, codes):
    """Fused (Numba) table lookup over 2M encoded intents."""
    mapper = shared_mapper("iflux")
    mapper.map(codes[:10])
    benchmark.pedantic(mapper.map, args=(codes,), rounds=10, warmup_rounds=1)
    benchmark.extra_info["intents_per_s"] = N / _median(benchmark)


def test_iflux_bench_numpy_mapping(benchmark, codes):
    """The same table with plain NumPy (index computation + two gathers)."""
    table = shared_mapper("iflux").table
    benchmark.pedantic(table.lookup_numpy, args=(codes,), rounds=5, warmup_rounds=1)
    benchmark.extra_info["intents_per_s"] = N / _median(benchmark)


def test_iflux_bench_interpreted_rules(benchmark, codes):
    """The rule interpreter (reference), 5k intents."""
    mapper = shared_mapper("iflux-interp")
    part = codes[:5000]
    benchmark.pedantic(mapper.map, args=(part,), rounds=3)
    benchmark.extra_info["intents_per_s"] = len(part) / _median(benchmark)


def test_iflux_bench_job_decision(benchmark):
    """Scheduler-side work for one job with 8 intents: validate, map, fit capacity."""
    raw = intent_stream(8, 1)
    for i, r in enumerate(raw):
        r["size"] = 1 << 20
        r["path"] = f"/pfs/job/d{i}"
    shared_mapper("iflux").map(random_codes(8, 0))

    def one_job():
        return decide([intent_from_dict(r, {}) for r in raw])

    benchmark.pedantic(one_job, rounds=200, warmup_rounds=10)
    benchmark.extra_info["decision_ms"] = _median(benchmark) * 1e3


@pytest.mark.skipif(not deploy.namespaces_available(), reason="needs mount namespaces (root)")
@pytest.mark.parametrize("mapper", ["pfs", "iflux"])
def test_iflux_bench_deploy_true(benchmark, mapper):
    """Deploy + run `true` + tear down; iflux minus pfs is IFlux's runtime overhead per job."""
    base = Path(tempfile.mkdtemp(prefix="iflux-bench-"))
    site = Site.under(base / "site", ram_base=base / "ram")
    write_text(base / "site.json", site.to_json())
    intents = [intent_from_dict(dict(path=str(base / "site" / "pfs" / "scratch"),
                                     usage="temporary"), {})]
    benchmark.pedantic(run, args=(intents, ["true"], base / "site.json"),
                       kwargs=dict(mapper=mapper), rounds=20, warmup_rounds=2)
    benchmark.extra_info["ms"] = _median(benchmark) * 1e3
    import shutil

    shutil.rmtree(base, ignore_errors=True)
    assert sys.platform.startswith("linux")
