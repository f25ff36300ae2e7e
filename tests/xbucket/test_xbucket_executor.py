"""A small real workflow: tasks that allocate known amounts of memory, run under predictions."""

import sys

import pytest

from schedlab.core.errors import BadInputError
from schedlab.xbucket import Defaults, LocalExecutor, Resources, TaskSpec, make_allocator

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import xbucket_tasks as tasks  # noqa: E402  (stdlib-only helpers the child imports)


@pytest.mark.slow
def test_real_workflow_retries_and_loses_no_result():
    defaults = Defaults(first=Resources(1, 60, 50), sampling=3)
    executor = LocalExecutor(make_allocator("pg-bucket", defaults=defaults), parallel=2,
                             semantics="allocation")
    sizes = [10, 90, 20, 160, 30, 15]
    specs = [TaskSpec(f"m{i}", "mem", function=tasks.hold_memory, args=(mb, 0.15))
             for i, mb in enumerate(sizes)]
    specs.append(TaskSpec("d", "disk", function=tasks.write_file, args=(80, 0.15)))
    specs.append(TaskSpec("sh", "cmd", command=["sh", "-c", "echo done"]))
    records = executor.run(specs)
    assert [r.task_id for r in records] == [s.task_id for s in specs]
    assert all(r.succeeded for r in records)
    assert [r.value for r in records[:6]] == sizes  # every result came back
    assert records[6].value == 80 and records[7].stdout.strip() == "done"
    big = records[3]
    assert len(big.attempts) >= 2  # 160 MB cannot fit the 60 MB first allocation
    for failed, after in zip(big.attempts, big.attempts[1:], strict=False):
        assert failed.exceeded and after.allocation.memory > failed.allocation.memory
    assert big.attempts[-1].usage.memory >= 160
    disk = records[6].attempts
    assert any("disk" in a.exceeded for a in disk) and disk[-1].usage.disk >= 80


def test_a_task_needs_exactly_one_of_command_or_function():
    with pytest.raises(BadInputError):
        TaskSpec("x")
    with pytest.raises(BadInputError):
        TaskSpec("x", command=["true"], function=print)


def test_walltime_kills_a_command_and_its_children_and_fails_only_that_task(tmp_path):
    import time

    import psutil

    from schedlab.xbucket.executor import WalltimeExceededError

    pids = tmp_path / "pids"
    executor = LocalExecutor(make_allocator("de-bucket"), parallel=2)
    script = f"sleep 60 & echo $! > {pids}; wait; echo late"
    records = executor.run([
        TaskSpec("slow", "sleep", command=["sh", "-c", script], walltime=1),
        TaskSpec("fast", "echo", command=["sh", "-c", "echo ok"], walltime=60),
    ])
    slow, fast = records
    assert isinstance(slow.exception, WalltimeExceededError) and not slow.succeeded
    assert str(slow.exception).startswith("field 'walltime': task slow exceeded its walltime "
                                          "of 1 s: killed after")
    assert len(slow.attempts) == 1 and slow.attempts[0].wall_time < 30 and "late" not in slow.stdout
    assert fast.succeeded and fast.stdout.strip() == "ok"
    grandchild = int(pids.read_text())

    def alive() -> bool:
        try:
            return psutil.Process(grandchild).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive()  # the background sleep was killed with its shell, not orphaned


@pytest.mark.parametrize("bad", [0, -2, "soon"])
def test_a_bad_walltime_is_one_line_naming_the_field(bad):
    with pytest.raises(BadInputError, match="field 'walltime': task x: must be"):
        TaskSpec("x", command=["true"], walltime=bad)
