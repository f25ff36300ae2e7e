"""Replay one workflow under many allocators and tabulate the result: the library call behind
``schedlab xbucket replay`` and the headline experiment (X-Bucket, ../shared/papers/15-xbucket.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import polars as pl

from schedlab.xbucket.metrics import summarise
from schedlab.xbucket.policies import ALLOCATORS, make_allocator
from schedlab.xbucket.simulator import Replay, ReplayConfig, replay
from schedlab.xbucket.types import Defaults, Machine, Task


def run_one(tasks: list[Task], algorithm: str, config: ReplayConfig | None = None,
            defaults: Defaults | None = None, seed: int = 0) -> Replay:
    """Replay ``tasks`` under the allocator registered as ``algorithm``.

    The worker size is decided once (``config.machine`` or the default grown to fit every task)
    and shared by the allocator (Whole Machine, retries at the max) and the engine (the cap).
    """
    config = config or ReplayConfig()
    machine = config.machine or Machine.covering(tasks)
    allocator = make_allocator(algorithm, machine, defaults, seed)
    return replay(tasks, allocator, dataclasses.replace(config, machine=machine))


def algorithms_for(tasks: list[Task], wanted: str | Iterable[str] = "all") -> list[str]:
    """``all`` means every registered allocator, less ``declared`` when no task declares one."""
    if isinstance(wanted, str) and wanted != "all":
        make_allocator(wanted)  # raises UnknownNameError with the valid names
        return [wanted]
    names = list(ALLOCATORS) if isinstance(wanted, str) else list(wanted)
    if not any(t.declared is not None for t in tasks):
        names = [n for n in names if n != "declared"]
    return names


def compare(tasks: list[Task], algorithms: Iterable[str], config: ReplayConfig | None = None,
            defaults: Defaults | None = None, seed: int = 0,
            labels: dict[str, object] | None = None) -> pl.DataFrame:
    """One row per algorithm: waste per resource, efficiency, retries, makespan."""
    rows = []
    for name in algorithms:
        row: dict[str, object] = {**(labels or {}), "algorithm": name}
        row.update(summarise(run_one(tasks, name, config, defaults, seed)))
        rows.append(row)
    return pl.DataFrame(rows)
