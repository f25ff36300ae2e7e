"""The Blox-style API: one policy object drives the simulator and a real local Ray cluster
(each job a real Ray worker process given its GPUs)."""

from __future__ import annotations

import os

import pytest

from schedlab.couchsurfer import ClusterSpec, Job, make_scheduler, simulate


def _jobs() -> list[Job]:
    return [Job(0, "det", 0.0, 2, 2.0, 2.0, 0.8, 8.0), Job(1, "det", 0.1, 2, 2.0, 2.0, 0.7, 8.0),
            Job(2, "exp", 0.2, 1, 0.6, 1.0, 0.3, 2.0), Job(3, "exp", 0.3, 1, 0.6, 1.0, 0.4, 2.0),
            Job(4, "det", 0.4, 1, 0.5, 0.5, 0.5, 8.0, share=0.5)]


def test_the_same_policy_drives_a_real_ray_cluster() -> None:
    pytest.importorskip("ray")
    from schedlab.couchsurfer.blox import LiveDriver, RayManager

    cluster = ClusterSpec((4,), (32.0,))
    policy = make_scheduler("couchsurfer")
    simulated = simulate(_jobs(), policy, cluster=cluster).summary
    manager = RayManager(num_cpus=2)
    try:
        live = LiveDriver(make_scheduler("couchsurfer"), manager, cluster).run(_jobs(), 120)
    finally:
        manager.close()
    assert live.summary["finished"] == simulated["finished"] == 5
    # every job ran as its own process, never this one, on the GPUs it was placed on
    pids = {r["pid"] for r in manager.records}
    assert os.getpid() not in pids
    assert {r["jid"] for r in manager.records} == {0, 1, 2, 3, 4}
    for r in manager.records:
        gpus = r["visible"].split(",")
        assert len(gpus) == _jobs()[r["jid"]].n_gpus and all(0 <= int(g) < 4 for g in gpus)
        assert r["seconds"] >= 0.0
    frame = live.jobs
    assert (frame["jct"] >= frame["work"] * 0.9).all()
