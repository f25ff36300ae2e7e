"""A small workflow runner: tasks as real processes, a dependency DAG, bounded parallelism.

DataFlowDrs (paper 09) needs task-level start/stop events next to the I/O trace. This runner is
a small built-in engine, or Parsl (parslrun.py): either way every task is a separate
``python -S taskbin.py SPEC`` process with the tracer's environment, at most ``parallelism``
run at once, and ready/start/end/pid/CPU of each task go to ``tasks.jsonl``. The runner never
looks at what a task does; workflows (workloads.py) and tracers (tracer.py) are plain data.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from schedlab.core.errors import BadInputError, ConfigError, UnknownNameError
from schedlab.core.io import ensure_directory, write_text
from schedlab.dataflowdrs.tasks import Launch, TaskSpec, Workflow, execute_task
from schedlab.dataflowdrs.tiers import TierLayout


@dataclass
class RunRecord:
    """What one run measured: per-task events and the makespan."""

    workflow: str
    makespan: float
    events: list[dict]
    trace_dir: Path
    parallelism: int
    cpu: float = 0.0  # user+system CPU seconds of the task processes


def _create_initial(files: Sequence[tuple[str, int]]) -> None:
    """Write the workflow's pre-existing inputs (untraced: they are the data set)."""
    for path, size in files:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        chunk = os.urandom(min(size, 1 << 16)) or b"\0"
        with open(path, "wb") as handle:
            left = size
            while left > 0:
                n = min(len(chunk), left)
                handle.write(chunk[:n])
                left -= n


def _clear_outputs(workflow: Workflow) -> None:
    for task in workflow.tasks:
        for path, _ in task.outputs:
            if os.path.exists(path):
                os.unlink(path)


def _clear_trace(out: Path) -> None:
    """A trace directory holds one run: stale per-process files would be misattributed."""
    for stale in [*out.glob("trace-*.pfw"), *out.glob("trace-*.pfw.gz"), *out.glob("strace-*"),
                  out / "tasks.jsonl"]:
        stale.unlink(missing_ok=True)


def _builtin(workflow: Workflow, deps: dict[str, set[str]], launch: Launch,
             parallelism: int) -> list[dict]:
    """Submit each task to a thread pool as soon as its producers have finished."""
    by_id = {t.id: t for t in workflow.tasks}
    waiting = {tid: set(d) for tid, d in deps.items()}
    running: dict[Future, str] = {}
    log: list[dict] = []
    with ThreadPoolExecutor(max_workers=parallelism) as pool:
        def submit_ready() -> None:
            now = time.time()
            for tid in [t for t, d in waiting.items() if not d]:
                del waiting[tid]
                running[pool.submit(execute_task, by_id[tid], launch, now)] = tid

        submit_ready()
        while running:
            done, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for future in done:
                finished = running.pop(future)
                log.append(future.result())  # a failed task stops the run with its message
                for d in waiting.values():
                    d.discard(finished)
            submit_ready()
    return log


def _engines() -> dict[str, Callable]:
    from schedlab.dataflowdrs.parslrun import run_with_parsl

    return {"builtin": _builtin, "parsl": run_with_parsl}


ENGINES = ("builtin", "parsl")


def run_workflow(workflow: Workflow, layout: TierLayout, tracer, out_dir: str | Path,
                 parallelism: int, prepare: bool = True, engine: str = "builtin") -> RunRecord:
    """Run ``workflow`` with at most ``parallelism`` tasks at once, traced by ``tracer``.

    ``engine`` is the workflow system that orders the tasks: ``builtin`` (a thread pool over
    the DAG) or ``parsl`` (Parsl's DataFlowKernel with a local ThreadPoolExecutor). Writes
    ``tasks.jsonl`` and ``meta.json`` into ``out_dir`` (plus the tracer's own files).
    """
    if parallelism < 1:
        raise ConfigError("must be at least 1", field="parallelism")
    if engine not in ENGINES:
        raise UnknownNameError("workflow engine", engine, list(ENGINES))
    out = ensure_directory(out_dir)
    _clear_trace(out)
    deps = workflow.dependencies()
    if prepare:
        _create_initial(workflow.initial)
    _clear_outputs(workflow)
    layout.reset_clocks()
    launch = Launch(tracer.environment(out, layout),
                    functools.partial(tracer.prefix, out, layout))
    schedule = _engines()[engine]
    t0 = time.time()
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    log = schedule(workflow, deps, launch, parallelism)
    makespan = time.time() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    log.sort(key=lambda e: e["start"])
    write_text(out / "tasks.jsonl", "".join(json.dumps(e) + "\n" for e in log))
    meta = dict(workflow=workflow.name, parallelism=parallelism, makespan=makespan, t0=t0,
                cpu=cpu, cores=len(os.sched_getaffinity(0)), engine=engine,
                tracer=tracer.name, tiers=layout.as_dict(), file_groups=workflow.file_groups,
                config=workflow.config)
    write_text(out / "meta.json", json.dumps(meta, indent=1, default=str))
    return RunRecord(workflow.name, makespan, log, out, parallelism, cpu)


def run_command(argv: Sequence[str], tracer, out_dir: str | Path, layout: TierLayout,
                name: str = "command", cwd: str | Path | None = None,
                quiet: bool = False) -> RunRecord:
    """Trace one arbitrary command as a single-task workflow (``schedlab dataflowdrs trace``)."""
    if not argv:
        raise ConfigError("give a command after --", field="command")
    out = ensure_directory(out_dir)
    _clear_trace(out)
    env = tracer.environment(out, layout)
    start = time.time()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run([*tracer.prefix(out, layout, name), *argv], env=env, cwd=cwd,
                              stdout=subprocess.DEVNULL if quiet else None)
    except FileNotFoundError as exc:
        raise BadInputError(f"command not found: {argv[0]}", field="command") from exc
    end = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    event = dict(task=name, group=name, pid=-1, ready=start, start=start, end=end, inputs=[],
                 outputs=[], block=0, work_mb=0.0, returncode=proc.returncode)
    write_text(out / "tasks.jsonl", json.dumps(event) + "\n")
    meta = dict(workflow=name, parallelism=1, makespan=end - start, t0=start,
                tracer=tracer.name, tiers=layout.as_dict(), file_groups={}, config={},
                command=list(argv), cwd=str(Path(cwd).resolve()) if cwd else os.getcwd(),
                returncode=proc.returncode, cpu=cpu)
    write_text(out / "meta.json", json.dumps(meta, indent=1))
    return RunRecord(name, end - start, [event], out, 1, cpu)


__all__ = ["RunRecord", "TaskSpec", "Workflow", "run_command", "run_workflow"]
