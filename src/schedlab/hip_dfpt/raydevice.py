"""Ray actors as DFPT devices: each holds the task store and runs its share of a plan.

Kept apart from runtime.py so Ray is imported only when ``--executor ray`` is asked for. The
task data goes into Ray's object store once and every actor maps it, as each GPU of the paper
holds its batches' data for all DFPT iterations. With basis values computed on the fly, an
actor receives the molecule and the grid and evaluates each task's basis values itself. On a
cluster (``RAY_ADDRESS`` set, see ``benchmarks/hip_dfpt/ray_cluster.py``) the actors are
spread over the nodes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from schedlab.hip_dfpt.dft import TaskStore
from schedlab.hip_dfpt.kernels import AoSource, StoredTask
from schedlab.hip_dfpt.policies import Plan


class DeviceActor:
    """One device: its streams' buffer pools persist across iterations, like GPU memory."""

    def __init__(
        self,
        tasks: list[StoredTask],
        streams: int,
        pooled: bool,
        deterministic: bool = True,
        mol_dump: str | None = None,
        coords: np.ndarray | None = None,
    ) -> None:
        from schedlab.hip_dfpt.devicerun import device_allocators, single_threaded_blas

        self.tasks, self.streams, self.deterministic = tasks, streams, deterministic
        self.allocs = device_allocators(1, streams, pooled, np)
        self.source = None
        if mol_dump is not None:
            from pyscf import gto

            gga = bool(tasks and tasks[0].gga)
            self.source = AoSource(gto.loads(mol_dump), np.asarray(coords), gga)
        self._blas = single_threaded_blas()  # one BLAS thread per device, as on processes
        self._blas.__enter__()

    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def time_sample(self, ids: np.ndarray, dms: np.ndarray, repeats: int) -> np.ndarray:
        from schedlab.hip_dfpt.kernels import response_task
        from schedlab.hip_dfpt.memory import BufferPool

        out, pool = np.zeros_like(dms), BufferPool(np)
        seconds = np.empty(len(ids))
        for k, task in enumerate(np.asarray(ids).tolist()):
            best = np.inf
            for _ in range(repeats):
                c0 = time.thread_time()
                response_task(self.tasks[task], dms, out, pool, np, self.source)
                best = min(best, time.thread_time() - c0)
            seconds[k] = best
        return seconds

    def run(self, plan: Plan, dms: np.ndarray, seed: int) -> Any:
        from schedlab.hip_dfpt.devicerun import run_devices

        cpu0 = time.process_time()
        result = run_devices(
            self.tasks,
            plan,
            dms,
            self.streams,
            self.allocs,
            np,
            seed,
            self.deterministic,
            self.source,
        )[0]
        # the actor's CPU outside its tasks (dispatch, merging partials, Ray's own threads)
        result.overhead_cpu = time.process_time() - cpu0 - sum(result.task_cpu.values())
        return result


def start_actors(
    ray: Any,
    store: TaskStore,
    devices: int,
    streams: int,
    pooled: bool,
    deterministic: bool = True,
    spread: bool = False,
) -> list[Any]:
    options: dict[str, Any] = dict(num_cpus=1)
    if spread:
        options["scheduling_strategy"] = "SPREAD"
    remote = ray.remote(**options)(DeviceActor)
    shared = ray.put(store.tasks)
    mol_dump = coords = None
    if not store.cached:
        source = store.ao_source
        mol_dump, coords = source.mol.dumps(), ray.put(source.coords)  # type: ignore[union-attr]
    return [
        remote.remote(shared, streams, pooled, deterministic, mol_dump, coords)
        for _ in range(devices)
    ]
