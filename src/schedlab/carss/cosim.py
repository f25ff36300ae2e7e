"""Co-simulation: predict the QoS of a scheduling decision under sampled future arrivals.

CARSS (paper 07): "co-simulation ... simulating, at runtime, the Quality of Service (QoS)
resulting from scheduling actions". For each candidate decision the co-simulator copies the live
cluster, applies the decision, and runs the same engine forward over ``horizon`` intervals, once
per arrival path sampled from a forecaster. Future tasks are bootstrapped from recently arrived
ones and placed with least-loaded, so only the candidate decision differs between candidates.
Common random numbers (the same arrival paths and sampled tasks for every candidate) keep the
comparison between candidates low-variance. With :class:`StaticReplay` as the forecaster this is
the static-arrival co-simulator the paper improves on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from schedlab.carss.forecast import Forecaster
from schedlab.carss.placement import spread
from schedlab.carss.simulator import (
    Cluster,
    Decision,
    IntervalStats,
    Tasks,
    Weights,
    objective,
)
from schedlab.core.errors import BadInputError


class TaskPool:
    """The last ``capacity`` arrived tasks; the co-simulator's model of future task sizes."""

    def __init__(self, capacity: int = 400) -> None:
        self.capacity = capacity
        self.pool: Tasks | None = None
        self.largest = 0  # the largest batch seen: bounds what the co-simulator will replay

    def add(self, batch: Tasks) -> None:
        self.largest = max(self.largest, len(batch))
        if len(batch) == 0:
            return
        fresh = batch.copy()
        self.pool = fresh if self.pool is None else self.pool.concat(fresh)
        if len(self.pool) > self.capacity:
            self.pool = self.pool.take(np.arange(len(self.pool) - self.capacity, len(self.pool)))

    def sample(self, n: int, arrival: float, rng: np.random.Generator) -> Tasks:
        """``n`` tasks drawn with replacement, fresh (nothing done) and arriving at ``arrival``."""
        if self.pool is None or n <= 0:
            return Tasks.empty()
        batch = self.pool.take(rng.integers(0, len(self.pool), int(n))).copy()
        batch.tid = -1 - np.arange(len(batch))
        batch.arrival[:] = arrival
        batch.done[:] = 0.0
        batch.host[:] = -1
        batch.mig_s[:] = 0.0
        batch.late[:] = False
        return batch


@dataclass(frozen=True)
class QoSPrediction:
    """Predicted QoS over the horizon: means and standard deviations across arrival samples."""

    objective: float
    objective_std: float
    energy_j: float
    avg_response_s: float
    response_std_s: float
    sla_rate: float
    sla_std: float
    migrations: int


def horizon_metrics(stats: list[IntervalStats]) -> tuple[float, float, float]:
    """(energy, average response time of completed tasks, SLA-violation rate) of a horizon."""
    completed = sum(s.completed for s in stats)
    energy = sum(s.energy_j for s in stats)
    if completed == 0:
        return energy, 0.0, 0.0
    return (
        energy,
        sum(s.response_sum_s for s in stats) / completed,
        sum(s.violations for s in stats) / completed,
    )


class CoSimulator:
    """Runs the cluster forward under a forecaster's sampled arrivals to score decisions."""

    def __init__(
        self,
        forecaster: Forecaster,
        pool: TaskPool,
        horizon: int = 4,
        samples: int = 3,
        weights: Weights = Weights(),
        terminal: bool = False,
    ) -> None:
        self.terminal = terminal  # add the tasks projected to miss their SLA at horizon end
        if horizon < 1 or samples < 1:
            raise BadInputError("horizon and samples must be >= 1", field="cosim")
        self.forecaster, self.pool = forecaster, pool
        self.horizon, self.samples, self.weights = horizon, samples, weights

    def scenarios(self, cluster: Cluster, rng: np.random.Generator) -> list[list[Tasks]]:
        """Sampled future arrivals: per sample path, the task batch of each later interval."""
        ahead = self.horizon - 1
        if ahead == 0:
            return [[] for _ in range(self.samples)]
        # a wide log-space forecast can sample absurd bursts; no path may exceed 4x the largest
        # batch seen, which keeps one decision's cost bounded
        cap = 4 * max(self.pool.largest, 1)
        paths = np.minimum(self.forecaster.predict(ahead).sample(self.samples, rng), cap)
        return [
            [
                self.pool.sample(int(paths[k, h]), cluster.now + (h + 1) * cluster.interval_s, rng)
                for h in range(ahead)
            ]
            for k in range(self.samples)
        ]

    def rollout(
        self, cluster: Cluster, placement: np.ndarray | Decision, future: list[Tasks]
    ) -> list[IntervalStats]:
        """One what-if run: apply the decision now, then least-loaded for later arrivals
        (waking sleeping hosts only on demand). Trace demand is held at its current value."""
        twin = cluster.copy(freeze=True)
        moved, refused = twin.apply_decision(placement)
        stats = [twin.step(moved, refused)]
        for batch in future:
            twin.admit(batch.copy())
            moved, refused = twin.apply(spread(twin))
            stats.append(twin.step(moved, refused))
        if self.terminal:
            last = stats[-1]
            stats[-1] = replace(last, newly_late=last.newly_late + twin.projected_late())
        return stats

    def evaluate(
        self, cluster: Cluster, candidates: list[np.ndarray], rng: np.random.Generator
    ) -> list[QoSPrediction]:
        """Predicted QoS of every candidate under the same sampled scenarios."""
        scenarios = self.scenarios(cluster, rng)
        return [
            self._summarise(cluster, [self.rollout(cluster, c, f) for f in scenarios])
            for c in candidates
        ]

    def _summarise(self, cluster: Cluster, runs: list[list[IntervalStats]]) -> QoSPrediction:
        hosts, dt = cluster.hosts, cluster.interval_s
        objs = np.array([sum(objective(s, hosts, dt, self.weights) for s in run) for run in runs])
        metrics = np.array([horizon_metrics(run) for run in runs])
        return QoSPrediction(
            objective=float(objs.mean()),
            objective_std=float(objs.std()),
            energy_j=float(metrics[:, 0].mean()),
            avg_response_s=float(metrics[:, 1].mean()),
            response_std_s=float(metrics[:, 1].std()),
            sla_rate=float(metrics[:, 2].mean()),
            sla_std=float(metrics[:, 2].std()),
            migrations=runs[0][0].migrations,
        )
