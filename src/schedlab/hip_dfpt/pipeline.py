"""End-to-end DFPT on a real molecule: batches -> micro-tasks -> runtime -> polarisability.

One library call per CLI command: :func:`prepare` builds the ground state and both task sets
(raw batches and composed micro-tasks); :func:`run_polarizability` runs the CPHF cycle through
the runtime with any balancer and compares it with PySCF; :func:`replay_balance` evaluates a
plan on measured task costs (deterministic, unlike thread timings on a shared machine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.hip_dfpt.dft import (
    DFTSystem,
    TaskStore,
    build_store,
    coulomb_response,
    ground_state,
    polarizability,
    pyscf_response,
    pyscf_threads,
    reference_vxc,
)
from schedlab.hip_dfpt.policies import Plan, make_balancer
from schedlab.hip_dfpt.runtime import Runtime, time_tasks
from schedlab.hip_dfpt.simulator import DeviceModel, TaskCosts, simulate
from schedlab.hip_dfpt.tasks import (
    CompositionConfig,
    TaskFeatures,
    compose_batches,
    octree_batches,
)
from schedlab.hip_dfpt.workloads import Molecule

#: CPU micro-task sizes (point x basis pairs): below ~2,000 NumPy's per-call overhead dominates
CPU_COMPOSITION = CompositionConfig(min_parallelism=2_000, max_parallelism=20_000)
#: a micro-task below ~2,000 point x basis pairs costs little more than its per-call overhead
CPU_SMALLEST_MAX = 2_000
#: tasks each worker (device x stream) should get when sizes follow the device count: enough
#: that the last tasks of a device are a small share of its work
TASKS_PER_WORKER = 48
#: batching: 3-Bohr cells, at most 128 points per batch (all-electron codes use 100-200)
BATCH_CELL, BATCH_POINTS = 3.0, 128


def sized_composition(
    features: TaskFeatures, workers: int, per_worker: int = TASKS_PER_WORKER
) -> CompositionConfig:
    """Micro-task sizes chosen from the tasks per worker: the largest task is at most twice an
    even share of ``per_worker`` tasks per worker (device x stream), between the CPU floor
    (``CPU_SMALLEST_MAX``) and the fixed CPU ceiling; small molecules get smaller tasks, so
    each device still has enough of them to balance; large molecules keep the fixed sizes."""
    if workers < 1 or per_worker < 1:
        raise ConfigError("workers and tasks per worker must be at least 1", field="composition")
    share = float(features.parallelism.sum()) / (workers * per_worker)
    high = float(np.clip(2.0 * share, CPU_SMALLEST_MAX, CPU_COMPOSITION.max_parallelism))
    low = min(CPU_COMPOSITION.min_parallelism, high / 4.0)
    return CompositionConfig(min_parallelism=low, max_parallelism=high)


@dataclass
class Workload:
    system: DFTSystem
    raw: TaskStore
    composed: TaskStore
    vxc_error: float
    seconds: float


def prepare(
    molecule: Molecule,
    basis: str,
    grid_level: int = 1,
    xc: str = "lda,vwn",
    composition: CompositionConfig = CPU_COMPOSITION,
    cache_ao: bool = True,
    raw_store: bool = True,
    density_fit: bool | str = False,
    df_memory: int | None = None,
    workers: int | None = None,
    scf: str = "converged",
) -> Workload:
    """Ground state, raw batches and composed micro-tasks; checks the task data vs PySCF.

    ``cache_ao=False`` keeps no basis values (computed on the fly per task); ``raw_store=False``
    keeps only the raw batches' features, not their task data (a large molecule's memory);
    ``workers`` (devices x streams) sizes the micro-tasks from the tasks per worker
    (:func:`sized_composition`) instead of ``composition``; ``scf="guess"``: the
    core-Hamiltonian ground state (see :func:`ground_state`; memory and time studies only)."""
    start = time.perf_counter()
    system = ground_state(
        molecule, basis, xc, grid_level, density_fit=density_fit, df_memory=df_memory, scf=scf
    )
    batches = octree_batches(system.coords, BATCH_CELL, BATCH_POINTS)
    raw = build_store(system, batches, cache_ao, features_only=not raw_store)
    if workers is not None:
        composition = sized_composition(raw.features, workers)
    composed = build_store(system, compose_batches(batches, raw.features, composition), cache_ao)
    if not raw_store:  # only the raw batches' features were built: no density of their own
        raw = TaskStore([], raw.features, raw.nao, composed.electrons, composed.vxc, cache_ao)
    vxc_error = float(np.abs(composed.vxc - reference_vxc(system)).max())
    return Workload(system, raw, composed, vxc_error, time.perf_counter() - start)


@dataclass
class PolarizabilityRun:
    balancer: str
    alpha: np.ndarray
    reference: np.ndarray
    relative_error: float
    response_calls: int
    runtime: Runtime
    seconds: float

    def summary(self) -> dict[str, Any]:
        h = self.runtime.history
        return dict(
            balancer=self.balancer,
            relative_error=self.relative_error,
            alpha_iso=float(np.trace(self.alpha) / 3),
            reference_iso=float(np.trace(self.reference) / 3),
            response_calls=self.response_calls,
            mean_iteration_s=float(np.mean([x.wall for x in h])),
            live_balance=float(np.mean([x.balance for x in h])),
            live_wall_balance=float(np.mean([x.wall_balance for x in h])),
            live_cpu_balance=_mean_after_first([x.cpu_balance for x in h]),
            live_cpu_balance_first=float(h[0].cpu_balance) if h else float("nan"),
            overhead_fraction=float(np.nanmean([x.overhead_fraction for x in h]))
            if any(np.isfinite(x.overhead_fraction) for x in h)
            else float("nan"),
            pool_hit_rate=self.runtime.pool_stats.hit_rate,
            pool_allocations=self.runtime.pool_stats.allocations,
            steals=int(sum(x.steals for x in h)),
            seconds=self.seconds,
        )


def _mean_after_first(values: list[float]) -> float:
    """Mean over iterations 2.. (iteration 1 runs the model's plan; later ones may re-plan on
    the live times); the only iteration if there is one."""
    rest = values[1:] or values
    return float(np.mean(rest)) if rest else float("nan")


def reference_polarizability(system: DFTSystem) -> np.ndarray:
    with pyscf_threads():
        return polarizability(system, pyscf_response(system))[0]


def run_polarizability(
    work: Workload,
    balancer: str,
    reference: np.ndarray,
    devices: int,
    streams: int,
    backend: str = "local",
    seed: int = 0,
    pooled: bool = True,
    gpu: bool = False,
    replan: str = "model",
    deterministic: bool = True,
    throttle: dict | None = None,
) -> PolarizabilityRun:
    """The CPHF polarisability with every grid integration done by the runtime."""
    start = time.perf_counter()
    runtime = Runtime(
        work.composed,
        make_balancer(balancer),
        devices,
        streams,
        pooled=pooled,
        backend=backend,
        gpu=gpu,
        seed=seed,
        replan=replan,
        deterministic=deterministic,
        throttle=throttle,
    )
    coulomb = coulomb_response(work.system)
    try:
        alpha, calls = polarizability(work.system, lambda dm1: runtime.apply(dm1) + coulomb(dm1))
    finally:
        runtime.close()
    error = float(np.abs(alpha - reference).max() / np.abs(reference).max())
    return PolarizabilityRun(
        balancer, alpha, reference, error, calls, runtime, time.perf_counter() - start
    )


def measured_costs(store: TaskStore, seed: int = 0) -> np.ndarray:
    """Run-alone seconds of every task (min of two runs): the ground truth for evaluation."""
    return time_tasks(store.tasks, np.arange(len(store.tasks)), store.nao, seed=seed)


def replay_balance(plan: Plan, seconds: np.ndarray, streams: int, seed: int = 0) -> float:
    """max/mean device time of ``plan`` on measured task costs (a CPU device: S streams on S
    cores, no launch or migration cost), through the same dispatcher the runtime uses."""
    costs = TaskCosts(
        kernel=seconds,
        full=seconds / streams,
        migrate=np.zeros_like(seconds),
        occupancy=np.full(len(seconds), 1.0 / streams),
    )
    cpu = DeviceModel(launch_overhead=0.0, steal_latency=0.0)
    return simulate(plan, costs, streams, cpu, seed).balance
