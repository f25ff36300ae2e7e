"""The headline experiment's inputs: EUA topology when present, seeded otherwise; cost sweep."""

from __future__ import annotations

import polars as pl
import pytest

from schedlab.core.errors import BadInputError
from schedlab.mec_coalition import synthetic
from schedlab.mec_coalition.experiment import COORD_SWEEP, cost_sweep, eua_dir, market
from schedlab.mec_coalition.model import Economy
from schedlab.mec_coalition.workloads import from_files


def test_market_falls_back_to_the_seeded_generator(monkeypatch, tmp_path):
    monkeypatch.setenv("SCHEDLAB_DATA", str(tmp_path))
    assert eua_dir() is None
    inst, ran_with = market(10, 6, 40, 0)
    assert ran_with.startswith("seeded generator") and inst.cloudlets.n == 10
    assert market(10, 6, 40, 0, topology="seeded")[1] == "seeded generator"


def test_market_uses_the_eua_topology_when_present(shared_data, monkeypatch):
    if not (shared_data / "eua" / "edge_servers_melbcbd.csv").is_file():
        pytest.skip("EUA data absent")
    monkeypatch.setenv("SCHEDLAB_DATA", str(shared_data))
    inst, ran_with = market(40, 8, 120, 0)
    assert ran_with.startswith("EUA topology (real: 40 Melbourne CBD sites, 120 user")
    assert "seeded rates" in ran_with
    assert inst.cloudlets.n == 40 and inst.users.n == 120
    assert inst.economy.coord_cost == 0.0  # the headline claims are at charge 0


def test_max_sites_keeps_a_compact_sub_area(tmp_path):
    sites = tmp_path / "sites.csv"
    sites.write_text("x_km,y_km\n0,0\n0.1,0\n5,5\n0,0.1\n")
    users = tmp_path / "users.csv"
    users.write_text("x_km,y_km\n0.05,0\n4.9,5\n0,0.05\n")
    inst = from_files(sites, users, 6, 0, max_sites=3)
    assert inst.cloudlets.n == 3 and inst.users.n == 2  # the far site and its user dropped
    with pytest.raises(BadInputError) as info:
        from_files(sites, users, 6, 0, max_sites=0)
    assert info.value.field == "max_sites"


def test_cost_sweep_charges_every_pair_and_is_zero_at_zero():
    inst = synthetic(8, 6, 50, 0, economy=Economy())
    sweep = cost_sweep(inst, 0, costs=(0.0, 0.05))
    assert set(sweep["policy"]) == {"coalition", "rounding", "trimcaching", "non-cooperative"}
    at0 = sweep.filter(pl.col("coord_cost") == 0.0)
    assert (at0["coordination_cost"] == 0).all()
    grand = sweep.filter(pl.col("policy") == "rounding").sort("coord_cost")
    drop = grand["payoff"][0] - grand["payoff"][1]
    assert drop == pytest.approx(0.05 * 8 * 7 / 2, rel=1e-9)
    alone = sweep.filter(pl.col("policy") == "non-cooperative")["payoff"]
    assert alone[0] == pytest.approx(alone[1])
    assert COORD_SWEEP[0] == 0.0


def test_chunked_market_build_matches_a_direct_computation():
    import numpy as np

    from schedlab.mec_coalition import model

    inst = synthetic(12, 6, model._CHUNK + 300, 3)
    d = np.linalg.norm(inst.users.xy[:, None] - inst.cloudlets.xy[None], axis=2)
    assert (inst.home == d.argmin(axis=1)).all()
    assert np.allclose(inst.access_s, inst.economy.access_s + inst.economy.access_per_km_s
                       * d.min(axis=1))
    assert (np.diff(inst.cand.user) >= 0).all()
    assert inst.cand.user.max() >= model._CHUNK  # the second chunk contributed triples


def test_real_inputs_runs_seeded_without_shared_data_and_says_so(monkeypatch, tmp_path):
    from schedlab.mec_coalition.experiment import real_inputs

    monkeypatch.setenv("SCHEDLAB_DATA", str(tmp_path))
    result = real_inputs(cloudlets=8, models=10, users=40, sim_jobs=5000, seed=0)
    assert "seeded generator" in result.ran_with and "seeded demand" in result.ran_with
    assert set(result.frame["zoo"].unique()) == {"llm", "glue"}
    check = [c for c in result.claims if c.statement.startswith("Queueing model check")]
    assert check and check[0].required
