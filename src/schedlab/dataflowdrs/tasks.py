"""A workflow's tasks, and how one task process is started and measured.

Why a module of its own: both workflow engines, the built-in thread pool (``runner``) and Parsl
(``parslrun``), run tasks with :func:`execute_task`, and the runner chooses between them; with
the shared pieces below both there is no import cycle between them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from schedlab.core.errors import BadInputError, ConfigError

TASKBIN = Path(__file__).with_name("taskbin.py")


@dataclass(frozen=True)
class TaskSpec:
    """One task: the files it reads and writes, its I/O block size and its CPU work."""

    id: str
    group: str
    inputs: tuple[str, ...]
    outputs: tuple[tuple[str, int], ...]
    block: int = 1 << 20
    work_mb: float = 0.0

    def argv(self) -> list[str]:
        spec = dict(inputs=list(self.inputs), outputs=[list(o) for o in self.outputs],
                    block=self.block, work_mb=self.work_mb)
        return [sys.executable, "-S", "-P", str(TASKBIN), json.dumps(spec)]  # -P: no path shadowing


@dataclass
class Workflow:
    """A DAG of tasks over files; dependencies follow from who writes what."""

    name: str
    tasks: list[TaskSpec]
    initial: list[tuple[str, int]]  # input files that exist before the run
    file_groups: dict[str, str]  # path -> file group (for compression and recommendations)
    config: dict = field(default_factory=dict)

    def dependencies(self) -> dict[str, set[str]]:
        """Task id -> ids of the tasks producing its inputs; raises on a file nobody makes."""
        producer = {path: t.id for t in self.tasks for path, _ in t.outputs}
        existing = {path for path, _ in self.initial}
        deps: dict[str, set[str]] = {}
        for task in self.tasks:
            deps[task.id] = set()
            for path in task.inputs:
                if path in producer:
                    deps[task.id].add(producer[path])
                elif path not in existing:
                    raise ConfigError(f"task {task.id} reads {path}, which nothing produces",
                                      field="inputs")
        return deps


@dataclass(frozen=True)
class Launch:
    """How the tracer wants task processes started: environment and command prefix."""

    env: dict[str, str]
    prefix: Callable[[str], list[str]]


def execute_task(task: TaskSpec, launch: Launch, ready: float) -> dict:
    """Run one task process and return its event; wait4 gives its own CPU time."""
    argv = [*launch.prefix(task.id), *task.argv()]
    with tempfile.TemporaryFile() as errors:
        start = time.time()
        proc = subprocess.Popen(argv, env=launch.env, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(proc.pid, 0)
        end = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errors.seek(0)
            tail = errors.read()[-300:].decode(errors="replace")
            raise BadInputError(f"task {task.id} failed (exit {proc.returncode}): {tail}",
                                field=task.id)
    return dict(task=task.id, group=task.group, pid=proc.pid, ready=ready, start=start,
                end=end, cpu=usage.ru_utime + usage.ru_stime, inputs=list(task.inputs),
                outputs=[p for p, _ in task.outputs], block=task.block, work_mb=task.work_mb)
