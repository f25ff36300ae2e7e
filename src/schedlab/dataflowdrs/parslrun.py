"""Running a workflow with Parsl, the real workflow system the issue names.

DataFlowDrs (paper 09) diagnoses workflows run by workflow systems. Here each task becomes a
Parsl ``python_app`` on a local ``ThreadPoolExecutor`` of ``parallelism`` threads; the app
launches the task's process (so the tracer's LD_PRELOAD applies to it) and returns its event.
Dependencies are Parsl futures passed as ``inputs``, so Parsl's DataFlowKernel, not our code,
decides when each task may start. A task's "ready" time is when its last producer finished.
"""

from __future__ import annotations

import shutil
import tempfile

from schedlab.core.errors import MissingDependencyError
from schedlab.dataflowdrs.tasks import Launch, Workflow, execute_task

try:  # imported with this module, before the runner starts its clock
    import parsl
    from parsl.config import Config
    from parsl.executors.threads import ThreadPoolExecutor
except ImportError:  # pragma: no cover - exercised where parsl is absent
    parsl = None


def available() -> bool:
    return parsl is not None


def run_with_parsl(workflow: Workflow, deps: dict[str, set[str]], launch: Launch,
                   parallelism: int) -> list[dict]:
    """The task events of one run under Parsl (raises the first task failure)."""
    if parsl is None:
        raise MissingDependencyError("the parsl engine needs the 'parsl' package",
                                     hint="pip install parsl")

    @parsl.python_app
    def task_app(task, launch, inputs=()):
        ready = max((event["end"] for event in inputs), default=None)
        event = execute_task(task, launch, 0.0)
        event["ready"] = event["start"] if ready is None else min(ready, event["start"])
        return event

    run_dir = tempfile.mkdtemp(prefix="schedlab-parsl-")
    config = Config(executors=[ThreadPoolExecutor(max_threads=parallelism, label="local")],
                    run_dir=run_dir, strategy="none", initialize_logging=False)
    futures: dict = {}
    try:
        with parsl.load(config):
            for task in workflow.tasks:  # tasks are listed producers-first
                futures[task.id] = task_app(task, launch,
                                            inputs=[futures[d] for d in sorted(deps[task.id])])
            return [futures[t.id].result() for t in workflow.tasks]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
