"""The cluster simulator's invariants (CARSS paper 07's ground truth and co-simulator engine)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from schedlab.carss.cosim import CoSimulator, TaskPool
from schedlab.carss.forecast import StaticReplay
from schedlab.carss.hosts import make_hosts
from schedlab.carss.placement import greedy, least_loaded
from schedlab.carss.simulator import Cluster
from schedlab.carss.workloads import make_tasks
from schedlab.core.errors import BadInputError


def _cluster(n_hosts: int = 4, tasks: int = 12, seed: int = 0) -> Cluster:
    cluster = Cluster(make_hosts(n_hosts), 300.0)
    cluster.admit(make_tasks(tasks, 0.0, 0, np.random.default_rng(seed)))
    return cluster


def test_power_curve_interpolates_specpower_table() -> None:
    hosts = make_hosts(4)
    assert np.allclose(hosts.power(np.zeros(4)), hosts.power_table[:, 0])
    assert np.allclose(hosts.power(np.ones(4)), hosts.power_table[:, -1])
    mid = hosts.power(np.full(4, 0.05))
    assert np.allclose(mid, (hosts.power_table[:, 0] + hosts.power_table[:, 1]) / 2)


def test_idle_cluster_draws_idle_power_for_the_whole_interval() -> None:
    cluster = Cluster(make_hosts(3), 300.0)
    stats = cluster.step()
    assert stats.energy_j == pytest.approx(cluster.hosts.idle_power().sum() * 300.0)
    assert stats.completed == 0 and stats.tis_s == 0


@example(seed=3428, tasks=18, hosts=1)  # an empty host once admitted 3.7 MB too much
@given(st.integers(0, 10_000), st.integers(1, 30), st.integers(1, 6))
def test_random_placements_keep_ram_and_conserve_tasks(seed: int, tasks: int, hosts: int) -> None:
    cluster = _cluster(hosts, tasks, seed)
    rng = np.random.default_rng(seed)
    finished = 0
    for _ in range(6):
        placement = rng.integers(-1, hosts, len(cluster.tasks))
        moved, refused = cluster.apply(placement)
        assert np.all(cluster.ram_used() <= cluster.hosts.ram + 1e-6)
        stats = cluster.step(moved, refused)
        finished += stats.completed
        peak = cluster.hosts.power_table[:, -1].sum() * 300.0
        assert cluster.hosts.idle_power().sum() * 300.0 - 1e-6 <= stats.energy_j <= peak + 1e-6
        assert 0.0 <= stats.util_max <= 1.0 + 1e-9
    assert finished + len(cluster.tasks) == tasks
    table = cluster.completed_table()
    assert np.all(table[:, 2] > 0)  # response times are positive


def test_task_alone_finishes_at_work_over_rate() -> None:
    cluster = _cluster(1, 1)
    tk = cluster.tasks
    tk.amp[:] = 0.0  # constant demand: completion time is exact
    tk.work[:] = tk.cpu * 100.0
    cluster.apply(np.array([0]))
    stats = cluster.step()
    assert stats.completed == 1
    assert stats.response_sum_s == pytest.approx(100.0)


def test_migration_costs_downtime_and_is_counted() -> None:
    cluster = _cluster(2, 1)
    cluster.tasks.work[:] = 1e12  # never finishes
    cluster.tasks.amp[:] = 0.0  # constant demand
    cluster.apply(np.array([0]))
    cluster.step()
    done_before = float(cluster.tasks.done[0])
    moved, _ = cluster.apply(np.array([1]))
    downtime = float(
        (cluster.tasks.ram[0] + cluster.tasks.disk[0]) * 8 / cluster.hosts.net[:2].min()
    )
    assert moved == 1 and cluster.tasks.mig_s[0] == pytest.approx(downtime)
    stats = cluster.step(moved)
    assert stats.migrations == 1
    progress = cluster.tasks.done[0] - done_before
    assert progress == pytest.approx(cluster.tasks.cpu[0] * (300.0 - downtime))


def test_bad_placement_is_rejected_with_field() -> None:
    cluster = _cluster(2, 3)
    with pytest.raises(BadInputError, match="placement"):
        cluster.apply(np.array([0, 1]))
    with pytest.raises(BadInputError, match="host index"):
        cluster.apply(np.array([0, 5, 1]))


def test_cosimulator_with_the_true_future_reproduces_the_real_run() -> None:
    """With the real future batches instead of samples, the what-if run is the real run."""
    rng = np.random.default_rng(3)
    hosts = make_hosts(5)
    real = Cluster(hosts, 300.0)
    batches = [make_tasks(int(n), t * 300.0, 1000 * t, rng) for t, n in enumerate([9, 4, 12, 7])]
    real.admit(batches[0].copy())
    sim = CoSimulator(StaticReplay(), TaskPool(), horizon=4, samples=1)
    decision = greedy(real, least_loaded)
    predicted = sim.rollout(real, decision, [b.copy() for b in batches[1:]])
    actual = []
    moved, refused = real.apply(decision)
    actual.append(real.step(moved, refused))
    for batch in batches[1:]:
        real.admit(batch.copy())
        moved, refused = real.apply(greedy(real, least_loaded))
        actual.append(real.step(moved, refused))
    assert predicted == actual


@given(st.integers(0, 10_000), st.integers(1, 8), st.integers(0, 40))
def test_compiled_greedy_matches_numpy_reference(seed: int, hosts: int, tasks: int) -> None:
    """The Numba kernels place exactly as the plain NumPy scoring loop does."""
    from schedlab.carss import placement as P

    rng = np.random.default_rng(seed)
    cluster = _cluster(hosts, tasks, seed)
    cluster.apply(rng.integers(-1, hosts, len(cluster.tasks)))
    for score in (P.least_loaded, P.best_fit, P.make_consolidate(P.efficiency(cluster))):
        fast = P.greedy(cluster, score)
        reference = P.greedy(cluster, lambda load, ram, need, s=score: s(load, ram, need))
        assert np.array_equal(fast, reference)


def test_cosimulator_caps_absurd_sampled_bursts() -> None:
    """A forecaster gone wild must not make one decision simulate millions of tasks."""
    from schedlab.carss.forecast import Forecast

    class Wild:
        name = "wild"

        def predict(self, horizon: int) -> Forecast:
            return Forecast(np.full(horizon, 1e7), np.zeros(horizon))

    pool = TaskPool()
    pool.add(make_tasks(5, 0.0, 0, np.random.default_rng(0)))
    sim = CoSimulator(Wild(), pool, horizon=3, samples=2)  # type: ignore[arg-type]
    scenarios = sim.scenarios(Cluster(make_hosts(2), 300.0), np.random.default_rng(0))
    assert all(len(batch) == 20 for path in scenarios for batch in path)
