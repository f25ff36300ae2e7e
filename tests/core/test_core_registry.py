"""lookup returns the registered value or names the kind and lists the valid names."""

import pytest

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.core.registry import lookup

REGISTRY = {"zeta": 1, "alpha": 2, "mid": 3}


def test_lookup_hit_returns_value():
    assert lookup(REGISTRY, "policy", "alpha") == 2
    assert lookup(REGISTRY, "policy", "zeta") == 1


def test_lookup_miss_names_kind_and_lists_valid_names_sorted():
    with pytest.raises(UnknownNameError) as info:
        lookup(REGISTRY, "policy", "nope")
    err = info.value
    assert isinstance(err, BadInputError)
    assert (err.kind, err.name, err.valid) == ("policy", "nope", ["alpha", "mid", "zeta"])
    assert str(err) == "unknown policy 'nope'; valid: alpha, mid, zeta"
