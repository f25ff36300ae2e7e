"""XBucketExecutor never strands a future: a task larger than the worker fails at once through
its future, cleanup never raises, and a dying dispatch thread fails every task it holds.

Every wait has a timeout, so a regression fails here instead of hanging the suite (before the
fix the over-cap task was retried 16 times at the cap, then cleanup raised ``seek of closed
file`` in the dispatch thread and its future never resolved)."""

import sys

import pytest

parsl = pytest.importorskip("parsl")
from parsl import Config, python_app  # noqa: E402

from schedlab.core.errors import SchedlabError  # noqa: E402
from schedlab.xbucket import Defaults, Machine, Resources  # noqa: E402
from schedlab.xbucket import executor as executor_module  # noqa: E402
from schedlab.xbucket.executor import TaskTooLargeError  # noqa: E402
from schedlab.xbucket.parsl import DispatchError, XBucketExecutor  # noqa: E402
from schedlab.xbucket.policies import make_allocator  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import xbucket_tasks as tasks  # noqa: E402  (stdlib-only helpers the child imports)

WAIT = 120  # seconds: far above the few seconds these take, far below "hung"


def _executor(**kwargs):
    kwargs.setdefault("defaults", Defaults(first=Resources(1, 80, 100)))
    return XBucketExecutor(algorithm="de-bucket", machine=Machine(2, 250, 1000), **kwargs)


def test_a_task_larger_than_the_worker_fails_at_once_through_parsl(tmp_path):
    executor = _executor(parallel=2)
    config = Config(executors=[executor], run_dir=str(tmp_path / "runinfo"),
                    initialize_logging=False)
    hold = python_app(tasks.hold_memory, executors=["xbucket"])
    with parsl.load(config):
        too_big = hold(400, 0.5)
        small = [hold(10, 0.05) for _ in range(3)]
        with pytest.raises(TaskTooLargeError) as caught:
            too_big.result(timeout=WAIT)
        assert [f.result(timeout=WAIT) for f in small] == [10, 10, 10]
    parsl.clear()
    error = caught.value
    assert error.task_id.startswith("hold_memory-") and error.task_id in str(error)
    assert error.resource == "memory" and error.cap == 250 and error.peak >= 250
    assert "250 MB" in str(error) and f"{error.peak:.0f} MB" in str(error)
    record = executor.records[error.task_id]
    allocations = [a.allocation.memory for a in record.attempts]
    assert allocations == [80, 160, 250]  # grown to the cap once, then no retry at the cap


def test_a_task_that_runs_out_of_attempts_fails_through_its_future():
    executor = _executor(max_attempts=1)
    executor.start()
    try:
        future = executor.submit(tasks.hold_memory, {}, 150, 0.3)
        with pytest.raises(SchedlabError, match="exceeded its allocation 1 times"):
            future.result(timeout=WAIT)
        assert executor.submit(tasks.hold_memory, {}, 5, 0.01).result(timeout=WAIT) == 5
    finally:
        executor.shutdown()


def test_an_allocator_error_fails_only_its_task():
    class Flaky:
        name = "flaky"

        def __init__(self):
            self.inner = make_allocator("de-bucket", defaults=Defaults(first=Resources(1, 80,
                                                                                       100)))

        def allocate(self, category, last_failed=None, declared=None):
            if category == "bad":
                raise RuntimeError("no prediction for bad")
            return self.inner.allocate(category, last_failed, declared)

        def observe(self, category, report):
            self.inner.observe(category, report)

    executor = XBucketExecutor(allocator=Flaky(), machine=Machine(2, 250, 1000))
    executor.start()
    try:
        bad = executor.submit(tasks.hold_memory, {"category": "bad"}, 5, 0.01)
        good = executor.submit(tasks.hold_memory, {}, 5, 0.01)
        with pytest.raises(RuntimeError, match="no prediction for bad"):
            bad.result(timeout=WAIT)
        assert good.result(timeout=WAIT) == 5
    finally:
        executor.shutdown()


def test_a_dying_dispatch_thread_fails_every_pending_future(monkeypatch):
    def broken_sampler(self, disk_every):
        raise RuntimeError("sampler bug")

    monkeypatch.setattr(executor_module._Attempt, "sample", broken_sampler)
    executor = _executor(parallel=1)
    executor.start()
    try:
        futures = [executor.submit(tasks.hold_memory, {}, 5, 1.0) for _ in range(3)]
        for future in futures:  # one running, two queued: all fail, none is left pending
            with pytest.raises(DispatchError, match="sampler bug"):
                future.result(timeout=WAIT)
        later = executor.submit(tasks.hold_memory, {}, 5, 0.01)
        assert later.done()
        with pytest.raises(DispatchError):
            later.result(timeout=0)
    finally:
        executor.shutdown()


def test_closing_an_attempt_twice_is_harmless(tmp_path):
    local = executor_module.LocalExecutor(make_allocator("de-bucket"), cgroups=False)
    spec = executor_module.TaskSpec("t", command=["sh", "-c", "echo hi"])
    attempt = executor_module._Attempt(spec, Resources(1, 100, 100), tmp_path, [], local)
    attempt.finish("allocation")
    assert attempt.close(True)[0].strip() == "hi"
    assert attempt.close(True) == ("", "")  # was: ValueError: seek of closed file
    assert not list(tmp_path.iterdir())
