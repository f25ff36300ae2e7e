"""Every scheduler through the same invariants, plus the engine's refusal of bad decisions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from schedlab.core.errors import ConfigError, UnknownNameError
from schedlab.couchsurfer import (
    SCHEDULERS,
    Decision,
    FusionParams,
    Job,
    Placement,
    PlacementError,
    Simulator,
    WorkloadSpec,
    generate,
    make_scheduler,
    simulate,
)

GUARD = 0.05


@pytest.fixture(scope="module")
def workload() -> list[Job]:
    return generate(WorkloadSpec(jobs=300, gpus=32, load=1.1), seed=3)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_every_scheduler_keeps_the_invariants(name: str, workload: list[Job]) -> None:
    policy = make_scheduler(name)
    jobs = [Job(j.jid, j.kind, j.arrival, j.n_gpus, j.work, j.estimate, j.util, j.mem)
            for j in workload]
    sim = Simulator(jobs, policy, nodes=4, fusion=FusionParams(guard=GUARD)).run()
    assert not sim.unfinished(), "every job must finish"
    assert not sim.running and not sim.waiting
    c = sim.cluster
    assert (c.primary == -1).all() and (c.secondary == -1).all()
    assert (c.free_per_node == c.node_gpus_count).all()
    for j in jobs:
        assert j.start >= j.arrival - 1e-9
        assert j.finish >= j.start
        # nobody runs faster than alone; waiting + running = JCT
        assert j.run_time >= j.work * (1 - 1e-9)
        assert j.finish - j.arrival >= j.run_time - 1e-6
    for j in jobs:
        assert j.hosted_time <= j.run_time + 1e-6 and j.hosted_work <= j.hosted_time + 1e-6


def test_couchsurfer_beats_fifo_on_exploratory_latency(workload: list[Job]) -> None:
    cs = simulate(workload, "couchsurfer", nodes=4).summary
    fifo = simulate(workload, "fifo", nodes=4).summary
    assert cs["exp_queue_s_mean"] < fifo["exp_queue_s_mean"]


def test_simulate_does_not_mutate_the_callers_jobs(workload: list[Job]) -> None:
    before = [(j.remaining, j.start) for j in workload]
    simulate(workload, "fifo", nodes=4)
    assert [(j.remaining, j.start) for j in workload] == before


def test_unknown_scheduler_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError, match="couchsurfer"):
        make_scheduler("slurm")
    with pytest.raises(UnknownNameError):
        make_scheduler("couchsurfer", det_scheduler="nope")


class _Bad:
    """A scheduler that returns whatever decision it was built with, once."""

    name = "bad"

    def __init__(self, decision: Decision) -> None:
        self.decision, self.used = decision, False

    def schedule(self, now: float, sim: Simulator) -> Decision:
        if self.used:
            return Decision()
        self.used = True
        return self.decision


def _two_jobs() -> list[Job]:
    return [Job(0, "det", 0.0, 2, 10.0, 10.0, 0.5, 30.0), Job(1, "exp", 0.0, 1, 5.0, 5.0, 0.5, 8.0)]


@pytest.mark.parametrize("decision", [
    Decision(place=[Placement(0, (0,))]),                       # too few GPUs
    Decision(place=[Placement(0, (0, 0))]),                     # duplicate GPU
    Decision(place=[Placement(0, (0, 99))]),                    # no such GPU
    Decision(place=[Placement(7, (0,))]),                       # not waiting
    Decision(place=[Placement(0, (0, 1)), Placement(1, (0,), "secondary", "jfm")]),  # memory
    Decision(place=[Placement(1, (0,), "surfer")]),             # bad role
    Decision(place=[Placement(1, (0,), "secondary", "fast")]),  # bad mode
    Decision(preempt=[0]),                                      # not running
])
def test_engine_refuses_decisions_that_break_invariants(decision: Decision) -> None:
    sim = Simulator(_two_jobs(), _Bad(decision), nodes=1, gpus_per_node=2)
    with pytest.raises(PlacementError):
        sim.run()


def test_host_evicts_a_surfer_that_does_not_fit() -> None:
    jobs = [Job(0, "exp", 0.0, 1, 100.0, 100.0, 0.5, 8.0), Job(1, "det", 1.0, 1, 10.0, 10.0,
                                                                 0.5, 30.0)]
    Simulator(jobs, make_scheduler("couchsurfer", surf_only=True), nodes=1,
              gpus_per_node=1).run()
    assert jobs[0].preemptions >= 1
    assert not math.isnan(jobs[0].finish)


class _Truth:
    """Measured plain co-location speeds of every pair: the host at 0.5, the surfer at 0.8."""

    def speeds(self, *args: object) -> tuple[float, float]:
        return 0.5, 0.8


def test_rates_follow_the_fusion_model_and_the_controller_corrects_them() -> None:
    from schedlab.couchsurfer.fusion import pair_rates

    host = Job(0, "det", 0.0, 1, 1e4, 1e4, 0.3, 10.0)
    surfer = Job(1, "exp", 0.0, 1, 1e4, 1e4, 0.3, 4.0)
    decision = Decision(place=[Placement(0, (0,)), Placement(1, (0,), "secondary", "jfm")])
    params = FusionParams(guard=0.03, controller="once")  # the earlier one-correction controller
    sim = Simulator([host, surfer], _Bad(decision), nodes=1, gpus_per_node=1, fusion=params,
                    truth=_Truth())
    sim.run(until=0.0)
    expected = pair_rates(0.3, 0.3, "jfm", params, (0.5, 0.8))
    assert (host.rate, surfer.rate) == pytest.approx(expected)
    # the prediction (two light jobs) is far milder than the truth: the guard is broken...
    assert 1 / host.rate - 1 > params.guard
    # ... until JFM's controller observes the host and rescales the duty cycle
    sim.run(until=params.control_period_s + 1)
    target = params.guard * (1 - params.guard_margin)
    assert 1 / host.rate - 1 == pytest.approx(target, rel=5 * params.measure_noise)
    sim.run()
    assert host.hosted_time / host.hosted_work - 1 > target  # the early excess is accounted


def test_simulator_rejects_jobs_that_cannot_fit() -> None:
    with pytest.raises(ConfigError, match="n_gpus"):
        Simulator([Job(0, "det", 0, 16, 1.0, 1.0, 0.5, 1.0)], make_scheduler("fifo"), nodes=2)
    with pytest.raises(ConfigError, match="mem"):
        Simulator([Job(0, "det", 0, 1, 1.0, 1.0, 0.5, 64.0)], make_scheduler("fifo"), nodes=2)
    with pytest.raises(ConfigError):
        Job(0, "det", 0, 1, -1.0, 1.0, 0.5, 1.0)


def test_tiresias_preempts_long_running_jobs() -> None:
    rng = np.random.default_rng(0)
    jobs = [Job(0, "det", 0.0, 8, 50_000.0, 50_000.0, 0.5, 8.0)]
    jobs += [Job(i, "exp", 5_000.0 + float(rng.uniform(0, 10)), 1, 100.0, 100.0, 0.5, 4.0)
             for i in range(1, 5)]
    report = simulate(jobs, "tiresias", nodes=1)
    assert report.summary["preemptions"] >= 1
    assert report.summary["exp_queue_s_mean"] < 1_000


def _roles(jobs: list[Job], policy, gpus: int = 2, until: float = 0.0,
           **sim_options) -> Simulator:
    sim = Simulator(jobs, policy, nodes=1, gpus_per_node=gpus, **sim_options)
    sim.run(until=until)
    return sim


def test_exploratory_jobs_take_free_gpus_first_and_surf_only_when_they_would_queue() -> None:
    jobs = [Job(0, "det", 0.0, 1, 1e4, 1e4, 0.5, 8.0), Job(1, "exp", 1.0, 1, 100.0, 100.0, 0.4,
                                                            4.0),
            Job(2, "exp", 2.0, 1, 100.0, 100.0, 0.4, 4.0)]
    _roles(jobs, make_scheduler("couchsurfer"), until=2.0)
    assert jobs[1].role == "primary"                          # a free GPU: exclusive
    assert (jobs[2].role, jobs[2].mode) == ("secondary", "jfm")  # none left: it surfs
    assert not math.isnan(jobs[2].start) and jobs[2].start == 2.0


def test_a_surfer_moves_to_a_gpu_that_falls_idle() -> None:
    # hosts at 0.5 utilisation: the predicted surfer rate clears the 0.2 threshold at beta 1
    jobs = [Job(0, "det", 0.0, 1, 1e4, 1e4, 0.5, 8.0), Job(1, "det", 0.0, 1, 50.0, 50.0, 0.5,
                                                            8.0),
            Job(2, "exp", 1.0, 1, 1e3, 1e3, 0.6, 4.0)]
    sim = _roles(jobs, make_scheduler("couchsurfer"), until=1.0)
    assert jobs[2].role == "secondary" and jobs[2].rate < 1
    sim.run(until=60.0)  # job 1 ended at 50 s: its GPU is idle, the surfer takes it
    assert jobs[2].rate == 1.0 and jobs[2].gpus != jobs[0].gpus


def test_gandiva_time_slices_when_packing_would_overload_and_migrates_back() -> None:
    jobs = [Job(0, "det", 0.0, 1, 100.0, 100.0, 0.9, 20.0), Job(1, "det", 1.0, 1, 500.0, 500.0,
                                                                 0.8, 20.0)]
    sim = _roles(jobs, make_scheduler("gandiva"), gpus=1, until=1.0)
    assert (jobs[1].role, jobs[1].mode) == ("secondary", "timeslice")
    assert jobs[0].rate == pytest.approx(jobs[1].rate)
    assert jobs[1].rate < 0.5
    sim.run(until=400.0)
    assert jobs[1].role == "primary"  # migrated to the GPU job 0 left
    sim.run()
    assert jobs[1].preemptions == 1 and not math.isnan(jobs[1].finish)


def test_antman_surfs_at_once_without_a_guard() -> None:
    jobs = [Job(0, "det", 0.0, 1, 1e4, 1e4, 0.9, 8.0),
            Job(1, "exp", 1.0, 1, 100.0, 100.0, 0.9, 4.0)]
    _roles(jobs, make_scheduler("antman"), gpus=1, until=1.0, truth=_Truth())
    assert (jobs[1].role, jobs[1].mode) == ("secondary", "priority")
    assert 1 / jobs[0].rate - 1 > GUARD  # nothing bounds the host


def test_lucid_packs_only_pairs_predicted_to_interfere_little() -> None:
    light = [Job(0, "det", 0.0, 1, 1e4, 1e4, 0.1, 8.0), Job(1, "det", 1.0, 1, 50.0, 50.0, 0.1,
                                                             4.0)]
    _roles(light, make_scheduler("lucid"), gpus=1, until=1.0)
    assert (light[1].role, light[1].mode) == ("secondary", "equal")
    heavy = [Job(0, "det", 0.0, 1, 1e4, 1e4, 0.95, 8.0),
             Job(1, "det", 1.0, 1, 50.0, 50.0, 0.95, 4.0)]
    _roles(heavy, make_scheduler("lucid"), gpus=1, until=1.0)
    assert heavy[1].role == "" and heavy[1].jid in (1,)


def test_placements_on_gpus_a_narrow_node_lacks_are_refused() -> None:
    jobs = [Job(0, "det", 0.0, 1, 10.0, 10.0, 0.5, 4.0)]
    sim = Simulator(jobs, _Bad(Decision(place=[Placement(0, (3,))])), nodes=1, gpus_per_node=4,
                    node_gpus=[2])
    with pytest.raises(PlacementError, match="does not exist"):
        sim.run()
