"""Looking a CLI name up in a registry dict, with one clear error for a bad name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from schedlab.core.errors import UnknownNameError

T = TypeVar("T")


def lookup(registry: Mapping[str, T], kind: str, name: str) -> T:
    """``registry[name]``, or an UnknownNameError naming ``kind`` and listing the valid names.

    Every system keeps its method and baselines in a dict keyed by CLI name; this is the one
    place that turns a bad name into a clear error.
    """
    if name not in registry:
        raise UnknownNameError(kind, name, sorted(registry))
    return registry[name]


__all__ = ["lookup"]
