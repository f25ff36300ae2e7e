"""Replay semantics users can compare with cctools' harness: per-resource, category-blind,
Whole Machine = the trace's max, Max Seen x2 retries, pooled fallback for small categories."""

import json

import pytest
from typer.testing import CliRunner

from schedlab.cli import _mount_system_apps_once, app
from schedlab.core.errors import BadInputError, ConfigError
from schedlab.xbucket import Defaults, Machine, ReplayConfig, Resources, compare, synthetic
from schedlab.xbucket.compare import category_blind, run_one
from schedlab.xbucket.metrics import summarise
from schedlab.xbucket.policies import MaxSeen, XBucket, make_allocator
from schedlab.xbucket.types import RESOURCES, ResourceReport, Task

_mount_system_apps_once()
runner = CliRunner()


def _task(i, cores, memory, disk, category="c", time=10.0):
    return Task(str(i), category, Resources(cores, memory, disk), time)


def test_per_resource_charges_a_failure_only_to_the_resource_that_caused_it():
    # memory grows past every sampling default; cores and disk always fit the first allocation
    tasks = [_task(i, 1, 3000 + 10 * i, 10) for i in range(30)]
    joint = compare(tasks, ["de-bucket"]).row(0, named=True)
    alone = compare(tasks, ["de-bucket"], per_resource=True).row(0, named=True)
    assert alone["mode"] == "per-resource" and joint["mode"] == "joint"
    assert joint["retries"] > 0 and alone["retries_memory"] == joint["retries"]
    assert alone["retries_cores"] == 0 and alone["retries_disk"] == 0
    # jointly a memory failure wastes the whole cores allocation too; alone it does not
    assert alone["efficiency_cores"] == pytest.approx(1.0)
    assert joint["efficiency_cores"] < 1.0
    assert alone["efficiency_memory"] == pytest.approx(joint["efficiency_memory"])


def test_replay_only_gives_the_other_types_their_peaks():
    tasks = [_task(i, 3, 500, 2500) for i in range(5)]
    attempts = run_one(tasks, "whole-machine", ReplayConfig(only="memory")).attempts
    assert (attempts["alloc_cores"] == 3).all() and (attempts["alloc_disk"] == 2500).all()
    with pytest.raises(ConfigError, match="only"):
        ReplayConfig(only="gpus")


def test_whole_machine_is_the_trace_max_by_default_and_other_workers_are_reachable():
    tasks = [_task(0, 2, 700, 30), _task(1, 5, 300, 90)]
    assert Machine.trace_max(tasks) == Machine(5, 700, 90)
    first = run_one(tasks, "whole-machine").attempts.row(0, named=True)
    assert (first["alloc_cores"], first["alloc_memory"], first["alloc_disk"]) == (5, 700, 90)
    assert Machine.parse("covering", tasks) == Machine()  # the former 16 / 64 GiB worker
    assert Machine.parse("8,4096,1e4", tasks) == Machine(8, 4096, 10000)
    with pytest.raises(BadInputError, match="whole_machine"):
        Machine.parse("8,4096", tasks)


def test_max_seen_retries_double_the_failed_allocation():
    machine = Machine(16, 65536, 65536)
    seen = MaxSeen(machine, Defaults(sampling=2))
    for memory in (100, 200):
        usage = Resources(1, memory, 10)
        seen.observe("c", ResourceReport(usage, usage, 1.0))
    first = seen.allocate("c")
    assert first.memory == 200
    failed = ResourceReport(first, Resources(1, 900, 10), 1.0, ("memory",))
    retry = seen.allocate("c", failed)
    assert retry.memory == 1600 and retry.cores == first.cores  # 200 x2 x2 x2 > 900
    old = MaxSeen(machine, Defaults(sampling=2), retry="max")
    for memory in (100, 200):
        usage = Resources(1, memory, 10)
        old.observe("c", ResourceReport(usage, usage, 1.0))
    assert old.allocate("c", failed).memory == 65536  # the former rule: whole worker
    huge = ResourceReport(first, Resources(1, 70000, 10), 1.0, ("memory",))
    assert seen.allocate("c", huge).memory == 65536  # capped at the worker


