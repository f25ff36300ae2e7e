"""Model zoo, seeded markets, EUA readers: structure, validation and malformed input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.mec_coalition import Economy, Instance, from_files, make_zoo, synthetic
from schedlab.mec_coalition.model import Cloudlets


def test_zoo_shares_parameters_the_way_fine_tuning_does():
    zoo = make_zoo(30, 5, seed=0)
    for m, kind in enumerate(zoo.kind):
        base = [k for k, f in enumerate(zoo.family) if f == zoo.family[m] and zoo.kind[k] == "base"]
        assert len(base) == 1
        shared = zoo.blocks[m] & zoo.blocks[base[0]]
        if kind == "lora":  # the whole base plus a small adapter
            assert shared.sum() == zoo.blocks[base[0]].sum()
            assert zoo.model_gb[m] < 1.02 * zoo.model_gb[base[0]]
        elif kind == "full-ft":  # embeddings and some frozen layers only
            assert 0 < shared.sum() < zoo.blocks[base[0]].sum()
    unshared = zoo.unshared()
    assert np.allclose(unshared.model_gb, zoo.model_gb)
    assert (unshared.blocks.sum(axis=0) == 1).all()


def test_candidates_meet_accuracy_deadline_and_beat_the_cloud():
    inst = synthetic(10, 10, 80, 1, tasks=4)
    c = inst.cand
    assert c.size > 0
    assert (c.acc >= inst.users.acc_req[c.user]).all()
    assert (c.delay_s <= inst.users.deadline_s[c.user]).all()
    assert (c.gain > 0).all()
    assert all(n in inst.near[inst.home[u]] for u, n in zip(c.user, c.node, strict=True))


def test_model_larger_than_every_cloudlet_is_rejected():
    inst = synthetic(3, 10, 10, 0)
    c = inst.cloudlets
    small = Cloudlets(c.xy, np.full(c.n, 1.0), c.compute_tflops, c.gpu_tflops,
                      c.storage_cost, c.compute_cost)
    with pytest.raises(BadInputError, match="never be cached") as info:
        Instance(inst.zoo, small, inst.users, inst.economy)
    assert info.value.field == "storage_gb"


@pytest.mark.parametrize("field", ["storage_gb", "compute_tflops", "storage_cost"])
def test_negative_capacity_or_cost_is_rejected(field):
    inst = synthetic(3, 10, 10, 0)
    values = {k: getattr(inst.cloudlets, k).copy() for k in
              ("xy", "storage_gb", "compute_tflops", "gpu_tflops", "storage_cost", "compute_cost")}
    values[field][1] = -1.0
    with pytest.raises(BadInputError) as info:
        Instance(inst.zoo, Cloudlets(**values), inst.users, inst.economy)
    assert info.value.field == field


def test_negative_economy_parameter_is_rejected():
    with pytest.raises(BadInputError) as info:
        Economy(coord_cost=-1)
    assert info.value.field == "coord_cost"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


SITES = "SITE_ID,LATITUDE,LONGITUDE\n1,-37.81,144.96\n2,-37.82,144.97\n3,-37.815,144.95\n"


def test_reads_sites_and_users_with_optional_columns(tmp_path):
    sites = _write(tmp_path, "s.csv", "LATITUDE,LONGITUDE,storage_gb\n-37.81,144.96,40\n"
                   "-37.82,144.97,30\n")
    users = _write(tmp_path, "u.csv", "Latitude,Longitude,task,rate\n-37.811,144.961,1,0.5\n"
                   "-37.819,144.969,0,2\n")
    inst = from_files(sites, users, models=10, seed=0, tasks=3)
    assert inst.cloudlets.storage_gb.tolist() == [40.0, 30.0]
    assert inst.users.task.tolist() == [1, 0] and inst.users.rate.tolist() == [0.5, 2.0]
    assert inst.home.tolist() == [0, 1]
    assert 1.0 < inst.dist_km[0, 1] < 1.6  # ~1.4 km apart in Melbourne


@pytest.mark.parametrize("text,line,field", [
    ("LATITUDE,LONGITUDE\n-37.81,144.96\n-37.82,abc\n", 3, "LONGITUDE"),
    ("LATITUDE,LONGITUDE\n-37.81,144.96\n,144.97\n", 3, "LATITUDE"),
    ("LATITUDE,LONGITUDE\n-97.81,144.96\n", 2, "LATITUDE"),
    ("LATITUDE,LONGITUDE,storage_gb\n-37.81,144.96,-4\n", 2, "storage_gb"),
    ("NAME\nfoo\n", None, "latitude"),
])
def test_malformed_sites_name_file_line_and_field(tmp_path, text, line, field):
    path = _write(tmp_path, "sites.csv", text)
    with pytest.raises(BadInputError) as info:
        from_files(path, None, models=5, seed=0)
    assert info.value.path == path and info.value.field == field and info.value.line == line


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(BadInputError, match="no such file"):
        from_files(tmp_path / "nope.csv", None, 5, 0)
    with pytest.raises(BadInputError):
        from_files(_write(tmp_path, "e.csv", ""), None, 5, 0)
    with pytest.raises(BadInputError, match="no rows"):
        from_files(_write(tmp_path, "h.csv", "LATITUDE,LONGITUDE\n"), None, 5, 0)
    users = _write(tmp_path, "u.csv", "Latitude,Longitude,task\n-37.81,144.96,7\n")
    with pytest.raises(BadInputError) as info:
        from_files(_write(tmp_path, "s.csv", SITES), users, 5, 0, tasks=3)
    assert info.value.field == "task"


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.text(alphabet=st.sampled_from(list("0123456789,.-\n abcE\"")), max_size=120))
def test_fuzzed_site_files_raise_bad_input_or_parse(tmp_path, body):
    path = tmp_path / "fuzz.csv"
    path.write_text("LATITUDE,LONGITUDE\n" + body)
    try:
        inst = from_files(path, None, models=5, seed=0, max_users=5)
    except BadInputError as exc:
        assert exc.path == path
    else:
        assert inst.cloudlets.n >= 1


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=80))
def test_fuzzed_binary_user_files_never_escape_as_raw_errors(tmp_path, data):
    users = tmp_path / "users.csv"
    users.write_bytes(b"Latitude,Longitude\n" + data)
    sites = tmp_path / "sites.csv"
    sites.write_text(SITES)
    try:
        from_files(sites, users, models=5, seed=0)
    except BadInputError as exc:
        assert exc.path == users


def test_real_eua_topology(shared_data):
    eua = shared_data / "eua"
    inst = from_files(eua / "edge_servers_melbcbd.csv", eua / "users_melbcbd.csv", models=20,
                      seed=0, max_users=200)
    assert inst.cloudlets.n == 125 and inst.users.n == 200
    assert inst.dist_km.max() < 10  # the Melbourne CBD is a few km across
    assert inst.cand.size > 0
