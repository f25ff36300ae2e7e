"""Workloads, the request-file reader and the checker's arithmetic (Arcus, paper 12)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.arcus.bench import Violations, check, compare_value
from schedlab.arcus.workloads import WORKLOADS, make_workload, read_requests, reference_run
from schedlab.core.errors import BadInputError, UnknownNameError


@pytest.mark.parametrize("name", WORKLOADS)
def test_workloads_are_seeded_and_run_in_the_reference(name):
    first, again = make_workload(name, 12, 3), make_workload(name, 12, 3)
    assert first.requests == again.requests
    reference = reference_run(first)
    assert len(reference.outputs) == 12
    assert all(0.0 <= r <= 1.0 for r in reference.read_ratio.values())


def test_read_ratio_knob_changes_the_mix():
    def reads(ratio):
        ops = [op for _, arg in make_workload("rw", 40, 1, read_ratio=ratio).requests
               for stage in arg["stages"] for op in stage]
        return sum(op[0] == "r" for op in ops) / len(ops)

    assert reads(0.9) > 0.8 > 0.2 > reads(0.1)


def test_bad_workload_options_are_named():
    with pytest.raises(UnknownNameError, match="valid: single-read"):
        make_workload("nope", 5, 0)
    with pytest.raises(BadInputError, match="read_ratio"):
        make_workload("rw", 5, 0, read_ratio=2.0)


def test_checker_counts_duplicates_and_losses():
    workload = make_workload("ledger", 6, 0)
    reference = reference_run(workload)
    state = dict(reference.state)
    some_list = next(k for k, v in state.items() if isinstance(v, list))
    state[some_list] = state[some_list] + state[some_list][:1]
    counter = next(k for k, v in state.items() if isinstance(v, int))
    state[counter] -= 2
    found = check(workload, reference.outputs, state)
    assert (found.duplicated_writes, found.lost_writes, found.inconsistent_reads) == (1, 2, 0)
    assert check(workload, reference.outputs, reference.state).total == 0


@given(st.lists(st.integers(0, 5), max_size=8), st.lists(st.integers(0, 5), max_size=8))
def test_list_difference_is_a_multiset_difference(expected, actual):
    found = Violations()
    compare_value(expected, actual, found)
    assert found.duplicated_writes - found.lost_writes == len(actual) - len(expected)
    assert (found.total == 0) == (sorted(expected) == sorted(actual))


def test_request_file_round_trip(tmp_path):
    path = tmp_path / "reqs.jsonl"
    path.write_text('# comment\n{"fn": "ledger", "arg": {"counter": "c", "list": "l", '
                    '"id": "1"}}\n\n')
    workload = read_requests(path)
    assert workload.requests == [("ledger", {"counter": "c", "list": "l", "id": "1"})]


@pytest.mark.parametrize(("line", "field"), [
    ("{not json", None), ("[1, 2]", None), ('{"arg": 1}', "fn"),
    ('{"fn": "nope", "arg": 1}', "fn"), ('{"fn": "read"}', "arg"),
])
def test_malformed_request_lines_name_file_line_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"fn": "read", "arg": {"key": "a"}}\n' + line + "\n")
    with pytest.raises(BadInputError) as info:
        read_requests(path)
    assert info.value.path == path and info.value.line == 2 and info.value.field == field


@given(st.binary(max_size=200))
def test_fuzzed_request_files_fail_cleanly(tmp_path_factory, blob):
    path = tmp_path_factory.mktemp("fuzz") / "f.jsonl"
    path.write_bytes(blob)
    try:
        workload = read_requests(path)
    except BadInputError as exc:
        assert exc.path == path
    else:
        assert all(isinstance(fn, str) for fn, _ in workload.requests)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(BadInputError, match="no such file"):
        read_requests(tmp_path / "absent.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(BadInputError, match="no requests"):
        read_requests(tmp_path / "empty.jsonl")
