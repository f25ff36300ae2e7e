"""Ray actors as DFPT devices: each holds the task store and runs its share of a plan.

Kept apart from runtime.py so Ray is imported only when ``--executor ray`` is asked for. The
task data goes into Ray's object store once and every actor maps it, as each GPU of the paper
holds its batches' data for all DFPT iterations.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedlab.hip_dfpt.kernels import StoredTask
from schedlab.hip_dfpt.policies import Plan


class DeviceActor:
    """One device: its streams' buffer pools persist across iterations, like GPU memory."""

    def __init__(
        self, tasks: list[StoredTask], streams: int, pooled: bool, deterministic: bool = True
    ) -> None:
        from schedlab.hip_dfpt.devicerun import device_allocators

        self.tasks, self.streams, self.deterministic = tasks, streams, deterministic
        self.allocs = device_allocators(1, streams, pooled, np)

    def run(self, plan: Plan, dms: np.ndarray, seed: int) -> Any:
        from schedlab.hip_dfpt.devicerun import run_devices

        return run_devices(
            self.tasks, plan, dms, self.streams, self.allocs, np, seed, self.deterministic
        )[0]


def start_actors(
    ray: Any,
    tasks: list[StoredTask],
    devices: int,
    streams: int,
    pooled: bool,
    deterministic: bool = True,
) -> list[Any]:
    remote = ray.remote(num_cpus=1)(DeviceActor)
    shared = ray.put(tasks)
    return [remote.remote(shared, streams, pooled, deterministic) for _ in range(devices)]
