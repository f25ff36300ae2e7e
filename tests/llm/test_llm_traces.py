"""Trace readers/writers and generators: round trips, seeded determinism, clear errors."""

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.llm import (
    VTC_SCENARIOS,
    assign_tenants,
    read_azure,
    read_burstgpt,
    read_mooncake,
    read_trace,
    shared_prefix,
    vtc_scenario,
    write_azure,
    write_mooncake,
)

DATA = Path(__file__).parent / "data"


def test_shipped_samples_read_back():
    moon = read_mooncake(DATA / "sample_mooncake.jsonl")
    assert len(moon) == 72 and moon.n_tenants == 3 and moon.block_tokens == 512
    moon.validate()
    azure = read_trace(DATA / "sample_azure.csv", block_tokens=512)
    assert len(azure) == 39 and azure.n_tenants == 2
    azure.validate()


def test_mooncake_round_trip(tmp_path):
    trace = shared_prefix(groups=3, prompts_per_group=4, tenants=2, block_tokens=64)
    write_mooncake(trace, tmp_path / "t.jsonl")
    back = read_mooncake(tmp_path / "t.jsonl", block_tokens=64)
    assert [r.blocks for r in back] == [r.blocks for r in trace]
    assert [r.input_len for r in back] == [r.input_len for r in trace]
    assert back.tenant_names and set(back.tenant_names) <= {"t0", "t1"}


def test_azure_round_trip_and_iso_timestamps(tmp_path):
    trace = vtc_scenario("overload", duration=10, seed=1)
    write_azure(trace, tmp_path / "a.csv")
    back = read_azure(tmp_path / "a.csv")
    assert [r.input_len for r in back] == [r.input_len for r in trace]
    path = tmp_path / "iso.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,100,10\n2023-11-16 18:15:47.1805900,50,5\n"
    )
    iso = read_azure(path)
    assert iso.requests[1].arrival == pytest.approx(0.5)


def test_burstgpt_skips_failures_and_maps_models(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,100,20,120,Conversation log\n6,GPT-4,50,0,50,API log\n"
        "7,GPT-4,80,8,88,API log\n"
    )
    trace = read_burstgpt(path)
    assert len(trace) == 2 and trace.tenant_names == ["ChatGPT", "GPT-4"]


@pytest.mark.parametrize(
    "line, field",
    [
        ('{"timestamp": -1, "input_length": 5, "output_length": 1, "hash_ids": [1]}', "timestamp"),
        (
            '{"timestamp": 1, "input_length": "x", "output_length": 1, "hash_ids": [1]}',
            "input_length",
        ),
        (
            '{"timestamp": 1, "input_length": 5, "output_length": 0, "hash_ids": [1]}',
            "output_length",
        ),
        ('{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}', "hash_ids"),
        ('{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "hash_ids"),
        ('{"input_length": 5, "output_length": 1, "hash_ids": [1]}', "timestamp"),
    ],
)
def test_mooncake_bad_fields_name_line_and_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    good = '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [9]}'
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(BadInputError) as info:
        read_mooncake(path)
    assert info.value.line == 2 and info.value.field == field and info.value.path == path


@pytest.mark.parametrize(
    "row, field",
    [
        ("yesterday,10,1", "TIMESTAMP"),
        ("1,ten,1", "ContextTokens"),
        ("1,10,-3", "GeneratedTokens"),
        ("1,10", "GeneratedTokens"),
    ],
)
def test_azure_bad_fields_name_line_and_field(tmp_path, row, field):
    path = tmp_path / "bad.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n0,5,5\n{row}\n")
    with pytest.raises(BadInputError) as info:
        read_azure(path)
    assert info.value.line == 3 and info.value.field == field


def test_missing_column_and_missing_file(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("TIMESTAMP,Tokens\n1,2\n")
    with pytest.raises(BadInputError, match="missing column"):
        read_azure(path)
    with pytest.raises(BadInputError, match="no such file"):
        read_mooncake(tmp_path / "nope.jsonl")
    with pytest.raises(BadInputError, match="no requests"):
        (tmp_path / "e.jsonl").write_text("\n")
        read_mooncake(tmp_path / "e.jsonl")


@given(st.binary(max_size=300))
def test_fuzzed_mooncake_never_leaks_raw_errors(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("fuzz") / "f.jsonl"
    path.write_bytes(blob)
    try:
        read_mooncake(path, block_tokens=4)
    except BadInputError as exc:
        assert exc.path == path


@given(st.text(max_size=300))
def test_fuzzed_csv_readers_never_leak_raw_errors(tmp_path_factory, text):
    root = tmp_path_factory.mktemp("fuzz")
    for header, reader in (
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", read_azure),
        ("Timestamp,Model,Request tokens,Response tokens\n", read_burstgpt),
    ):
        path = root / "f.csv"
        path.write_bytes((header + text).encode("utf-8", "replace"))
        try:
            reader(path)
        except BadInputError as exc:
            assert exc.path == path


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(1, 5000), st.integers(1, 500)),
        min_size=1,
        max_size=20,
    )
)
def test_mooncake_parser_round_trips_arbitrary_valid_records(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("rt") / "r.jsonl"
    lines = [
        json.dumps(
            dict(timestamp=t, input_length=i, output_length=o, hash_ids=list(range(-(-i // 512))))
        )
        for t, i, o in records
    ]
    path.write_text("\n".join(lines) + "\n")
    trace = read_mooncake(path)
    assert sorted(r.input_len for r in trace) == sorted(i for _, i, _ in records)
    assert min(r.arrival for r in trace) == 0.0


@pytest.mark.parametrize("name", sorted(VTC_SCENARIOS))
def test_vtc_scenarios_are_seeded_and_valid(name):
    a = vtc_scenario(name, duration=30, seed=3)
    b = vtc_scenario(name, duration=30, seed=3)
    assert [(r.tenant, r.arrival) for r in a] == [(r.tenant, r.arrival) for r in b]
    assert len(a) > 0 and all(r.arrival < 30 for r in a)
    a.validate()


def test_vtc_overload_rates_and_unknown_name():
    trace = vtc_scenario("overload", duration=600, seed=0)
    counts = [sum(r.tenant == t for r in trace) for t in (0, 1)]
    assert counts[0] / 600 == pytest.approx(1.5, rel=0.15)
    assert counts[1] / 600 == pytest.approx(3.0, rel=0.15)
    with pytest.raises(UnknownNameError):
        vtc_scenario("nope")


@given(
    st.integers(1, 6),
    st.integers(1, 5),
    st.integers(0, 300),
    st.integers(0, 100),
    st.integers(1, 4),
)
def test_shared_prefix_structure(groups, per_group, system_len, question_len, tenants):
    if system_len + question_len == 0:
        return
    trace = shared_prefix(groups, per_group, system_len, question_len, 4, tenants, block_tokens=16)
    trace.validate()
    assert len(trace) == groups * per_group
    shared = system_len // 16
    by_prefix = {}
    for r in trace:
        by_prefix.setdefault(r.blocks[:shared], set()).add(r.tenant)
    if shared:
        assert len(by_prefix) == groups  # each group one prefix, one tenant
        assert all(len(ts) == 1 for ts in by_prefix.values())


def test_assign_tenants_keeps_prefix_groups_together():
    trace = shared_prefix(groups=6, prompts_per_group=5, tenants=1)
    assign_tenants(trace.requests, 3, "prefix")
    seen = {}
    for r in trace:
        assert seen.setdefault(r.blocks[0], r.tenant) == r.tenant
    with pytest.raises(BadInputError):
        assign_tenants(trace.requests, 0)
