"""Shared fixtures of the SynergyScale tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: OpenMP spinning on a loaded 2-core machine is many times slower,
    and the engine's own worker threads provide the overlap."""
    pytest.importorskip("torch")
    from schedlab.synergyscale.training import torch_threads

    with torch_threads(1):
        yield
