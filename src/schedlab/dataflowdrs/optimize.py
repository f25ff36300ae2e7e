"""The closed loop of DataFlowDrs part (e): diagnose, change the configuration, re-run, measure.

Each round traces the workflow, ranks its bottlenecks, applies the top recommendation that
actually changes the configuration, and records the makespan of an untraced run, so the
improvement is measured on the real workflow rather than predicted.
"""

from __future__ import annotations

from schedlab.dataflowdrs.diagnosis import analyse
from schedlab.dataflowdrs.engine import Workspace, diagnose_analysis, run_config
from schedlab.dataflowdrs.traces import read_trace
from schedlab.dataflowdrs.workloads import WorkflowConfig


def optimize_loop(cfg: WorkflowConfig, steps: int, diagnoser: str = "dataflowdrs",
                  space: Workspace | None = None) -> list[dict]:
    """Up to ``steps`` rounds; returns one record per configuration tried."""
    own = space is None
    space = space or Workspace.create()
    history: list[dict] = []
    try:
        for step in range(steps + 1):
            makespan = run_config(cfg, space, tracer="untraced").makespan
            entry = dict(step=step, makespan_s=makespan, config=repr(cfg))
            history.append(entry)
            if step == steps:
                break
            diagnosis = diagnose_analysis(analyse(read_trace(run_config(cfg, space).trace_dir)),
                                          diagnoser)
            change = next(((r, r.apply(cfg)) for r in diagnosis.recommendations
                           if r.apply(cfg) != cfg), None)
            if change is None:
                break
            rec, cfg = change
            entry.update(action=rec.action, target=rec.target, value=rec.value,
                         expected_saving_s=rec.expected_saving)
    finally:
        if own:
            space.close()
    return history
