"""Bucketing bounds (property-based, against brute force), OFDMA allocation, readers' errors."""

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.edge_llm.bucketing import (
    bucket_count_bound,
    delta_buckets,
    padding_waste,
    spread_bound,
    waste_bound,
)
from schedlab.edge_llm.delay import allocate_rbs, rate_bps
from schedlab.edge_llm.device import kernels_from_trace
from schedlab.edge_llm.workloads import generate, read_requests, write_requests

lengths_st = st.lists(st.integers(1, 8192), min_size=1, max_size=40)
delta_st = st.floats(0.0, 2.0)


@given(lengths=lengths_st, delta=delta_st)
def test_buckets_partition_and_respect_every_bound(lengths, delta):
    buckets = delta_buckets(lengths, delta)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for b in buckets:
        low, high = min(lengths[i] for i in b), max(lengths[i] for i in b)
        assert high <= (1 + delta) * low + 1e-9
        assert np.std([lengths[i] for i in b]) <= spread_bound(lengths, b, delta) + 1e-9
    assert padding_waste(lengths, buckets) <= waste_bound(delta) + 1e-12
    assert len(buckets) <= bucket_count_bound(lengths, delta)


@given(lengths=st.lists(st.integers(1, 64), min_size=1, max_size=7), delta=delta_st)
def test_greedy_bucketing_uses_the_fewest_buckets(lengths, delta):
    """Brute force over every partition into contiguous runs of the sorted lengths (an
    optimal delta-similar cover is always contiguous): greedy is optimal."""
    ordered = sorted(lengths)
    n = len(ordered)
    best = n
    for cuts in itertools.product((0, 1), repeat=n - 1):
        runs, start = [], 0
        for k, cut in enumerate(cuts, start=1):
            if cut:
                runs.append(ordered[start:k])
                start = k
        runs.append(ordered[start:])
        if all(r[-1] <= (1 + delta) * r[0] + 1e-12 for r in runs):
            best = min(best, len(runs))
    assert len(delta_buckets(lengths, delta)) == best


@given(lengths=lengths_st, delta=st.floats(0.01, 1.0), cap=st.integers(8192, 40000))
def test_a_size_cap_keeps_the_waste_bound(lengths, delta, cap):
    buckets = delta_buckets(lengths, delta, cap)
    assert padding_waste(lengths, buckets) <= waste_bound(delta) + 1e-12
    for b in buckets:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= cap


def test_bucketing_rejects_bad_input():
    with pytest.raises(BadInputError, match="delta"):
        delta_buckets([10], -0.1)
    with pytest.raises(BadInputError, match="input_len"):
        delta_buckets([0, 10], 0.2)


@given(n_rbs=st.integers(1, 300),
       users=st.lists(st.tuples(st.integers(1, 100_000), st.floats(-10, 40)), min_size=1,
                      max_size=50))
def test_rb_allocation_uses_every_block_and_gives_everyone_some(n_rbs, users):
    bits = np.array([u[0] for u in users], dtype=float)
    snr = np.array([u[1] for u in users])
    shares = allocate_rbs(n_rbs, bits, snr)
    assert shares.sum() == pytest.approx(n_rbs)
    assert (shares > 0).all()
    if len(users) <= n_rbs:
        assert (shares == np.round(shares)).all() and (shares >= 1).all()


def test_rate_is_shannon_and_snr_range_is_checked():
    assert rate_bps(10, 0.0) == pytest.approx(10 * 180e3 * 1.0)
    assert rate_bps(1, 30.0) == pytest.approx(180e3 * math.log2(1001))
    with pytest.raises(ConfigError, match="snr"):
        rate_bps(1, 41.0)
    with pytest.raises(BadInputError):
        rate_bps(0, 10.0)


def test_requests_round_trip(tmp_path):
    reqs = generate(50, 2.0, 4)
    back = read_requests(write_requests(reqs, tmp_path / "r.csv"))
    assert [(r.input_len, r.output_len) for r in back] == [(r.input_len, r.output_len)
                                                           for r in reqs]
    assert back[0].snr_up_db == pytest.approx(reqs[0].snr_up_db, abs=1e-3)


HEADER = "arrival,input_len,output_len,snr_up_db,snr_down_db,ttft_slo,tpot_slo\n"
GOOD = "0.5,100,20,10,10,1.0,0.05\n"


@pytest.mark.parametrize("row,field", [
    ("x,100,20,10,10,1,0.05", "arrival"), ("-1,100,20,10,10,1,0.05", "arrival"),
    ("0.5,0,20,10,10,1,0.05", "input_len"), ("0.5,100,1,10,10,1,0.05", "output_len"),
    ("0.5,100,20,99,10,1,0.05", "snr_up_db"), ("0.5,100,20,10,-50,1,0.05", "snr_down_db"),
    ("0.5,100,20,10,10,0,0.05", "ttft_slo"), ("0.5,100,20,10,10,1,nan", "tpot_slo"),
    ("0.5,1.5,20,10,10,1,0.05", "input_len"),
])
def test_malformed_rows_name_file_line_and_field(tmp_path, row, field):
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + GOOD + row + "\n")
    with pytest.raises(BadInputError) as info:
        read_requests(path)
    assert info.value.field == field and info.value.path == path
    assert info.value.line == 3


@given(body=st.text(max_size=300))
def test_fuzzed_request_files_raise_only_bad_input(tmp_path_factory, body):
    path = tmp_path_factory.mktemp("fuzz") / "r.csv"
    path.write_text(HEADER + body, encoding="utf-8")
    try:
        reqs = read_requests(path)
    except BadInputError as exc:
        assert exc.path == path
    else:
        assert all(r.input_len >= 1 and r.output_len >= 2 for r in reqs)


@given(data=st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                         lambda c: st.lists(c, max_size=4) | st.dictionaries(
                             st.sampled_from(["traceEvents", "cat", "args", "block", "name",
                                              "registers per thread", "shared memory"]), c,
                             max_size=5), max_leaves=20))
def test_fuzzed_profiler_traces_raise_only_bad_input(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("trace") / "t.json"
    path.write_text(json.dumps(data))
    try:
        kernels_from_trace(path)
    except BadInputError as exc:
        assert exc.path == path


def test_profiler_trace_becomes_kernel_descriptors(tmp_path):
    event = dict(cat="kernel", name="ampere_gemm", args={"block": [128, 1, 1],
                 "registers per thread": 232, "shared memory": 81920})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [event, {"cat": "cpu_op"}, event]}))
    (k,) = kernels_from_trace(path)
    assert (k.threads, k.regs, k.smem, k.source) == (128, 232, 81920, "profiler trace")
    path.write_text(json.dumps({"traceEvents": [dict(event, args={"block": [0]})]}))
    with pytest.raises(BadInputError, match="block"):
        kernels_from_trace(path)
    path.write_text("{not json")
    with pytest.raises(BadInputError):
        kernels_from_trace(path)