def test_a_category_in_sampling_falls_back_to_the_pooled_records():
    defaults = Defaults(sampling=5)
    pooled, alone = XBucket("de", defaults), XBucket("de", Defaults(sampling=5,
                                                                    pooled_fallback=False))
    for allocator in (pooled, alone):
        for i in range(20):  # a big category past sampling, all near 300 MB
            usage = Resources(1, 300 + i, 50)
            allocator.observe("big", ResourceReport(usage, usage, 1.0))
        usage = Resources(1, 250, 40)  # the small category has one record: still sampling
        allocator.observe("small", ResourceReport(usage, usage, 1.0))
    assert alone.allocate("small").memory == 1000  # the sampling default
    assert pooled.allocate("small").memory <= 319  # a bucket of the pooled records
    # a failure in the fallback is retried above the failed value, still from the pool first
    failed = ResourceReport(Resources(1, 319, 50), Resources(1, 500, 40), 1.0, ("memory",))
    assert pooled.allocate("small", failed).memory > 500
    for i in range(4):  # once the category has its own `sampling` records, only they count
        usage = Resources(1, 2000 + i, 40)
        pooled.observe("small", ResourceReport(usage, usage, 1.0))
    assert pooled.allocate("small").memory >= 250
    assert "small" in pooled._ready or pooled.effective_states("small") == pooled.states("small")


def test_one_category_gives_the_same_allocations_with_or_without_fallback():
    trace = synthetic("bimodal", 120, 0)
    on = run_one(trace, "de-bucket", defaults=Defaults()).attempts
    off = run_one(trace, "de-bucket", defaults=Defaults(pooled_fallback=False)).attempts
    assert on.equals(off)


def test_category_blind_merges_categories():
    tasks = [_task(i, 1, 100, 10, category=str(i % 3)) for i in range(9)]
    assert {t.category for t in category_blind(tasks)} == {"all"}
    row = compare(tasks, ["de-bucket"], blind=True).row(0, named=True)
    assert row["categories"] == "blind" and row["tasks"] == 9


