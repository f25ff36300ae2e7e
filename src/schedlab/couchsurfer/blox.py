"""A Blox-style plug-in API: the same policy objects drive the simulator and a real resource
manager (Agarwal et al., "Blox: A Modular Toolkit for Deep Learning Schedulers", EuroSys'24:
one scheduling loop, pluggable policy / placement / cluster back end).

The interface a policy sees is the simulator's, unchanged: ``schedule(now, state) -> Decision``
where ``state`` is a :class:`.engine.Simulator` used as the cluster *mirror* (its
``ClusterState`` arrays, ``waiting``/``running`` dicts, ``fusion``, ``truth``) and
``Decision`` lists preemptions, placements (job, GPUs, role, co-location mode) and a wake-up.
A back end implements :class:`ResourceManager` (``now``, ``launch``, ``stop``, ``finished``,
``close``). :class:`LiveDriver` runs Blox's round: collect finished jobs from the back end,
admit arrivals, ask the policy, check the decision against the mirror (the simulator's own
invariant checks), then stop and launch real jobs for every placement that changed
(preemptions, evictions by a host, migrations included).

:class:`RayManager` runs each job as a real Ray task (a separate worker process) on a local
Ray instance (or ``address``): the process is given its GPUs in ``CUDA_VISIBLE_DEVICES`` and
works for ``remaining / rate`` seconds (x ``time_scale``), the rate being the co-location rate
at launch. Limits: a running process's speed is not changed when a co-tenant arrives or
leaves (its length is fixed at launch); the work loop is a timed stand-in for training.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

from schedlab.core.errors import ConfigError
from schedlab.couchsurfer.engine import Scheduler, Simulator
from schedlab.couchsurfer.jobs import ClusterSpec, Job
from schedlab.couchsurfer.runner import SimReport, job_frame, summarize


class ResourceManager(Protocol):
    """A real cluster back end; times are in the jobs' seconds."""

    def now(self) -> float: ...

    def launch(self, job: Job, gpus: tuple[int, ...], seconds: float) -> None: ...

    def stop(self, jid: int) -> None: ...

    def finished(self) -> list[int]: ...

    def close(self) -> None: ...


def _train(jid: int, gpus: tuple[int, ...], seconds: float) -> dict[str, Any]:
    """The job's process: claim its GPUs, work for ``seconds``, report who ran it."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        time.sleep(min(0.02, max(0.0, end - time.monotonic())))
    return dict(jid=jid, pid=os.getpid(), visible=os.environ["CUDA_VISIBLE_DEVICES"],
                seconds=time.monotonic() - start)


class RayManager:
    """Jobs as real Ray tasks (worker processes) on a local or given Ray cluster."""

    def __init__(self, address: str | None = None, num_cpus: int = 2,
                 time_scale: float = 1.0) -> None:
        if not time_scale > 0:
            raise ConfigError("must be positive", field="time_scale")
        import ray

        self._ray = ray
        self._owned = not ray.is_initialized()
        if self._owned:
            ray.init(address=address, num_cpus=None if address else num_cpus,
                     include_dashboard=False, log_to_driver=False)
        self._task = ray.remote(num_cpus=0, max_retries=0)(_train)
        self.scale = time_scale
        self._t0 = time.monotonic()
        self._refs: dict[int, Any] = {}
        self.records: list[dict[str, Any]] = []

    def now(self) -> float:
        return (time.monotonic() - self._t0) / self.scale

    def launch(self, job: Job, gpus: tuple[int, ...], seconds: float) -> None:
        self._refs[job.jid] = self._task.remote(job.jid, tuple(gpus), seconds * self.scale)

    def stop(self, jid: int) -> None:
        ref = self._refs.pop(jid, None)
        if ref is not None:
            self._ray.cancel(ref, force=True)

    def finished(self) -> list[int]:
        if not self._refs:
            return []
        refs = list(self._refs.values())
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        done = []
        for ref in ready:
            record = self._ray.get(ref)
            self.records.append(record)
            done.append(int(record["jid"]))
            self._refs.pop(int(record["jid"]), None)
        return done

    def close(self) -> None:
        for jid in list(self._refs):
            self.stop(jid)
        if self._owned:
            self._ray.shutdown()


class LiveDriver:
    """Blox's loop: the policy decides on the mirror; the back end runs the jobs for real."""

    def __init__(self, policy: Scheduler, manager: ResourceManager, cluster: ClusterSpec,
                 poll_s: float = 0.05) -> None:
        self.policy, self.manager, self.cluster, self.poll_s = policy, manager, cluster, poll_s

    def run(self, jobs: Sequence[Job], timeout_s: float = 600.0) -> SimReport:
        c = self.cluster
        sim = Simulator(list(jobs), self.policy, nodes=c.nodes, gpus_per_node=c.width,
                        node_gpus=c.node_gpus, node_memory=c.node_memory)
        arrivals, i = sim.arrivals, 0
        deadline = time.monotonic() + timeout_s
        while i < len(arrivals) or sim.running or sim.waiting:
            if time.monotonic() > deadline:
                raise ConfigError(f"live run did not finish in {timeout_s} s", field="timeout_s")
            now = max(sim.now, self.manager.now())
            sim.now = now
            freed = False
            for jid in self.manager.finished():
                job = sim.jobs[jid]
                if job.running:
                    sim._complete(job)
                    freed = True
            while i < len(arrivals) and arrivals[i].arrival <= now:
                sim._enqueue(arrivals[i])
                i += 1
            if sim.waiting or (freed and sim._has_secondaries()):
                before = {j.jid: j.gpus for j in sim.running.values()}
                sim.apply(self.policy.schedule(now, sim))
                for jid, gpus in before.items():
                    job = sim.jobs[jid]
                    if not job.running or job.gpus != gpus:
                        self.manager.stop(jid)
                for job in list(sim.running.values()):
                    if before.get(job.jid) != job.gpus:
                        seconds = job.remaining / max(job.rate, 1e-6)
                        self.manager.launch(job, job.gpus, seconds if math.isfinite(seconds)
                                            else job.remaining)
            time.sleep(self.poll_s)
        frame = job_frame(sim)
        return SimReport(frame, summarize(sim, frame))
