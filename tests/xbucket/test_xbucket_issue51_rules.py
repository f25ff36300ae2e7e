"""Issue 51's allocation rules: retry at a measured need, the sampling floor, the reference
setting that turns them off (``Defaults.cctools()``)."""

import pytest

from schedlab.xbucket import Defaults, Machine, ResourceReport, Resources, make_allocator
from schedlab.xbucket.state import BucketingState, next_step

MACHINE = Machine(8, 65536, 65536)


def _ok(cores, memory=100.0, disk=100.0, time=10.0):
    usage = Resources(cores, memory, disk)
    return ResourceReport(usage, usage, time, ())


def _killed(given_cores, used_cores):
    """A cores failure as a replay reports it with peak semantics (the true need)."""
    return ResourceReport(Resources(given_cores, 100, 100), Resources(used_cores, 100, 100),
                          10.0, ("cores",))


def test_next_step_inclusive_may_equal_a_measured_need():
    assert next_step(1, 2, 2) == 4 and next_step(1, 2, 2, inclusive=True) == 2
    assert next_step(1000, 2, 1500, inclusive=True) == 2000
    assert next_step(1000, 2, 999, inclusive=True) == 1000


def test_bucket_retry_at_a_measured_need_takes_the_equal_bucket():
    state = BucketingState("dg", 1.0, sampling=3)
    for value in (1,) * 6 + (4,) * 6 + (16,) * 2:
        state.add(value)
    assert state.values == [1.0, 4.0, 16.0]
    assert state.predict(4.0, inclusive=True) == 4.0
    assert state.predict(4.0) > 4.0  # the reference's rule: strictly above


@pytest.mark.parametrize("name", ["dg-bucket", "de-bucket", "max-seen", "min-waste",
                                  "max-throughput"])
def test_a_failure_that_reports_its_peak_is_retried_at_that_peak_not_above(name):
    on = make_allocator(name, MACHINE, Defaults(sampling=3, pooled_fallback=False))
    off = make_allocator(name, MACHINE, Defaults.cctools())
    for allocator in (on, off):
        for cores in (4, 4, 4, 2, 4):
            allocator.observe("c", _ok(cores))
    assert on.allocate("c", _killed(2, 4)).cores == 4
    assert off.allocate("c", _killed(2, 4)).cores > 4
    # a monitor that saw only the limit (allocation semantics) still gets strictly more
    assert on.allocate("c", _killed(2, 2)).cores > 2


def test_sampling_floor_after_a_repeat_for_a_discrete_need():
    allocator = make_allocator("dg-bucket", MACHINE, Defaults(pooled_fallback=False))
    assert allocator.allocate("c").cores == 1  # nothing known: the sampling default
    allocator.observe("c", _ok(4))
    assert allocator.allocate("c").cores == 1  # one record is no evidence of a floor yet
    allocator.observe("c", _ok(4))
    assert allocator.allocate("c").cores == 4  # 4 seen twice: never start below it
    allocator.observe("c", _ok(6))
    assert allocator.allocate("c").cores == 4  # the smallest record, not the largest
    reference = make_allocator("dg-bucket", MACHINE, Defaults.cctools())
    for cores in (4, 4, 6):
        reference.observe("c", _ok(cores))
    assert reference.allocate("c").cores == 1


def test_no_floor_when_every_value_is_distinct():
    """Creeping disk (40416, 40417, 40418 MB): a floor at the smallest would be killed just
    under the need, the costliest kill there is; the sampling rule stays."""
    allocator = make_allocator("de-bucket", MACHINE, Defaults(pooled_fallback=False))
    for disk in (40416.0, 40417.0):
        allocator.observe("c", _ok(1, disk=disk))
    assert allocator.allocate("c").disk == 1000.0


def test_the_floor_never_lowers_a_cold_start():
    allocator = make_allocator("dg-bucket", MACHINE, Defaults(sampling=3))
    for cores in (2, 2, 2, 2):
        allocator.observe("old", _ok(cores))  # the pool is past sampling: its quantile is 2
    assert allocator.allocate("new").cores == 2
    for _ in range(2):
        allocator.observe("new", _ok(1))  # a floor of 1 (seen twice), below the pool's 2
    assert allocator.allocate("new").cores == 2


def test_time_weighted_records_carry_the_time_of_their_killed_attempts():
    """-tw: a task killed once and then successful held allocations for both attempts' time,
    so its record weighs that much (``Defaults.tw_kill_time``); off, only its final run."""
    weights = {}
    for flag in (True, False):
        allocator = make_allocator("dg-bucket-tw", MACHINE,
                                   Defaults(pooled_fallback=False, tw_kill_time=flag))
        allocator.observe("c", _ok(1, time=50.0))
        allocator.observe("c", ResourceReport(Resources(1, 100, 100), Resources(2, 100, 100),
                                              30.0, ("cores",)))
        allocator.observe("c", _ok(2, time=30.0))
        allocator.observe("c", _ok(1, time=50.0))  # no kill before it: its own time only
        values, sigs = allocator.states("c")[0].records()
        weights[flag] = dict(zip(sigs.tolist(), values.tolist(), strict=True))
    # significance = arrival rank x weight: the 2-core record is the 2nd (rank 2)
    assert sorted(weights[True]) == [50.0, 120.0, 150.0]
    assert sorted(weights[False]) == [50.0, 60.0, 150.0]
