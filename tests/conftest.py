"""Shared test settings.

Hypothesis runs without deadlines (CI has 2 slow, shared cores) and, in the default ``ci``
profile, derandomised so a run is repeatable; ``HYPOTHESIS_PROFILE=explore`` draws fresh
examples each run (use it locally to hunt for new failures).
"""

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from schedlab.core.data import data_dir

settings.register_profile(
    "ci", deadline=None, max_examples=30, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: real public traces live outside the project, never inside it: found by the same resolver as
#: the experiments ($SCHEDLAB_DATA, the user cache dir, then ../shared/data)
SHARED_DATA = data_dir()


@pytest.fixture
def shared_data() -> Path:
    """The data directory (schedlab.core.data); tests that need it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"no data directory ({SHARED_DATA} is absent; see `schedlab data list`)")
    return SHARED_DATA


@pytest.fixture
def hide_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``hide_tools({"fio"})``: a PATH on which those programs do not exist (every other
    program still does, through symlinks in a shadow of each directory that held one)."""

    def hide(names: set[str]) -> None:
        dirs = []
        for i, d in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
            if not d or not os.path.isdir(d):
                continue
            if not any(os.path.exists(os.path.join(d, t)) for t in names):
                dirs.append(d)
                continue
            shadow = tmp_path / f"hidden-path{i}"
            shadow.mkdir()
            for name in os.listdir(d):
                if name not in names:
                    (shadow / name).symlink_to(os.path.join(d, name))
            dirs.append(str(shadow))
        monkeypatch.setenv("PATH", os.pathsep.join(dirs))
        assert all(shutil.which(t) is None for t in names)

    return hide
