"""Reading an architecture: defaults, optionally a published calibration, then a JSON file.

Why apart from ``arch``: a calibration (``calibration``) is built on ``ArchConfig`` and the cost
model, so the loader that layers a calibration under a user's file sits above both and ``arch``
imports neither.
"""

from __future__ import annotations

from pathlib import Path

from schedlab.core.errors import ConfigError
from schedlab.core.io import read_json
from schedlab.harp.arch import ArchConfig, arch_from_dict
from schedlab.harp.calibration import load_calibration


def load_arch(path: str | Path | None, calibration: str | Path | None = None) -> ArchConfig:
    """Read an architecture from JSON (partial files override the defaults); None = defaults.

    ``calibration`` (``isaac``, ``puma``, ``mnsim`` or a calibration TOML file, see
    :mod:`schedlab.harp.calibration`) replaces the defaults first; the file overrides both.
    """
    base = ArchConfig()
    if calibration is not None:
        base = load_calibration(calibration).arch()
    if path is None:
        return base
    data = read_json(path, "architecture file")
    if not isinstance(data, dict):
        raise ConfigError("an architecture must be a JSON object", path=path)
    return arch_from_dict(_merged(base.model_dump(), data), path=path)


def _merged(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = (_merged(out[key], value) if isinstance(value, dict)
                    and isinstance(out.get(key), dict) else value)
    return out
