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
from schedlab.xbucket.types import RESOURCES, Defaults, Machine, Task


def run_one(tasks: list[Task], algorithm: str, config: ReplayConfig | None = None,
            defaults: Defaults | None = None, seed: int = 0) -> Replay:
    """Replay ``tasks`` under the allocator registered as ``algorithm``.

    The worker size is decided once (``config.machine`` or the trace's largest value of each
    type, see ``Machine.parse`` for the alternatives) and shared by the allocator (Whole
    Machine, retries at the max) and the engine (the cap).
    """
    config = config or ReplayConfig()
    machine = config.machine or Machine.trace_max(tasks)
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


def category_blind(tasks: list[Task], category: str = "all") -> list[Task]:
    """The same tasks with one category for all (as cctools' harness replays a trace)."""
    return [dataclasses.replace(t, category=category) for t in tasks]


def compare(tasks: list[Task], algorithms: Iterable[str], config: ReplayConfig | None = None,
            defaults: Defaults | None = None, seed: int = 0,
            labels: dict[str, object] | None = None, per_resource: bool = False,
            blind: bool = False) -> pl.DataFrame:
    """One row per algorithm: waste per resource, efficiency, retries, makespan.

    ``per_resource``: each resource is replayed alone (``ReplayConfig.only``) and its columns
    (waste, efficiency, retries_<type>) come from its own replay; ``makespan`` is the longest of
    the three. Otherwise one joint replay. ``blind`` merges every category into one first.
    The ``mode`` column says which (``joint`` / ``per-resource``).
    """
    config = config or ReplayConfig()
    if blind:
        tasks = category_blind(tasks)
    rows = []
    for name in algorithms:
        row: dict[str, object] = {**(labels or {}), "algorithm": name,
                                  "mode": "per-resource" if per_resource else "joint",
                                  "categories": "blind" if blind else "per-category"}
        if not per_resource:
            row.update(summarise(run_one(tasks, name, config, defaults, seed)))
            rows.append(row)
            continue
        merged: dict[str, float] = {}
        for resource in RESOURCES:
            single = summarise(run_one(tasks, name, dataclasses.replace(config, only=resource),
                                       defaults, seed))
            for key in ("waste", "efficiency", "task_efficiency"):
                merged[f"{key}_{resource}"] = single[f"{key}_{resource}"]
            merged[f"retries_{resource}"] = single["retries"]
            merged["tasks"] = single["tasks"]
            merged["makespan"] = max(merged.get("makespan", 0.0), single["makespan"])
        merged["retries"] = sum(merged[f"retries_{r}"] for r in RESOURCES)
        merged["attempts"] = merged["tasks"] + merged["retries"]
        finite = [merged[f"efficiency_{r}"] for r in RESOURCES
                  if merged[f"efficiency_{r}"] == merged[f"efficiency_{r}"]]
        merged["efficiency_mean"] = sum(finite) / len(finite) if finite else float("nan")
        row.update(merged)
        rows.append(row)
    return pl.DataFrame(rows)
