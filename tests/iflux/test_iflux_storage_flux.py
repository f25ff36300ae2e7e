"""Mount-table resolution, tier classification, the fio throttle, and the Flux frobnicator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedlab.core.errors import BadInputError
from schedlab.iflux.flux import IFluxFrobnicator
from schedlab.iflux.rules import Tier
from schedlab.iflux.storage import Classifier, Site, StorageModel, location

MOUNTS = [
    ("0:20", "/", "/"),
    ("0:30", "/", "/dev/shm"),
    # IFlux's bind mount: a RAM-disk directory shown at a PFS path
    ("0:30", "/iflux/ramdisk/job1/0-out", "/pfs/job1/out"),
]


def test_location_follows_bind_mounts() -> None:
    assert location("/pfs/job1/out/x.dat", MOUNTS) == ("0:30", "/iflux/ramdisk/job1/0-out/x.dat")
    assert location("/pfs/job1/other", MOUNTS) == ("0:20", "/pfs/job1/other")
    assert location("/dev/shm/iflux/ramdisk", MOUNTS) == ("0:30", "/iflux/ramdisk")
    assert location("/pfs/job1/outer", MOUNTS)[0] == "0:20"  # a prefix string, not a child


@given(st.lists(st.sampled_from(["a", "b", "..", "."]), max_size=6))
def test_location_is_total(parts: list[str]) -> None:
    dev, inner = location("/" + "/".join(parts), MOUNTS)
    assert dev in ("0:20", "0:30") and inner.startswith("/")


def test_classifier_on_real_directories(tmp_path: Path) -> None:
    site = Site.under(tmp_path / "s", ram_base=tmp_path / "ram")
    classifier = Classifier(site)
    assert classifier.tier(Path(site.roots["pfs"]) / "x" / "f") == "pfs"
    assert classifier.tier(Path(site.roots["nvme"]) / "job") == "nvme"
    assert classifier.tier(tmp_path / "elsewhere") == "local"
    roundtrip = Site.from_json(site.to_json())
    assert roundtrip.roots == site.roots and roundtrip.models == site.models


def test_fio_throttle_is_the_tighter_of_bandwidth_and_iops() -> None:
    model = StorageModel(bandwidth=100 << 20, iops=1000)
    assert model.fio_options(1, 4096) == ["--rate_iops=1000"]
    assert model.fio_options(2, 1 << 20) == ["--rate_iops=50"]
    assert StorageModel().fio_options() == []


JOBSPEC = {"version": 1, "tasks": [{"command": ["a.out"]}],
           "attributes": {"system": {"intents": [
               {"path": "/pfs/in", "usage": "input", "mode": "read-only",
                "pattern": "small-random", "size": "3GiB"}]}}}


def test_frobnicator_annotates_a_copy() -> None:
    plugin = IFluxFrobnicator()
    out = plugin.frob(JOBSPEC, userid=1000, info={})
    assert "iflux" not in JOBSPEC["attributes"]["system"]  # input untouched
    placement = out["attributes"]["system"]["iflux"]["placements"][0]
    assert placement["tier"] == "ramdisk" and "stage-in" in placement["software"]
    assert out["attributes"]["system"]["shell"]["options"]["iflux"]["enable"] is True
    assert plugin.frob({"version": 1}) == {"version": 1}
    json.dumps(out)  # stays a plain JSON document


def test_frobnicator_rejects_bad_intents_and_tracks_capacity() -> None:
    plugin = IFluxFrobnicator(capacity={Tier.RAMDISK: 4 << 30, Tier.NVME: 4 << 30,
                                        Tier.SHARED_BB: 0, Tier.PFS: 1 << 62})
    bad = json.loads(json.dumps(JOBSPEC))
    bad["attributes"]["system"]["intents"][0]["mode"] = "write-only"
    with pytest.raises(BadInputError, match="contradicting"):
        plugin.validate(bad)
    first = plugin.reserve(JOBSPEC)
    assert first == {Tier.RAMDISK: 3 << 30}
    assert plugin.reserve(JOBSPEC) == {Tier.NVME: 3 << 30}  # RAM disk is full now
    with pytest.raises(BadInputError, match="capacity"):
        plugin.reserve(JOBSPEC)
    plugin.release(first)  # the first job ended: its RAM disk space comes back
    assert plugin.capacity[Tier.RAMDISK] == 4 << 30
    assert plugin.reserve(JOBSPEC) == {Tier.RAMDISK: 3 << 30}
    with pytest.raises(BadInputError, match="negative"):
        plugin.release({Tier.NVME: -1})
    plugin.release(first)
    with pytest.raises(BadInputError, match="released twice"):
        plugin.release(first)  # no capacity the node does not have
    assert plugin.capacity[Tier.RAMDISK] == 4 << 30
