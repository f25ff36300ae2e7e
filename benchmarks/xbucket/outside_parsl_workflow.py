"""Issue 51's "How it will be checked", run as an outside user would: one Parsl script.

Apps are defined in this ``__main__`` script (imports inside their bodies, Parsl's rule) and run
under ``XBucketExecutor`` (de-bucket, 2 at once, a worker of 2 cores / 600 MB / 2 GB disk, first
allocation 100 MB) with Parsl's own ``retries=2``:

* 16 small and 8 big (250 MB) python apps: the big ones are killed and retried upward;
* 6 apps whose *grandchild* holds 300 MB for 0.1 s (a spike between two samples);
* bash apps: 4 ``echo`` into files, 6 whose child python holds 200 MB, 2 that ``exit 3``;
* 6 flaky apps that raise on their first run (a marker file) and succeed on Parsl's retry;
* 2 over-cap apps (800 MB on the 600 MB worker): ``TaskTooLargeError``, never a hang;
* 2 apps past their ``walltime`` (2 s): Parsl's ``AppTimeout``;
* a ``join_app`` over 4 apps and an app with ``inputs=`` dependencies.

Prints every check and the counts: executor retries (kills), Parsl retries, failures by type.
Exit status 0 when every check holds. ``python benchmarks/xbucket/outside_parsl_workflow.py``
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import parsl
from parsl import Config, bash_app, join_app, python_app
from parsl.app.errors import AppTimeout, BashExitFailure

from schedlab.xbucket import Defaults, Machine, Resources
from schedlab.xbucket.executor import TaskTooLargeError
from schedlab.xbucket.parsl import XBucketExecutor


@python_app(executors=["xbucket"])
def hold(megabytes: int, seconds: float = 0.2) -> int:
    import time

    block = b"\x01" * (megabytes * 2**20)
    time.sleep(seconds)
    return len(block) >> 20


@python_app(executors=["xbucket"])
def spike(megabytes: int) -> int:
    import subprocess
    import sys

    code = f"import time; b = b'\\x01' * ({megabytes} * 2**20); time.sleep(0.1)"
    return subprocess.run([sys.executable, "-c", code], check=False).returncode


@python_app(executors=["xbucket"])
def flaky(marker: str, value: int) -> int:
    import os

    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError(f"flaky {value}: first run fails")
    return value


@python_app(executors=["xbucket"])
def nap(seconds: float, walltime: float = 60) -> float:
    import time

    time.sleep(seconds)
    return seconds


@python_app(executors=["xbucket"])
def total(*values: int, inputs=()) -> int:
    return sum(values) + sum(inputs)


@python_app(executors=["xbucket"])
def square(x: int) -> int:
    return x * x


@join_app
def sum_of_squares(n: int):
    return total(*[square(i) for i in range(n)])


@bash_app(executors=["xbucket"])
def echo(text: str, stdout=None) -> str:
    return f"echo {text}"


@bash_app(executors=["xbucket"])
def bash_hog(megabytes: int, python: str, stdout=None) -> str:
    code = f"import time; b = b'x' * ({megabytes} * 2**20); time.sleep(0.2); print(len(b) >> 20)"
    return f'{python} -c "{code}"'


@bash_app(executors=["xbucket"])
def exit_with(code: int) -> str:
    return f"exit {code}"


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="xb-outside-"))
    executor = XBucketExecutor(algorithm="de-bucket", parallel=2,
                               machine=Machine(2, 600, 2000),
                               defaults=Defaults(first=Resources(1, 100, 200), sampling=3))
    config = Config(executors=[executor], retries=2, run_dir=str(work / "runinfo"),
                    initialize_logging=False)
    started = time.perf_counter()
    checks: list[tuple[str, bool]] = []
    with parsl.load(config):
        small = [hold(20 + 2 * i) for i in range(16)]
        big = [hold(250) for _ in range(8)]
        spikes = [spike(300) for _ in range(6)]
        echoes = [echo(f"line-{i}", stdout=str(work / f"echo-{i}.out")) for i in range(4)]
        hogs = [bash_hog(200, sys.executable, stdout=str(work / f"hog-{i}.out"))
                for i in range(6)]
        exits = [exit_with(3) for _ in range(2)]
        flakies = [flaky(str(work / f"flaky-{i}"), i) for i in range(6)]
        overcap = [hold(800) for _ in range(2)]
        late = [nap(30, walltime=2) for _ in range(2)]
        joined = sum_of_squares(4)
        deps = total(small[0], inputs=small[1:3])
        wait = 900

        def outcome(future):
            try:
                return future.result(timeout=wait)
            except Exception as exc:  # the type is what is checked
                return exc

        checks.append(("16 small apps return their sizes",
                       [outcome(f) for f in small] == [20 + 2 * i for i in range(16)]))
        checks.append(("8 big (250 MB) apps return", [outcome(f) for f in big] == [250] * 8))
        checks.append(("6 grandchild-spike apps return 0", [outcome(f) for f in spikes] == [0] * 6))
        checks.append(("4 bash echoes return 0 and wrote their files",
                       [outcome(f) for f in echoes] == [0] * 4 and all(
                           (work / f"echo-{i}.out").read_text() == f"line-{i}\n"
                           for i in range(4))))
        checks.append(("6 bash hogs (child 200 MB) return 0 and print 200",
                       [outcome(f) for f in hogs] == [0] * 6 and all(
                           (work / f"hog-{i}.out").read_text().strip() == "200"
                           for i in range(6))))
        failures = Counter()
        for f in exits:
            e = outcome(f)
            failures[type(e).__name__] += 1
        checks.append(("2 bash exit 3 fail with BashExitFailure(3)",
                       failures["BashExitFailure"] == 2 and all(
                           isinstance(outcome(f), BashExitFailure)
                           and outcome(f).exitcode == 3 for f in exits)))
        checks.append(("6 flaky apps succeed on Parsl's retry",
                       [outcome(f) for f in flakies] == list(range(6))))
        over = [outcome(f) for f in overcap]
        checks.append(("2 over-cap apps fail with TaskTooLargeError naming task, peak, cap",
                       all(isinstance(e, TaskTooLargeError) and e.cap == 600 and e.peak >= 600
                           and e.task_id in str(e) for e in over)))
        timeouts = [outcome(f) for f in late]
        checks.append(("2 apps past walltime fail with AppTimeout naming task and limit",
                       all(isinstance(e, AppTimeout) and "walltime of 2 s" in str(e)
                           and e.task_id in str(e) for e in timeouts)))
        checks.append(("join_app of 4 squares = 14", outcome(joined) == 14))
        checks.append(("inputs= dependencies: 20 + 22 + 24 = 66", outcome(deps) == 66))
        # every app call that reaches the executor (the join_app itself runs in Parsl)
        app_calls = len(small + big + spikes + echoes + hogs + exits + flakies + overcap
                        + late) + 4 + 2
    elapsed = time.perf_counter() - started
    parsl.clear()
    records = executor.records.values()
    kills = sum(sum(1 for a in r.attempts if a.exceeded) for r in records)
    by_error = Counter(type(r.exception).__name__ for r in records if r.exception is not None)
    enforcement = {r.enforcement for r in records if r.enforcement}
    for text, ok in checks:
        print(f"[{'ok' if ok else 'FAIL'}] {text}")
    # Parsl resubmits a failed app as a new executor task: the difference is its retries
    print(f"app calls {app_calls}; executor tasks {len(executor.records)}; Parsl retries "
          f"{len(executor.records) - app_calls}; attempts {sum(len(r.attempts) for r in records)}"
          f"; kill-and-retry (allocation exceeded) {kills}; failed executor tasks by type "
          f"{dict(by_error)}; wall {elapsed:.0f} s")
    print(f"memory enforcement: {sorted(enforcement)}")
    print(f"over-cap errors: {[str(e) for e in over]}")
    print(f"walltime errors: {[str(e) for e in timeouts]}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
