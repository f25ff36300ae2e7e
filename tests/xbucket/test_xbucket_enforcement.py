"""Memory enforcement as real monitors do it: resident memory (a cgroup v2 or v1 memory limit, or
an RSS watchdog), never address space; the path that ran is reported on every execution
record."""

import sys
from pathlib import Path

import pytest

from schedlab.xbucket import Defaults, LocalExecutor, Resources, TaskSpec, make_allocator
from schedlab.xbucket.cgroups import _mounts, _own, _v1, _v2, detect

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
    assert ("cgroup v" in record.enforcement) == (executor._cgroups is not None)


def test_the_old_rlimit_backstop_still_exists_and_breaks_large_reservations():
    [record] = _executor(1000, rlimit=True).run(
        [TaskSpec("jvm-like", "mmap", function=tasks.reserve_address_space, args=(4, 8))])
    assert "RLIMIT_AS" in record.enforcement
    assert not record.succeeded  # why it is off by default: an ordinary error, no retry
    assert len(record.attempts) == 1


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup-if-any", "watchdog"])
def test_a_700_mb_task_under_250_mb_is_killed_and_retried_upward_until_it_succeeds(cgroups):
    executor = _executor(250, semantics="allocation", cgroups=cgroups)
    [record] = executor.run(
        [TaskSpec("big", "rss", function=tasks.hold_memory, args=(700, 0.2))])
    assert record.succeeded and record.value == 700
    allocations = [a.allocation.memory for a in record.attempts]
    assert allocations[0] == 250 and len(allocations) >= 2
    assert all(a.exceeded == ("memory",) for a in record.attempts[:-1])
    assert allocations == sorted(allocations) and allocations[-1] >= 700
    assert record.attempts[-1].usage.memory >= 700
    if executor._cgroups is None:
        assert "psutil RSS watchdog" in record.enforcement
    else:
        assert f"cgroup v{executor._cgroups.version}" in record.enforcement


MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 /kube /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_cgroup_detection_finds_v1_where_v2_has_no_memory_controller(tmp_path):
    mounts = _mounts(MOUNTINFO)
    assert ("/", "/sys/fs/cgroup/memory", "cgroup", "rw,memory") in mounts
    groups = ["4:memory:/process_api/abc", "1:cpu,cpuacct:/kube/pod", "0::/"]
    assert _v1(mounts, groups) == (Path("/sys/fs/cgroup/memory/process_api/abc"), "")
    assert _own("/sys/fs/cgroup/cpu", "/kube", "/kube/pod") == Path("/sys/fs/cgroup/cpu/pod")
    unified = tmp_path / "unified"
    (unified / "job").mkdir(parents=True)
    fake = _mounts(f"41 31 0:38 / {unified} rw - cgroup2 cgroup2 rw\n")
    assert "cannot read" in _v2(fake, ["0::/elsewhere"])[1]
    (unified / "job" / "cgroup.controllers").write_text("cpu hugetlb\n")
    assert _v2(fake, ["0::/job"]) == (None, f"memory controller not delegated to {unified}/job")
    (unified / "job" / "cgroup.controllers").write_text("cpu memory\n")
    assert _v2(fake, ["0::/job"]) == (unified / "job", "")
    assert _v1(mounts, ["0::/"])[1] == "this process has no cgroup v1 memory entry"
    assert _v2(_mounts(""), groups) == (None, "no cgroup2 mount")
    info, procs = tmp_path / "mountinfo", tmp_path / "cgroup"
    info.write_text("")
    procs.write_text("0::/\n")
    found, why = detect(info, procs)
    assert found is None and why == "v2: no cgroup2 mount; v1: no cgroup v1 memory mount"
    executor = _executor(1000)
    assert "psutil RSS" in executor.memory_enforcement
    if executor._cgroups is None:
        assert "no memory cgroup" in executor.memory_enforcement


HOST, WHY_NOT = detect()


@pytest.mark.skipif(HOST is None, reason=f"no writable memory cgroup here ({WHY_NOT})")
def test_the_kernel_limit_catches_a_spike_in_a_grandchild_that_sampling_misses():
    # the sampler looks every 2 s; the grandchild holds 300 MB for 0.1 s and is gone
    executor = _executor(120, poll=2.0)
    assert f"cgroup v{HOST.version}" in executor.memory_enforcement
    [record] = executor.run([TaskSpec("spike", "spike", function=tasks.spike_in_child,
                                      args=(300, 0.1))])
    first = record.attempts[0]
    assert first.exceeded == ("memory",) and first.allocation.memory == 120
    assert record.succeeded and record.attempts[-1].allocation.memory >= 300
    assert f"cgroup v{HOST.version}" in record.enforcement
    print(f"\nenforcement: {record.enforcement}; attempts "
          f"{[a.allocation.memory for a in record.attempts]}")