def test_cli_replay_per_resource_blind_with_a_worker(tmp_path):
    trace = tmp_path / "t.csv"
    done = runner.invoke(app, ["xbucket", "generate", "--workflow", "trimodal", "--tasks", "80",
                               "--out", str(trace)])
    assert done.exit_code == 0, done.output
    done = runner.invoke(app, ["xbucket", "replay", "--trace", str(trace), "-a", "de-bucket",
                               "--per-resource", "--category-blind", "--whole-machine",
                               "16,65536,65536", "--json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout[done.stdout.index("["):])
    assert rows[0]["mode"] == "per-resource" and rows[0]["categories"] == "blind"
    assert all(f"retries_{r}" in rows[0] for r in RESOURCES)
    bad = runner.invoke(app, ["xbucket", "replay", "--trace", str(trace), "--whole-machine",
                              "lots"])
    assert bad.exit_code == 2 and "whole_machine" in bad.output


def test_a_new_categorys_first_attempt_takes_the_pooled_upper_quantile():
    old = XBucket("de", Defaults(sampling=5, cold_quantile=None))
    new = XBucket("de", Defaults(sampling=5, cold_quantile=0.9))
    for allocator in (old, new):
        for i in range(40):  # pooled records: mostly small, a tenth large
            memory = 2000.0 + i if i % 10 == 9 else 100.0 + i
            usage = Resources(1, memory, 50)
            allocator.observe(f"c{i % 4}", ResourceReport(usage, usage, 1.0))
    assert old.allocate("fresh").memory < 200  # deterministic: the lowest pooled bucket
    memory, pooled = new.allocate("fresh").memory, new._pooled[1]
    assert memory == pooled.upper(0.9) and memory >= 2000  # at least 90 % of the pool fit
    values, _ = pooled.records()
    assert (values <= memory).mean() >= 0.9
    small_old = XBucket("de", Defaults(sampling=5, cold_quantile=None))
    small_new = XBucket("de", Defaults(sampling=5))
    for allocator in (small_old, small_new):
        for i in range(20):  # a pool of small categories only (100-119 MB)
            usage = Resources(1, 100.0 + i, 50)
            allocator.observe(f"s{i % 2}", ResourceReport(usage, usage, 1.0))
    # a new category killed above the pool's top bucket: the pool does not describe it, so
    # its own default (1000 MB) next, not a doubling from 119 MB (one kill per doubling)
    top = ResourceReport(Resources(1, 119, 50), Resources(1, 130, 50), 1.0, ("memory",))
    assert small_new.allocate("big", top).memory == 1000.0
    assert small_old.allocate("big", top).memory == 250.0
    for i in range(5):  # past its own sampling, the category's own buckets again
        usage = Resources(1, 120.0 + i, 50)
        new.observe("fresh", ResourceReport(usage, usage, 1.0))
    assert new.allocate("fresh").memory < 200


def test_the_cold_prior_saves_retries_of_categories_that_arrive_late():
    from schedlab.xbucket.coldstart import MODES, cold_start_table
    from schedlab.xbucket.workloads import staggered

    tasks = staggered(categories=6, per_category=12)
    q = Defaults().cold_quantile  # the default prior
    rows = cold_start_table("staggered", tasks, [None, q], semantics="allocation")
    cold = {(r["algorithm"], r["cold_quantile"], r["resource"]): r["cold_retries"] for r in rows}
    for algorithm in MODES:
        before = sum(cold[(algorithm, "none", r)] for r in ("memory", "disk"))
        after = sum(cold[(algorithm, q, r)] for r in ("memory", "disk"))
        assert after < before, (algorithm, before, after)


def test_a_cold_retry_never_jumps_past_its_own_sampling_step():
    allocator = XBucket("pg", Defaults(sampling=5))
    for i in range(30):  # a pool of mostly 670 MB disks and a few 40 GB ones
        disk = 40_000.0 if i % 10 == 0 else 670.0
        usage = Resources(1, 100, disk)
        allocator.observe(f"c{i % 3}", ResourceReport(usage, usage, 1.0))
    failed = ResourceReport(Resources(1, 100, 670), Resources(1, 100, 13_155), 1.0, ("disk",))
    # the pool's next bucket up is 40 GB (another category's); its own doubling gives 16 GB
    assert allocator.allocate("new", failed).disk == 16_000.0
    low = ResourceReport(Resources(1, 100, 300), Resources(1, 100, 300), 1.0, ("disk",))
    assert allocator.allocate("new", low).disk == 670.0  # a pooled bucket below that step


def test_time_weighting_sizes_buckets_by_the_time_they_hold():
    def feed(allocator):
        for i in range(40):  # 70 % short 1-core tasks, 30 % long 2-core ones
            long = i % 10 >= 7
            usage = Resources(2.0 if long else 1.0, 100, 100)
            allocator.observe("c", ResourceReport(usage, usage, 50.0 if long else 1.0))
        return allocator.allocate("c").cores

    assert feed(make_allocator("dg-bucket")) == 1.0  # by count: the low bucket first
    assert feed(make_allocator("dg-bucket-tw")) == 2.0  # by time: 94 % of it needs 2 cores
    tasks = [Task(str(i), "c", Resources(2.0 if i % 10 >= 7 else 1.0, 100, 100),
                  50.0 if i % 10 >= 7 else 1.0) for i in range(300)]
    config = ReplayConfig(only="cores")
    plain = summarise(run_one(tasks, "dg-bucket", config))["efficiency_cores"]
    weighted = summarise(run_one(tasks, "dg-bucket-tw", config))["efficiency_cores"]
    assert weighted > plain


def test_which_cold_tasks_take_the_prior():
    """``Defaults.cold_prior``: every cold task (default), only a category's first, or its own
    largest record once it has one (at it for a repeated value, strictly above otherwise)."""
    def pool(rule):
        allocator = XBucket("dg", Defaults(sampling=5, cold_quantile=0.9, cold_prior=rule))
        for i in range(40):  # mostly small, a tenth large
            memory = 2000.0 + i if i % 10 == 9 else 100.0 + i
            usage = Resources(1, memory, 50)
            allocator.observe(f"c{i % 4}", ResourceReport(usage, usage, 1.0))
        usage = Resources(1, 105.0, 50)
        allocator.observe("new", ResourceReport(usage, usage, 1.0))  # one own record
        return allocator
    every, first = pool("sampling"), pool("first")
    prior = every._pooled[1].upper(0.9)
    assert prior >= 2000 and every.allocate("new").memory == prior
    assert first.allocate("new").memory < 200  # a pooled bucket as for a known one
    assert first.allocate("fresh").memory == prior  # no own record: the prior
    assert 105 < pool("own-above").allocate("new").memory < 2000  # the pooled bucket above
    first.defaults = Defaults(sampling=5, cold_prior="nonsense")
    with pytest.raises(ValueError, match="cold_prior"):
        first.allocate("new")
