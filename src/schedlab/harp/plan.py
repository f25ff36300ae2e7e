"""A schedule as plain data: stages of items on unit pools, with dataflow dependencies.

A scheduling policy (HARP's hybrid schedule or a baseline) decides granularity, execution mode,
parallelism and priority and writes them down as a :class:`Plan`. The discrete-event simulator
and the analytical estimator both read only the plan, so neither knows which policy made it.

A stage is one operator; its items partition the token rows ``[0, tokens)`` (``bounds``). An
item of rows [lo, hi) takes ``fixed + per_row*(hi-lo) + growth*sum_{t=lo}^{hi-1}(t+1)`` ns on
one server of its pool. Dependencies on a producer stage follow the workload's patterns
(``rows``/``all``/``prefix``, see :mod:`schedlab.harp.workloads`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from schedlab.core.errors import ConfigError

Pattern = Literal["rows", "all", "prefix"]
Order = Literal["token-first", "stage-first"]


@dataclass(frozen=True)
class Dep:
    """Items of this stage wait on ``stage`` (an earlier index) by ``pattern``."""

    stage: int
    pattern: Pattern


@dataclass
class Stage:
    """One operator's work, cut into items that each run on one server of ``pool``."""

    name: str
    kind: str  # static | dynamic | nonlinear
    pool: str
    bounds: np.ndarray  # int64, items + 1 row boundaries from 0 to tokens
    fixed: float
    per_row: float
    growth: float = 0.0
    deps: tuple[Dep, ...] = ()
    priority: float = 0.0  # lower runs first among ready items of a pool
    max_inflight: int = 0  # 0 = no limit beyond the pool; 1 = one item at a time
    mode: str = ""  # analog | vector | data-parallel (reported, not interpreted)

    @property
    def items(self) -> int:
        return len(self.bounds) - 1

    def durations(self) -> np.ndarray:
        lo, hi = self.bounds[:-1].astype(float), self.bounds[1:].astype(float)
        tri = (hi * (hi + 1) - lo * (lo + 1)) / 2
        return self.fixed + self.per_row * (hi - lo) + self.growth * tri


@dataclass
class Plan:
    """Stages in topological order, pool capacities, and the ready-queue order."""

    policy: str
    tokens: int
    stages: list[Stage]
    pools: dict[str, int]
    order: Order = "token-first"
    meta: dict[str, float] = field(default_factory=dict)

    def validate(self) -> Plan:
        """Check the invariants both engines rely on; a policy bug fails here, loudly."""
        checked: set[int] = set()
        for index, stage in enumerate(self.stages):
            b = stage.bounds
            if id(b) not in checked and (
                    b[0] != 0 or b[-1] != self.tokens or np.any(np.diff(b) <= 0)):
                raise ConfigError(f"stage {stage.name} items do not partition the rows",
                                  field="bounds")
            checked.add(id(b))
            if stage.pool not in self.pools or self.pools[stage.pool] < 1:
                raise ConfigError(f"stage {stage.name} uses unknown pool {stage.pool}",
                                  field="pool")
            for dep in stage.deps:
                if not 0 <= dep.stage < index:
                    raise ConfigError(f"stage {stage.name} depends on a later stage",
                                      field="deps")
        return self


@functools.lru_cache(maxsize=256)
def even_bounds(tokens: int, items: int) -> np.ndarray:
    """Rows split into ``items`` contiguous near-equal chunks (at most one per row).

    Cached and read-only: every stage of a model shares a handful of these arrays, and building
    them was a third of the time to plan BERT-base.
    """
    items = max(1, min(items, tokens))
    bounds = np.linspace(0, tokens, items + 1).round().astype(np.int64)
    bounds.setflags(write=False)
    return bounds
