"""Integration tasks: grid batching, task features and micro-task composition (HIP-DFPT §3).

Real-space DFPT integrations run over *batches* of grid points. Partitioned the way all-electron
codes do it (spatial cells, capped in size), batches are irregular: a few points in a sparse
outer cell, hundreds near a nucleus; a handful of significant basis functions at the edge of a
molecule, hundreds in its middle. HIP-DFPT's micro-task composition merges tiny neighbouring
batches and splits heavy ones so every task is large enough to occupy the device and small
enough to balance. The functions here are shared by the real runtime and the scale simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import ConfigError

#: branch ids of the integration kernel (see kernels.py / simulator.DeviceModel)
SPARSE, DENSE = 0, 1


@dataclass(frozen=True)
class TaskFeatures:
    """Per-task features the performance model and the balancers see (one row per task).

    ``key`` groups tasks that are spatial neighbours (the nearest atom), the only tasks
    composition may merge.
    """

    n_points: np.ndarray
    n_basis: np.ndarray
    n_atoms: np.ndarray
    branch: np.ndarray
    key: np.ndarray

    def __post_init__(self) -> None:
        sizes = {len(a) for a in (self.n_points, self.n_basis, self.n_atoms, self.branch,
                                  self.key)}
        if len(sizes) != 1:
            raise ConfigError(f"feature arrays differ in length: {sorted(sizes)}",
                              field="features")

    def __len__(self) -> int:
        return len(self.n_points)

    @property
    def parallelism(self) -> np.ndarray:
        """Independent (point, basis function) pairs: how many device lanes a task can fill."""
        return self.n_points.astype(float) * self.n_basis.astype(float)

    def take(self, index: np.ndarray) -> TaskFeatures:
        return TaskFeatures(self.n_points[index], self.n_basis[index], self.n_atoms[index],
                            self.branch[index], self.key[index])


def octree_batches(coords: np.ndarray, cell: float = 1.0, max_points: int = 128,
                   ) -> list[np.ndarray]:
    """Partition grid points into spatial batches: cubic cells of edge ``cell`` (Bohr), cells
    with more than ``max_points`` split by recursive bisection along their longest extent.

    Fixed cell boundaries give the irregular batch sizes all-electron codes see (1 to
    ``max_points`` points); batches are returned in cell order, so neighbours are adjacent.
    """
    if cell <= 0 or max_points < 1:
        raise ConfigError("cell must be > 0 and max_points >= 1", field="batching")
    keys = np.floor(coords / cell).astype(np.int64)
    keys -= keys.min(axis=0)
    span = keys.max(axis=0) + 1
    flat = (keys[:, 0] * span[1] + keys[:, 1]) * span[2] + keys[:, 2]
    order = np.argsort(flat, kind="stable")
    bounds = np.flatnonzero(np.diff(flat[order])) + 1
    batches: list[np.ndarray] = []
    for members in np.split(order, bounds):
        batches.extend(_bisect(coords, members, max_points))
    return batches


def _bisect(coords: np.ndarray, members: np.ndarray, max_points: int) -> list[np.ndarray]:
    if len(members) <= max_points:
        return [members]
    pts = coords[members]
    axis = int(np.argmax(pts.max(axis=0) - pts.min(axis=0)))
    order = members[np.argsort(pts[:, axis], kind="stable")]
    half = len(order) // 2
    return _bisect(coords, order[:half], max_points) + _bisect(coords, order[half:], max_points)


@dataclass(frozen=True)
class CompositionConfig:
    """Micro-task sizes in device lanes (point x basis-function pairs).

    A task below ``min_parallelism`` leaves the device idle, so it is merged with its spatial
    neighbours (same ``key``) up to ``max_merge`` batches; one above ``max_parallelism`` is too
    coarse to balance, so it is split by grid points.
    """

    min_parallelism: float
    max_parallelism: float
    max_merge: int = 16

    def __post_init__(self) -> None:
        if not 0 < self.min_parallelism < self.max_parallelism or self.max_merge < 1:
            raise ConfigError("need 0 < min_parallelism < max_parallelism and max_merge >= 1",
                              field="composition")


def plan_composition(features: TaskFeatures, config: CompositionConfig,
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous groups of tasks to merge (their start indices) and the parts to split each in.

    Greedy and order-preserving: walk the tasks, accumulate consecutive tasks with the same key
    while the group's parallelism stays below the minimum; a group (or single task) above the
    maximum is split into ``ceil(parallelism / max)`` parts. Group i holds tasks
    ``starts[i]:starts[i+1]``, so every task appears exactly once.
    """
    par = features.parallelism.tolist()  # plain lists: this loop runs over millions of tasks
    keys = features.key.tolist()
    low, high, most = config.min_parallelism, config.max_parallelism, config.max_merge
    starts, parts = [], []
    start, n = 0, len(par)
    while start < n:
        end, total = start + 1, par[start]
        while end < n and keys[end] == keys[start] and total < low and end - start < most:
            total += par[end]
            end += 1
        starts.append(start)
        parts.append(max(1, -int(-total // high)))
        start = end
    return np.array(starts, dtype=np.int64), np.array(parts, dtype=np.int64)


def split_points(points: np.ndarray, parts: int) -> list[np.ndarray]:
    """Split one batch's point indices into ``parts`` near-equal contiguous pieces."""
    parts = max(1, min(parts, len(points)))
    return [p for p in np.array_split(points, parts) if len(p)]


def compose_batches(batches: list[np.ndarray], features: TaskFeatures,
                    config: CompositionConfig) -> list[np.ndarray]:
    """Apply :func:`plan_composition` to real point batches: merged, then split, point lists."""
    starts, parts = plan_composition(features, config)
    ends = np.append(starts[1:], len(batches))
    composed: list[np.ndarray] = []
    for start, end, k in zip(starts, ends, parts, strict=True):
        composed.extend(split_points(np.concatenate(batches[start:end]), int(k)))
    return composed


def cost_distribution(costs: np.ndarray) -> dict[str, float]:
    """Summary of a task-cost distribution: count, mean, CV, max/mean and the p50/p99 ratio."""
    costs = np.asarray(costs, dtype=float)
    mean = float(costs.mean())
    return dict(tasks=float(len(costs)), mean=mean, cv=float(costs.std() / mean),
                max_over_mean=float(costs.max() / mean),
                p99_over_p50=float(np.percentile(costs, 99) / np.percentile(costs, 50)),
                small_fraction=float(np.mean(costs < 0.1 * mean)))
