"""The headline experiment on a small subset: claims exist, correctness claims hold."""

from __future__ import annotations

import math

import polars as pl
import pytest

from schedlab.redpanda.experiment import cgra_suite, geomean_ratio


def test_suite_subset_claims():
    result = cgra_suite(size=3, seed=0, kernels=("histogram", "ifloop"))
    frame = result.frame
    assert frame["correct"].all()
    assert set(frame["mode"]) == {"spatial", "temporal"}
    claims = {c.statement: c for c in result.claims}
    assert all(c.holds for c in claims.values() if c.required)
    for claim in claims.values():
        assert not math.isnan(claim.measured)
    # the headline claim is computed from the frame, not typed in: RedPanda vs the strongest
    # prior flow per kernel (fewest cycles of baseline / per-array-pred / per-array-steer)
    head = next(c for c in result.claims if c.statement.startswith("RedPanda cuts spatial"))
    old = next(c for c in result.claims if "serial-memory prior flow only" in c.statement
               and c.metric == "% fewer cycles (geomean)")
    spatial = frame.filter(pl.col("mode") == "spatial")
    cyc = {(k, f): c for k, f, c in spatial.select("kernel", "flow", "cycles").iter_rows()}
    kernels = sorted(set(spatial["kernel"]))
    best = {k: min(cyc[(k, f)] for f in ("baseline", "per-array-pred", "per-array-steer"))
            for k in kernels}
    by_hand = math.exp(sum(math.log(cyc[(k, "redpanda")] / best[k]) for k in kernels)
                       / len(kernels))
    assert head.measured == pytest.approx(100 * (1 - by_hand))
    assert head.peer_figure <= math.exp(sum(math.log(cyc[(k, "baseline")]) for k in kernels)
                                        / len(kernels))
    vs_base = math.exp(sum(math.log(cyc[(k, "redpanda")] / cyc[(k, "baseline")])
                           for k in kernels) / len(kernels))
    assert old.measured == pytest.approx(100 * (1 - vs_base))
    assert old.measured >= head.measured  # the strongest prior flow is never weaker
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
