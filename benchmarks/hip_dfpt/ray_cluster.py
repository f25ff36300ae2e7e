"""The runtime over a Ray cluster: a head and several worker nodes on 127.0.0.1.

Run: ``python benchmarks/hip_dfpt/ray_cluster.py [--nodes 4] [--molecule ethane] [--basis 6-31g]
[--xc pbe] [--out result.json]``. It starts its own cluster (``ray start --head --num-cpus 0``
and ``--nodes`` times ``ray start --address ... --num-cpus 1``, each a separate raylet, object
store and set of ports, as separate machines would have; every one with ``--block`` in its own
process group, so the script stops exactly the processes it started — never ``ray stop``, which
would stop other users' Ray processes on a shared machine), then with ``RAY_ADDRESS`` set runs
the CPHF polarisability on ``--nodes`` Ray actors (one per node: ``SPREAD``), basis values on
the fly, ``replan="adaptive"`` (each actor times the 5% sample; plan refitted per iteration;
no stealing across nodes). Reported: the nodes the actors landed on, per-iteration CPU-time
balance (actor thread CPU of its tasks, max/mean), the overhead (actor CPU outside its tasks
over task CPU, and iteration wall time over the slowest device's busy time), the same run on
the in-process and the process backends for comparison, and whether the polarisability is
bit-identical to the 1 device x 1 stream in-process run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import numpy as np


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], log: str) -> subprocess.Popen:
    with open(log, "w") as handle:
        return subprocess.Popen(
            [
                "ray",
                "start",
                "--block",
                "--disable-usage-stats",
                "--node-ip-address=127.0.0.1",
                *args,
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stopped by id at the end
        )


def ports() -> list[str]:
    """Ports of one node chosen free now (several nodes share one machine here)."""
    return [
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
    ]


def summary(run, hist) -> dict:
    bal = [h.cpu_balance for h in hist]
    return dict(
        cpu_balance=bal,
        first=bal[0],
        later_mean=float(np.mean(bal[1:])),
        overhead_cpu=float(np.nanmean([h.overhead_fraction for h in hist])),
        wall_over_busiest=float(np.mean([h.wall / h.device_busy.max() for h in hist])),
        mean_iteration_s=float(np.mean([h.wall for h in hist])),
        relative_error=run.relative_error,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--molecule", default="ethane")
    parser.add_argument("--basis", default="6-31g")
    parser.add_argument("--xc", default="pbe")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from schedlab.hip_dfpt.pipeline import prepare, reference_polarizability, run_polarizability
    from schedlab.hip_dfpt.workloads import load_molecule

    work = prepare(
        load_molecule(args.molecule), args.basis, 1, args.xc, cache_ao=False, workers=args.nodes
    )
    reference = reference_polarizability(work.system)
    one = run_polarizability(work, "hip-dfpt", reference, 1, 1)
    procs = run_polarizability(
        work, "hip-dfpt", reference, args.nodes, 1, backend="process", replan="adaptive"
    )

    temp = tempfile.mkdtemp(prefix="hipdfpt_ray_")
    # a private loopback cluster: no token (Ray 2.5x enables token authentication by default;
    # this script neither reads nor writes a token)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # on a loaded machine a node's agents take longer than Ray's default 15 s to come up
    os.environ.setdefault("RAY_agent_register_timeout_ms", "300000")
    port = free_port()
    nodes: list[subprocess.Popen] = []
    report: dict = dict(molecule=args.molecule, basis=args.basis, xc=args.xc, nodes=args.nodes)
    try:
        t0 = time.perf_counter()
        nodes.append(
            start(
                [
                    "--head",
                    "--num-cpus=0",
                    f"--port={port}",
                    "--include-dashboard=false",
                    f"--temp-dir={temp}",
                    f"--ray-client-server-port={free_port()}",
                    *ports(),
                ],
                f"{temp}/head.log",
            )
        )
        address = f"127.0.0.1:{port}"
        import ray

        os.environ["RAY_ADDRESS"] = address
        ray.init(address=address, log_to_driver=False, configure_logging=False)

        def alive() -> int:
            return len([n for n in ray.nodes() if n["Alive"]])

        # one node at a time, each retried: on a loaded machine a node whose agents start too
        # slowly exits (Ray waits ~15 s for them); starting them together makes that likely
        for k in range(args.nodes):
            for attempt in range(4):
                node = start(
                    [f"--address={address}", "--num-cpus=1", *ports()],
                    f"{temp}/node{k}.{attempt}.log",
                )
                nodes.append(node)
                deadline = time.monotonic() + 120
                while alive() < k + 2 and node.poll() is None and time.monotonic() < deadline:
                    time.sleep(1)
                if alive() >= k + 2:
                    break
        if ray.cluster_resources().get("CPU", 0) < args.nodes:
            raise SystemExit(f"only {ray.cluster_resources()} after retries")
        report["cluster_start_s"] = time.perf_counter() - t0
        report["ray_nodes"] = len([n for n in ray.nodes() if n["Alive"]])
        t1 = time.perf_counter()
        over_ray = run_polarizability(
            work, "hip-dfpt", reference, args.nodes, 1, backend="ray", replan="adaptive"
        )
        report["ray_run_s"] = time.perf_counter() - t1
        report["actor_nodes_distinct"] = len(set(over_ray.runtime._backend.nodes))
        report["ray"] = summary(over_ray, over_ray.runtime.history)
        report["ray"]["speeds_calibrated"] = over_ray.runtime.speed_history[0].tolist()
        report["ray"]["alpha_bit_identical_to_1x1"] = bool(
            np.array_equal(over_ray.alpha.view(np.int64), one.alpha.view(np.int64))
        )
        report["ray"]["max_abs_alpha_diff"] = float(np.abs(over_ray.alpha - one.alpha).max())
        ray.shutdown()
    finally:
        for node in reversed(nodes):  # the processes this script started, by process group
            try:
                os.killpg(node.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for node in reversed(nodes):
            try:
                node.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.pid, signal.SIGKILL)
    report["process_backend"] = summary(procs, procs.runtime.history)
    report["process_backend"]["alpha_bit_identical_to_1x1"] = bool(
        np.array_equal(procs.alpha.view(np.int64), one.alpha.view(np.int64))
    )
    report["micro_tasks"] = len(work.composed.tasks)
    report["load_average"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        from schedlab.core.io import write_text

        write_text(args.out, text + "\n")


if __name__ == "__main__":
    main()
