"""IFlux's scheduler-side workflow as two library calls: decide, then run.

Paper: IFlux (../shared/papers/10-iflux.md). :func:`decide` is what the scheduler plugin does at
submission/allocation time (read intents, map, fit capacity); everything that can be wrong with
the intents fails here, before anything is deployed, and the time it takes is the scheduler-side
overhead the paper reports. :func:`run` then deploys, runs and tears down (:mod:`deploy`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from schedlab.iflux.deploy import RunReport, build_plan, execute
from schedlab.iflux.intents import Intent, check_job
from schedlab.iflux.jobspec import JobIntents, read_intents
from schedlab.iflux.policies import Allocation, Mapper, allocate, shared_mapper
from schedlab.iflux.rules import Tier


@dataclass
class Decision:
    allocation: Allocation
    seconds: float


def decide(source: str | Path | JobIntents | list[Intent], mapper: str | Mapper = "iflux",
           capacity: dict[Tier, int] | None = None) -> Decision:
    """Intents (a file, parsed intents or a list) -> an Allocation, timed.

    The mapper is resolved (and its rules compiled) before the clock starts: a scheduler plugin
    does that once when it is loaded, not per job.
    """
    chosen = shared_mapper(mapper) if isinstance(mapper, str) else mapper
    start = time.perf_counter()
    if isinstance(source, str | Path):
        intents = read_intents(source).intents
    elif isinstance(source, JobIntents):
        intents = source.intents
    else:
        intents = list(source)
        check_job(intents)
    allocation = allocate(intents, chosen, capacity)
    return Decision(allocation, time.perf_counter() - start)


def run(source: str | Path | JobIntents | list[Intent], command: list[str],
        site_path: str | Path, mapper: str | Mapper = "iflux",
        capacity: dict[Tier, int] | None = None, job_id: str | None = None,
        env: dict[str, str] | None = None, stdout=None, copier=None) -> RunReport:
    """Decide, deploy, run ``command`` transparently, flush and tear down (no scheduler)."""
    decision = decide(source, mapper, capacity)
    plan = build_plan(decision.allocation, site_path, job_id or f"run-{uuid.uuid4().hex[:8]}")
    return execute(plan, command, decision.allocation, decision.seconds, env, stdout, copier)
