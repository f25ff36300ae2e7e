"""Intent taxonomy: sizes, validation, contradictions, encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.iflux.intents import (
    CARDINALITY,
    FEATURES,
    Intent,
    SizeClass,
    check_job,
    encode,
    intent_from_dict,
    parse_size,
    random_codes,
)


@given(st.integers(min_value=0, max_value=1 << 50))
def test_parse_size_integers_and_unit_strings_agree(n: int) -> None:
    assert parse_size(n) == n
    assert parse_size(f"{n}") == n
    assert parse_size(f"{n}B") == n
    assert parse_size(f"{n // 1024}KiB") == (n // 1024) * 1024


@given(st.text(max_size=20))
def test_parse_size_never_raises_anything_but_valueerror(text: str) -> None:
    try:
        assert parse_size(text) >= 0
    except ValueError:
        pass


def test_unknown_field_is_named() -> None:
    with pytest.raises(BadInputError) as err:
        intent_from_dict({"path": "/a", "usage": "input", "patern": "checkpoint"}, {})
    assert err.value.field == "patern" and "valid:" in str(err.value)


def test_bad_enum_value_is_named() -> None:
    with pytest.raises(BadInputError) as err:
        intent_from_dict({"path": "/a", "usage": "inbound"}, {"path": "f.yaml", "line": 3})
    assert err.value.field == "usage" and err.value.line == 3 and "inbound" in str(err.value)


@pytest.mark.parametrize("raw, field", [
    ({"usage": "input", "mode": "write-only"}, "mode"),
    ({"usage": "output", "mode": "read-only"}, "mode"),
    ({"usage": "temporary", "pattern": "checkpoint", "mode": "read-only"}, "pattern"),
    ({"usage": "temporary", "sharing": "shared", "level": "workflow"}, "usage"),
])
def test_contradicting_intents_are_rejected(raw: dict, field: str) -> None:
    with pytest.raises(BadInputError, match="contradicting") as err:
        intent_from_dict({"path": "/x", **raw}, {})
    assert err.value.field == field


def test_relative_path_is_rejected() -> None:
    with pytest.raises(BadInputError) as err:
        intent_from_dict({"path": "data", "usage": "input"}, {})
    assert err.value.field == "path"


def test_job_level_conflicts() -> None:
    a = Intent(path="/p/a", usage="input")
    check_job([a, a])  # the same intent twice is fine
    with pytest.raises(BadInputError, match="declared twice"):
        check_job([a, Intent(path="/p/a", usage="output")])
    with pytest.raises(BadInputError, match="nested"):
        check_job([a, Intent(path="/p/a/b", usage="output")])
    check_job([a, Intent(path="/p/ab", usage="output")])  # a prefix string, not a parent


def test_encoding_is_in_range_and_size_classes_are_ordered() -> None:
    sizes = [0, 64 << 20, 4 << 30, 300 << 30]
    codes = encode([Intent(path=f"/p/{i}", usage="input", size=s) for i, s in enumerate(sizes)])
    assert codes.shape == (4, len(FEATURES))
    assert list(codes[:, -1]) == [0, 1, 2, 3]
    assert list(SizeClass)[codes[-1, -1]] is SizeClass.LARGE
    rand = random_codes(1000, 1)
    assert (rand.max(axis=0) < CARDINALITY).all()


@given(st.lists(st.lists(st.sampled_from(["a", "b", "c"]), min_size=0, max_size=3),
                min_size=1, max_size=5))
def test_nesting_check_matches_a_brute_force_reference(paths: list[list[str]]) -> None:
    from pathlib import PurePosixPath

    intents = [Intent(path="/" + "/".join(p), usage="input") for p in paths]
    unique = {PurePosixPath(i.path) for i in intents}
    nested = any(a != b and a in b.parents for a in unique for b in unique)
    try:
        check_job(intents)
        assert not nested
    except BadInputError:
        assert nested
