"""The replay engine: hand-computed cases, invariants over every policy, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from schedlab.core.errors import BadInputError, SchedlabError
from schedlab.gpooling.devices import GIB, StaticBackend
from schedlab.gpooling.policies import POLICIES, BestFit, make_policy
from schedlab.gpooling.simulator import Job, simulate
from schedlab.gpooling.state import Grant, Request
from schedlab.gpooling.workloads import heterogeneous_cluster, synthetic_trace

ONE_T4 = StaticBackend("T4:1").discover()


def _two_halves() -> list[Job]:
    return [Job(0, 0.0, 10.0, Request(4 * GIB, 500)), Job(1, 0.0, 10.0, Request(4 * GIB, 500)),
            Job(2, 20.0, 1.0, Request(GIB, 100))]


def test_pooling_runs_two_halves_together() -> None:
    result = simulate(_two_halves(), ONE_T4, make_policy("best-fit"))
    assert result.waits.tolist() == [0.0, 0.0, 0.0]
    # over the 20 s arrival window: 1.0 of the device for 10 s, then idle
    assert result.metrics["utilisation"] == pytest.approx(0.5)
    assert result.metrics["completed"] == 2  # the third ends after the window


def test_device_level_serialises_them() -> None:
    result = simulate(_two_halves(), ONE_T4, make_policy("whole-device"))
    assert sorted(result.waits.tolist()) == [0.0, 0.0, 10.0]
    assert result.metrics["utilisation"] == pytest.approx(0.5)  # 0.5 used for 20 s
    assert result.metrics["allocated"] == pytest.approx(1.0)


def test_request_no_device_can_hold_is_rejected_not_queued() -> None:
    jobs = [Job(0, 0.0, 5.0, Request(40 * GIB, 100)), Job(1, 1.0, 5.0, Request(GIB, 100))]
    result = simulate(jobs, ONE_T4, make_policy("frag-aware"))
    assert result.metrics["rejected"] == 1
    assert np.isnan(result.waits[0]) and result.waits[1] == 0.0


def test_duplicate_job_ids_are_refused() -> None:
    jobs = [Job(0, 0.0, 1.0, Request(0, 100)), Job(0, 1.0, 1.0, Request(0, 100))]
    with pytest.raises(BadInputError, match="unique"):
        simulate(jobs, ONE_T4, make_policy("best-fit"))


class _Greedy(BestFit):
    """A broken policy that over-commits: the engine must catch it."""

    name = "broken"

    def place(self, request, state):
        return [Grant(0, request.memory, request.milli)]


def test_engine_refuses_an_overcommitting_policy() -> None:
    jobs = [Job(i, 0.0, 5.0, Request(GIB, 600)) for i in range(2)]
    with pytest.raises(SchedlabError, match="over-commits"):
        simulate(jobs, ONE_T4, _Greedy())


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_accounts_for_every_job(name: str) -> None:
    pool = heterogeneous_cluster(12)
    trace = synthetic_trace(300, pool, seed=3)
    result = simulate(trace, pool, make_policy(name))
    m = result.metrics
    started = int((~np.isnan(result.waits)).sum())
    assert started + m["rejected"] == len(trace)
    assert (result.waits[~np.isnan(result.waits)] >= 0).all()
    assert 0 <= m["utilisation"] <= m["allocated"] <= 1 + 1e-9
    assert 0 <= m["fragmentation"] <= 1
    assert m["completed"] <= started


def test_replay_is_deterministic_and_pooling_beats_device_level() -> None:
    pool = heterogeneous_cluster(16)
    trace = synthetic_trace(600, pool, seed=1, load=0.9)
    a = simulate(trace, pool, make_policy("frag-aware")).metrics
    b = simulate(trace, pool, make_policy("frag-aware")).metrics
    coarse = simulate(trace, pool, make_policy("whole-device")).metrics
    assert a == b
    assert a["utilisation"] > coarse["utilisation"]
    assert a["mean_wait"] < coarse["mean_wait"]
