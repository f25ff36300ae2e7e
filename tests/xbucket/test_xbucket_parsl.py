"""A real Parsl workflow under XBucketExecutor: mixed memory needs, kills and retries, every
result back; categories from the app name or a user label."""

import sys

import pytest

parsl = pytest.importorskip("parsl")
from parsl import Config, python_app  # noqa: E402

from schedlab.core.errors import BadInputError  # noqa: E402
from schedlab.xbucket import Defaults, Resources  # noqa: E402
from schedlab.xbucket.parsl import AppFailed, XBucketExecutor  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import xbucket_tasks as tasks  # noqa: E402  (stdlib-only helpers the child imports)


def test_a_parsl_workflow_of_60_tasks_retries_and_loses_no_result(tmp_path):
    executor = XBucketExecutor(algorithm="pe-bucket", parallel=2,
                               defaults=Defaults(first=Resources(1, 60, 100), sampling=4))
    config = Config(executors=[executor], run_dir=str(tmp_path / "runinfo"),
                    initialize_logging=False)
    hold = python_app(tasks.hold_memory, executors=["xbucket"])
    sizes = [10 if i % 4 else 150 for i in range(50)] + [30] * 10
    with parsl.load(config):
        futures = [hold(mb, 0.02) for mb in sizes[:50]]
        # a user label instead of the app name: its own category
        futures += [hold(mb, 0.02, parsl_resource_specification={"category": "labelled"})
                    for mb in sizes[50:]]
        results = [f.result(timeout=300) for f in futures]
    parsl.clear()
    assert results == sizes  # every result came back, in order
    records = executor.records
    assert len(records) == 60
    assert {r.task_id.rsplit("-", 1)[0] for r in records.values()} == {"hold_memory", "labelled"}
    retried = [r for r in records.values() if len(r.attempts) > 1]
    assert retried  # 150 MB cannot fit a 60 MB first allocation
    for record in retried:
        for failed, after in zip(record.attempts, record.attempts[1:], strict=False):
            assert failed.exceeded == ("memory",)
            assert after.allocation.memory > failed.allocation.memory
    assert all(r.enforcement for r in records.values())
    print(f"\nparsl: {len(records)} tasks, {sum(len(r.attempts) - 1 for r in records.values())} "
          f"retries over {len(retried)} tasks, enforcement: {executor.memory_enforcement}")


def test_app_errors_and_bad_specifications_reach_the_caller(tmp_path):
    executor = XBucketExecutor(parallel=1)
    executor.start()
    try:
        failing = executor.submit(tasks.hold_memory, {}, "not a number")
        with pytest.raises(TypeError, match="can't multiply"):  # the app's own exception type
            failing.result(timeout=60)
        command = executor.submit(tasks.exit_now, {}, 4)  # no exception to rebuild: AppFailed
        with pytest.raises(AppFailed, match="exit status 4"):
            command.result(timeout=60)
        with pytest.raises(BadInputError, match="parsl_resource_specification"):
            executor.submit(tasks.hold_memory, {"cores": 2}, 1)
        assert executor.submit(tasks.hold_memory, {"category": "x"}, 5, 0.01).result(60) == 5
    finally:
        executor.shutdown()
