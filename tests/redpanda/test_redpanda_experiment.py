"""The headline experiment on a small subset: claims exist, correctness claims hold."""

from __future__ import annotations

import math

from schedlab.redpanda.experiment import cgra_suite, geomean_ratio


def test_suite_subset_claims():
    result = cgra_suite(size=3, seed=0, kernels=("histogram", "matvec", "ifloop"))
    frame = result.frame
    assert frame["correct"].all()
    assert set(frame["mode"]) == {"spatial", "temporal"}
    claims = {c.statement: c for c in result.claims}
    assert all(c.holds for c in claims.values() if c.required)
    for claim in claims.values():
        assert not math.isnan(claim.measured)
    assert geomean_ratio(frame, "spatial", "cycles", "baseline", "baseline") == 1.0
    assert result.figures and result.figures[0].png.startswith(b"\x89PNG")
