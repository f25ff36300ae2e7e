"""Where public data sets live: one setting, read by every experiment and reader.

Why one setting: modules used to find traces by their place in the source tree
(``<repo>/../shared/data``), so an installed package, or a user with their own copy of a trace,
could not point the main job at real data. Now every reader asks :func:`data_dir`, which looks,
in order, at

1. ``$SCHEDLAB_DATA`` - set by ``schedlab reproduce --data DIR`` (:func:`use_data_dir`), so the
   spawned worker processes of a sweep inherit it;
2. the user cache directory (``platformdirs``: ``~/.cache/schedlab/data`` on Linux), when it holds
   anything - ``schedlab data fetch`` writes there;
3. ``../shared/data`` beside this repository (a checkout's development copy).

Without an explicit setting, :func:`data_path` looks a path up in (2) then (3), so a cache that
holds one fetched data set does not hide the others.

When none holds data the cache directory is returned anyway: readers then find their files
missing and the experiments fall back to their seeded stand-ins, saying so in the report.
This module imports nothing heavy: ``schedlab --help`` must stay fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from schedlab.core.errors import ConfigError

#: the environment variable that names the data directory (and carries it to worker processes)
ENV = "SCHEDLAB_DATA"

#: this repository's development copy: <repo>/../shared/data (src/schedlab/core/data.py)
REPO_FALLBACK = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def cache_dir() -> Path:
    """The per-user cache directory data sets are fetched into (it may not exist yet)."""
    from platformdirs import user_cache_path

    return user_cache_path("schedlab", appauthor=False) / "data"


def _holds_data(path: Path) -> bool:
    try:
        return path.is_dir() and any(path.iterdir())
    except OSError:
        return False


def data_dir() -> Path:
    """The directory every data set is looked up in (see the module docstring for the order)."""
    explicit = os.environ.get(ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    cache = cache_dir()
    if _holds_data(cache):
        return cache
    if REPO_FALLBACK.is_dir():
        return REPO_FALLBACK
    return cache


def data_path(*parts: str) -> Path:
    """Where ``parts`` (``"alibaba", "genai_lora_request_trace.csv"``) is: under the explicit
    setting only, when there is one; else in the cache dir or, failing that, ../shared/data.

    Why per path: a cache holding one fetched data set must not hide the others that only the
    repository's copy has (every experiment would silently fall back to its stand-in). Where
    the path exists nowhere, it is named under :func:`data_dir`.
    """
    explicit = os.environ.get(ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser().joinpath(*parts)
    for base in (cache_dir(), REPO_FALLBACK):
        candidate = base.joinpath(*parts)
        if candidate.exists():
            return candidate
    return data_dir().joinpath(*parts)


def download_dir() -> Path:
    """Where ``schedlab data fetch`` writes: the explicit setting, else the user cache dir
    (never the repository's fallback copy, which may be shared and read-only)."""
    explicit = os.environ.get(ENV, "").strip()
    return Path(explicit).expanduser() if explicit else cache_dir()


def use_data_dir(path: str | Path) -> Path:
    """Make ``path`` the data directory for this process and every process it starts."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError(f"{path} is not a directory", field="data")
    os.environ[ENV] = str(path)
    return path
