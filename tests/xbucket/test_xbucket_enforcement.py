"""Memory enforcement as real monitors do it: resident memory (cgroup v2 or an RSS watchdog),
never address space; the path that ran is reported on every execution record."""

import sys

from schedlab.xbucket import Defaults, LocalExecutor, Resources, TaskSpec, make_allocator
from schedlab.xbucket.executor import _cgroup_parent

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import xbucket_tasks as tasks  # noqa: E402  (stdlib-only helpers the child imports)


def _executor(first_mb, **kwargs):
    defaults = Defaults(first=Resources(1, first_mb, 1000))
    return LocalExecutor(make_allocator("de-bucket", defaults=defaults), **kwargs)


def test_a_4_gib_reservation_using_8_mb_succeeds_first_time():
    executor = _executor(1000)
    assert not executor.rlimit  # RLIMIT_AS is off by default
    [record] = executor.run([TaskSpec("jvm-like", "mmap", function=tasks.reserve_address_space,
                                      args=(4, 8))])
    assert record.succeeded, record.stderr
    assert record.value == 8 and len(record.attempts) == 1
    assert record.attempts[0].usage.memory < 200  # resident, not the 4 GiB reserved
    assert "RLIMIT_AS" not in record.enforcement
    assert ("memory.max" in record.enforcement) == (executor._cgroups is not None)


def test_the_old_rlimit_backstop_still_exists_and_breaks_large_reservations():
    [record] = _executor(1000, rlimit=True).run(
        [TaskSpec("jvm-like", "mmap", function=tasks.reserve_address_space, args=(4, 8))])
    assert "RLIMIT_AS" in record.enforcement
    assert not record.succeeded  # why it is off by default: an ordinary error, no retry
    assert len(record.attempts) == 1


def test_a_700_mb_task_under_250_mb_is_killed_and_retried_upward_until_it_succeeds():
    [record] = _executor(250, semantics="allocation").run(
        [TaskSpec("big", "rss", function=tasks.hold_memory, args=(700, 0.2))])
    assert record.succeeded and record.value == 700
    allocations = [a.allocation.memory for a in record.attempts]
    assert allocations[0] == 250 and len(allocations) >= 2
    assert all(a.exceeded == ("memory",) for a in record.attempts[:-1])
    assert allocations == sorted(allocations) and allocations[-1] >= 700
    assert record.attempts[-1].usage.memory >= 700
    assert "psutil RSS watchdog" in record.enforcement


def test_cgroup_detection_names_why_it_cannot_run(tmp_path):
    path, why = _cgroup_parent(tmp_path)  # an empty folder is no cgroup v2 mount
    assert path is None and "cgroup2" in why
    executor = _executor(1000)
    assert "psutil RSS watchdog" in executor.memory_enforcement
    if executor._cgroups is None:
        assert "cgroup v2 unavailable" in executor.memory_enforcement
