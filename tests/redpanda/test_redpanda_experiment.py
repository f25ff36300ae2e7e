"""The headline experiment on a small subset: claims exist, correctness claims hold."""

from __future__ import annotations

import math

import polars as pl
import pytest

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
    # the headline claim is computed from the frame, not typed in
    cycles = {c.metric: c.measured for c in result.claims}["% fewer cycles (geomean)"]
    rp = dict(frame.filter((pl.col("mode") == "spatial") & (pl.col("flow") == "redpanda"))
              .select("kernel", "cycles").iter_rows())
    base = dict(frame.filter((pl.col("mode") == "spatial") & (pl.col("flow") == "baseline"))
                .select("kernel", "cycles").iter_rows())
    by_hand = math.exp(sum(math.log(rp[k] / base[k]) for k in rp) / len(rp))
    assert cycles == pytest.approx(100 * (1 - by_hand))
    assert result.figures and result.figures[0].png.startswith(b"\x89PNG")
    # the cycles are the executed configurations', every link within its capacity
    assert (frame["max_link_load"] <= frame["link_capacity"]).all()
    assert (frame["max_link_load"] > 0).all()


def test_geomean_ratio_on_a_known_frame():
    frame = pl.DataFrame(dict(kernel=["a", "b", "a", "b", "a"],
                              mode=["spatial"] * 4 + ["temporal"],
                              flow=["x", "x", "y", "y", "x"],
                              cycles=[2.0, 8.0, 4.0, 4.0, 100.0]))
    # ratios 2/4 and 8/4 -> geomean 1; the temporal row must not leak in
    assert geomean_ratio(frame, "spatial", "cycles", "x", "y") == pytest.approx(1.0)
    assert geomean_ratio(frame.filter(pl.col("kernel") == "a"), "spatial", "cycles",
                         "x", "y") == pytest.approx(0.5)
    assert math.isnan(geomean_ratio(frame, "spatial", "cycles", "x", "missing"))
