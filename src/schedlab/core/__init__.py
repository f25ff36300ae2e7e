"""What two or more systems share: experiments and claims, executors, metrics, report, I/O.

Names are resolved on first use (PEP 562) so that importing a light part of ``core`` (errors,
CLI helpers) does not load Polars and the experiment machinery.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "BadInputError": "errors", "ConfigError": "errors", "MissingDependencyError": "errors",
    "MissingServiceError": "errors", "SchedlabError": "errors", "UnknownNameError": "errors",
    "LocalExecutor": "executors", "RayExecutor": "executors", "make_executor": "executors",
    "Claim": "experiment", "Figure": "experiment", "Result": "experiment",
    "register": "experiment",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'schedlab.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"schedlab.core.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
