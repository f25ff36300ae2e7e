"""The deterministic mode explores McSplit's exact search tree (node counts of the reference).

Counts were produced by the reference C++ McSplit (james-cpp, ijcai2017 repository) on the
ARG pairs in ../shared/data/mcs; the s30 counts are also in that folder's README.
"""

from __future__ import annotations

import pytest

from schedlab.hydra_mcs import solve_files

REFERENCE = {  # (pair, flags) -> (size, nodes) from the reference binary
    ("s20.?00", ()): (12, 261018),
    ("s20.?01", ()): (12, 220036),
    ("s20.?02", ()): (12, 125670),
    ("s20.?00", (("labels", "all"),)): (7, 881),
    ("s20.?00", (("labels", "vertex"),)): (9, 1496),
    ("s20.?00", (("directed", True),)): (9, 81452),
    ("s20.?00", (("directed", True), ("labels", "all"))): (7, 649),
    ("s20.?00", (("connected", True),)): (12, 277263),
    ("s20.?00", (("big_first", True),)): (12, 427629),
    ("s20.?00", (("heuristic", "min_product"),)): (12, 268431),
}


@pytest.mark.parametrize("pair,flags", list(REFERENCE))
def test_node_count_equals_mcsplit(shared_data, pair, flags):
    folder = shared_data / "mcs"
    r = solve_files(folder / pair.replace("?", "A"), folder / pair.replace("?", "B"), **dict(flags))
    assert (r.size, r.nodes) == REFERENCE[(pair, flags)]


@pytest.mark.slow
def test_node_count_equals_mcsplit_s30(shared_data):
    folder = shared_data / "mcs"
    r = solve_files(folder / "s30.A02", folder / "s30.B02")
    assert (r.size, r.nodes) == (15, 40_793_297)
