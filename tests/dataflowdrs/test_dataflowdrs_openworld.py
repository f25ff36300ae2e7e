"""Open-world workloads: real tools run, traced, diagnosed and scored against their labels."""

from __future__ import annotations

import shutil

import pytest

from schedlab.dataflowdrs.openworld import WORKLOADS, available, correct, evaluate
from schedlab.dataflowdrs.policies import Bottleneck

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")


def test_every_workload_has_a_label_and_its_reason():
    for w in WORKLOADS.values():
        assert w.label in {"metadata", "small-io", "none", "shared-file", "misaligned-io",
                           "read-after-write", "slow-tier", "serial-task"}
        assert len(w.why) > 40


def test_none_label_scoring():
    small = [Bottleneck("small-io", "x", 0.01, "")]
    assert correct(small, "none", makespan=1.0, drishti=False)
    assert not correct(small, "none", makespan=1.0, drishti=True)  # Drishti fired a HIGH rule
    assert correct([], "none", makespan=1.0, drishti=True)
    assert not correct(small, "metadata", makespan=1.0, drishti=False)


def test_real_tools_are_traced_diagnosed_and_timed():
    names = [n for n in ("dd-512", "metadata-storm") if available(WORKLOADS[n])]
    diag, timing = evaluate(names, scale=0.25, reps=1)
    assert {r["workload"] for r in diag} == set(names)
    assert {r["diagnoser"] for r in diag} == {"dataflowdrs", "drishti"}
    assert all(r["io_events"] > 100 for r in diag)  # relative paths, real calls seen
    ours = {r["workload"]: r for r in diag if r["diagnoser"] == "dataflowdrs"}
    assert ours["metadata-storm"]["top_kind"] == "metadata"
    assert ours["dd-512"]["top_kind"] == "small-io"
    tracers = {(r["workload"], r["tracer"]) for r in timing if r["variant"] == "original"}
    assert {t for _, t in tracers} == {"untraced", "strace", "dftracer-stdio"}
    assert all(r["cpu"] > 0 and r["wall"] > 0 for r in timing)
    # the top recommendation's remedy variant was run where one exists
    assert any(r["variant"].startswith("remedy:") for r in timing)


def test_bad_arguments_are_one_line_naming_the_field():
    from schedlab.core.errors import BadInputError

    with pytest.raises(BadInputError, match="unknown open-world workload 'nope'"):
        evaluate(["nope"])
    with pytest.raises(BadInputError, match="field 'scale'"):
        evaluate(["dd-512"], scale=0)
