"""Parsl's own app types under XBucketExecutor: decorated ``python_app``, ``bash_app`` (stdout
redirection, exit codes, a memory-hungry command killed and retried), ``join_app`` and
dependencies between apps, all through a loaded DataFlowKernel. Every wait has a timeout."""

import sys

import pytest

parsl = pytest.importorskip("parsl")
from parsl import Config  # noqa: E402
from parsl.app.errors import BashExitFailure  # noqa: E402

from schedlab.xbucket import Defaults, Machine, Resources  # noqa: E402
from schedlab.xbucket.parsl import XBucketExecutor  # noqa: E402

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import xbucket_parsl_apps as apps  # noqa: E402  (decorated apps, as users write them)

WAIT = 180


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One DataFlowKernel for the module (a Parsl start-up per test would dominate)."""
    tmp = tmp_path_factory.mktemp("parsl-apps")
    executor = XBucketExecutor(algorithm="de-bucket", parallel=2, machine=Machine(2, 2000, 1000),
                               defaults=Defaults(first=Resources(1, 150, 100), sampling=3))
    config = Config(executors=[executor], run_dir=str(tmp / "runinfo"),
                    initialize_logging=False)
    with parsl.load(config):
        yield executor, tmp
    parsl.clear()


def test_bash_apps_run_with_parsl_semantics(run):
    executor, tmp = run
    out = tmp / "echo.out"
    assert apps.echo("hello from bash", stdout=str(out)).result(timeout=WAIT) == 0
    assert out.read_text() == "hello from bash\n"
    with pytest.raises(BashExitFailure) as caught:
        apps.exit_with(3).result(timeout=WAIT)
    assert caught.value.exitcode == 3
    categories = {r.task_id.rsplit("-", 1)[0] for r in executor.records.values()}
    assert {"echo", "exit_with"} <= categories  # named after the user's function


def test_a_bash_apps_hungry_command_is_killed_and_retried_upward(run):
    executor, tmp = run
    out = tmp / "hog.out"
    assert apps.hog(400, stdout=str(out)).result(timeout=WAIT) == 0
    assert out.read_text().strip() == "400"
    [record] = [r for r in executor.records.values() if r.task_id.startswith("hog-")]
    allocations = [a.allocation.memory for a in record.attempts]
    assert allocations[0] == 150 and len(allocations) >= 2 and allocations[-1] >= 400
    assert all(a.exceeded == ("memory",) for a in record.attempts[:-1])
    assert record.attempts[-1].usage.memory >= 400  # the command's memory, not just bash's


def test_decorated_python_apps_dependencies_and_errors(run):
    squares = [apps.square(i) for i in range(4)]
    # a dependency by argument and by inputs=: Parsl resolves both before submitting here
    assert apps.total(squares[3], inputs=squares[:3]).result(timeout=WAIT) == 14
    with pytest.raises(ValueError, match="refused 7") as caught:
        apps.refuse(7).result(timeout=WAIT)
    assert any("remote traceback" in note for note in caught.value.__notes__)


def test_a_join_app_joins_the_apps_it_launches(run):
    executor, _ = run
    before = len(executor.records)
    assert apps.squares_then_total(4).result(timeout=WAIT) == 0 + 1 + 4 + 9
    launched = [r.task_id for r in list(executor.records.values())[before:]]
    assert sorted(t.rsplit("-", 1)[0] for t in launched) == ["square"] * 4 + ["total"]


def _gone(pid_file) -> bool:
    """Every pid written to ``pid_file`` has ended (or is a zombie nobody reaped yet)."""
    import psutil

    for pid in map(int, pid_file.read_text().split() or [0]):
        if pid <= 0:
            return False  # written but empty: not yet known
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


@pytest.mark.parametrize("kind", ["python", "bash"])
def test_walltime_kills_the_app_and_its_children_and_fails_its_future(run, kind):
    import time

    from parsl.app.errors import AppTimeout

    executor, tmp = run
    pid_file = tmp / f"{kind}-nap.pids"
    app = apps.nap if kind == "python" else apps.bash_nap
    future = app(120, str(pid_file), walltime=5)
    with pytest.raises(AppTimeout) as caught:
        future.result(timeout=WAIT)
    name = "nap" if kind == "python" else "bash_nap"
    assert f"task {name}-" in str(caught.value) and "walltime of 5 s" in str(caught.value)
    assert caught.value.walltime == 5 and caught.value.elapsed < 60
    record = executor.records[caught.value.task_id]
    assert len(record.attempts) == 1  # a walltime kill is not retried
    # under heavy load the app may not have started its child within 5 s (then nothing can be
    # orphaned); when it did, the sleeping grandchild must be gone too
    # (LocalExecutor's walltime test checks a grandchild deterministically)
    if pid_file.exists():
        deadline = time.monotonic() + 10
        while not _gone(pid_file) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(pid_file)


def test_an_app_within_its_walltime_returns(run):
    assert apps.nap(0.2, walltime=60).result(timeout=WAIT) == 0.2
