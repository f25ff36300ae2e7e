"""The replay engine: waste accounting by hand, failure semantics, pools and makespan."""

import pytest

from schedlab.core.errors import ConfigError, SchedlabError
from schedlab.xbucket import (
    Machine,
    ReplayConfig,
    ResourceReport,
    Resources,
    Task,
    replay,
    summarise,
)


class Scripted:
    """An allocator that returns a fixed list of allocations, in order (for hand-checked sums)."""

    name = "scripted"

    def __init__(self, allocations):
        self.allocations = list(allocations)
        self.seen = []

    def allocate(self, category, last_failed=None, declared=None):
        return self.allocations.pop(0)

    def observe(self, category, report: ResourceReport):
        self.seen.append(report)


def test_waste_and_efficiency_by_hand():
    task = Task("a", "c", Resources(2, 100, 10), 10.0)
    allocator = Scripted([Resources(2, 50, 10), Resources(4, 200, 10)])
    result = replay([task], allocator, ReplayConfig(kill_fraction=0.5,
                                                    machine=Machine(8, 1000, 100)))
    row = summarise(result)
    assert row["retries"] == 1
    # failed: 50 MB x 5 s; success: (200 - 100) x 10 s
    assert row["waste_memory"] == pytest.approx(50 * 5 + 100 * 10)
    assert row["efficiency_memory"] == pytest.approx(100 * 10 / (50 * 5 + 200 * 10))
    assert row["waste_cores"] == pytest.approx(2 * 5 + 2 * 10)
    assert result.makespan == pytest.approx(15.0)


@pytest.mark.parametrize("semantics,expected", [("peak", 100.0), ("allocation", 50.0)])
def test_failure_semantics_decide_what_the_monitor_reports(semantics, expected):
    task = Task("a", "c", Resources(1, 100, 10), 1.0)
    allocator = Scripted([Resources(1, 50, 10), Resources(1, 200, 10)])
    replay([task], allocator, ReplayConfig(semantics=semantics, machine=Machine()))
    failed = allocator.seen[0]
    assert failed.exceeded == ("memory",)
    assert failed.usage.memory == expected
    assert failed.usage.disk == 10  # the type that did not fail reports its peak


def test_pool_packs_tasks_by_allocation_and_shortens_makespan():
    tasks = [Task(str(i), "c", Resources(1, 100, 10), 10.0) for i in range(8)]
    machine = Machine(4, 1000, 1000)
    one = replay(tasks, Scripted([Resources(1, 100, 10)] * 64), ReplayConfig(machine=machine))
    packed = replay(tasks, Scripted([Resources(1, 100, 10)] * 64),
                    ReplayConfig(workers=2, slots=None, machine=machine))
    assert one.makespan == pytest.approx(80.0)
    assert packed.makespan == pytest.approx(10.0)  # 2 workers x 4 cores
    assert set(packed.attempts["worker"].to_list()) == {0, 1}


def test_allocations_are_capped_at_the_worker():
    task = Task("a", "c", Resources(1, 100, 10), 1.0)
    result = replay([task], Scripted([Resources(99, 1e9, 1e9)]),
                    ReplayConfig(machine=Machine(4, 1000, 1000)))
    assert result.attempts.row(0, named=True)["alloc_memory"] == 1000


def test_a_task_bigger_than_a_worker_and_bad_configs_are_reported():
    with pytest.raises(SchedlabError, match="more than one worker"):
        replay([Task("a", "c", Resources(1, 5000, 10), 1.0)], Scripted([]),
               ReplayConfig(machine=Machine(4, 1000, 1000)))
    with pytest.raises(ConfigError):
        ReplayConfig(workers=0)
    with pytest.raises(ConfigError):
        ReplayConfig(kill_fraction=2.0)


def test_an_allocator_that_never_grows_is_stopped_with_a_clear_error():
    task = Task("a", "c", Resources(1, 100, 10), 1.0)
    with pytest.raises(SchedlabError, match="still failing"):
        replay([task], Scripted([Resources(1, 50, 10)] * 100),
               ReplayConfig(machine=Machine(), max_attempts=5))
