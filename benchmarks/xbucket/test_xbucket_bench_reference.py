"""Ours next to the reference C implementation (cctools), measured in one run.

Needs a cctools tree with dttools/src/libdttools.a built, named by XBUCKET_CCTOOLS (e.g.
/tmp/ref-cctools), and the real traces in ../shared/data/xbucket; skips otherwise. For each
trace and both failure semantics it records both efficiencies and the reference's prediction
timings. Greedy modes of the reference re-bucket in O(n^3) and take minutes per trace, so they
run on the first XBUCKET_REF_GREEDY_TASKS tasks (default 400).

The per-resource test replays each resource alone on both sides (the driver's RESOURCE
argument; ours ``compare(per_resource=True)``) for every cctools mode, full traces, and checks
that the deterministic modes (DE, DG) equal cctools row by row. XBUCKET_CCTOOLS can be built
from a cctools git directory with benchmarks/xbucket/build_cctools_ref.sh.
"""

import os
import sys
from pathlib import Path

import polars as pl
import pytest

from schedlab.core.data import data_dir
from schedlab.xbucket.reference import build_driver, our_timings, side_by_side
from schedlab.xbucket.workloads import read_reports

DATA = data_dir() / "xbucket"
TRACES = ["bioblast", "coffea", "lobsterCMSanalysis", "lobsterCMSsimulation"]
CCTOOLS = os.environ.get("XBUCKET_CCTOOLS")

needs_reference = pytest.mark.skipif(
    not CCTOOLS or not DATA.is_dir(), reason="set XBUCKET_CCTOOLS and provide ../shared/data")


@needs_reference
@pytest.mark.parametrize("trace", TRACES)
def test_xbucket_bench_reference_efficiency(benchmark, trace, tmp_path):
    driver = build_driver(CCTOOLS, tmp_path / "driver")
    tasks = read_reports(DATA / f"{trace}.txt")
    limit = int(os.environ.get("XBUCKET_REF_GREEDY_TASKS", "400"))
    exhaustive = benchmark.pedantic(side_by_side, args=(driver, tasks, trace,
                                                        ("pe-bucket", "de-bucket")),
                                    rounds=1, iterations=1)
    greedy = side_by_side(driver, tasks[:limit], f"{trace}[:{limit}]",
                          ("pg-bucket", "dg-bucket"))
    for frame in (exhaustive, greedy):
        for row in frame.iter_rows(named=True):
            key = f"{row['workflow']}/{row['algorithm']}/{row['semantics']}"
            benchmark.extra_info[key] = dict(ours=row["ours_efficiency_mean"],
                                             ref=row["ref_efficiency_mean"],
                                             ref_predict_p99_us=row["ref_predict_p99_us"])
            print(f"{key}: ours {row['ours_efficiency_mean']:.4f} "
                  f"ref {row['ref_efficiency_mean']:.4f} "
                  f"(ref p99 predict {row['ref_predict_p99_us']:.1f} us)")


@needs_reference
def test_xbucket_bench_our_timings_next_to_reference():
    frame = our_timings()
    print(frame)
    assert frame.height == 4


@needs_reference
@pytest.mark.parametrize("trace", TRACES)
def test_xbucket_bench_reference_per_resource(benchmark, trace, tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from per_resource_reference import MODES, markdown, one_mode

    driver = build_driver(CCTOOLS, tmp_path / "driver")
    rows = benchmark.pedantic(
        lambda: [r for mode in MODES for r in one_mode(driver, DATA / f"{trace}.txt", mode)],
        rounds=1, iterations=1)
    frame = pl.DataFrame(rows).with_columns(difference=pl.col("schedlab") - pl.col("cctools"))
    print(markdown(frame))
    for row in rows:
        key = f"{trace}/{row['resource']}/{row['mode']}"
        benchmark.extra_info[key] = dict(cctools=row["cctools"], schedlab=row["schedlab"])
        if row["mode"].startswith("det-"):  # no random stream: the same allocations
            assert abs(row["schedlab"] - row["cctools"]) < 1e-4, key
