"""Lazy package exports (PEP 562): ``from schedlab.xbucket import replay`` without paying for
every sibling module when only one is used.

Why: a system package's ``__init__`` re-exports its public API for users, but the CLI, helper
processes and ``schedlab --help`` import the package too; eager re-exports made each of them load
NumPy, Numba, SciPy or xDSL whether they needed them or not.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


class _ExportsFirst(types.ModuleType):
    """A package whose exported name shadows a submodule of the same name (``compare`` in
    ``xbucket/compare.py``): importing the submodule must not replace the export, as it would
    not have with eager re-exports."""

    _shadowed: frozenset[str] = frozenset()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._shadowed and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


def lazy_exports(package: str, exports: Mapping[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``; ``exports`` maps name -> submodule.

    A submodule's own name (``schedlab.xbucket.policies``) also resolves, as it would after an
    eager import.
    """
    module = sys.modules[package]
    namespace = module.__dict__
    shadowed = frozenset(n for n, where in exports.items() if n == where)
    if shadowed:
        module.__class__ = type("LazyPackage", (_ExportsFirst,), {"_shadowed": shadowed})

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as exc:
                if exc.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(f"{package}.{where}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__, sorted(exports)
