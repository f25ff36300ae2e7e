"""JSON-ready values, in a module that imports nothing heavy: the lean CLIs (whose whole call
is timed against C tools) use it without loading ``core.io``'s csv/tempfile machinery."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def jsonable(value: Any) -> Any:
    """Make numpy scalars, paths and nested containers JSON-serialisable."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    return value
