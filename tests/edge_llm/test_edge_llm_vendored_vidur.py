"""The vendored tp=1 Vidur medians stand in for ../shared/data/vidur_profiles on a fresh machine."""

from pathlib import Path

import pytest

import schedlab
from schedlab.core.data import data_dir
from schedlab.edge_llm.calibration import fit

VENDORED = Path(schedlab.__file__).parent / "llm" / "data" / "vidur_profiles_tp1"
SHARED = data_dir() / "vidur_profiles"


def test_vendored_profiles_fit_every_profiled_set():
    coeffs, rows = fit(VENDORED)
    assert len(coeffs) == 4  # A100 Llama-2-7B, A100 Llama-3-8B, H100 and A40 Llama-2-7B
    assert {r["tokens"] for r in rows} >= {1, 64, 512, 4096}


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/vidur_profiles absent")
def test_vendored_profiles_give_the_upstream_fit():
    full, full_rows = fit(SHARED)
    vend, vend_rows = fit(VENDORED)
    assert full == vend
    pairs = zip(full_rows, vend_rows, strict=True)
    assert max(abs(a["error"] - b["error"]) for a, b in pairs) < 1e-12
