"""The real co-location measurement behind the Job Fusion Mechanism model (needs a GPU).

Two *separate processes* (spawned, each with its own CUDA context, as two jobs on one GPU
are) train a small MLP each: a *host* with an idle gap after every step (data loading,
communication: the gaps JFM fills) and a *surfer* with a duty cycle. Each is timed alone and
both together, once at equal priority (plain sharing: what Lucid measured) and once with the
host on a high-priority CUDA stream and the surfer on a low-priority one (JFM's mechanism).
The ratio of the host's slowdowns is the model's ``priority_residual``
(:func:`.fusion.fit_params`).

Across processes, kernels only run concurrently (and stream priorities only matter) under
CUDA MPS; without it the GPU time-slices between contexts. Each row records whether an MPS
control pipe was visible. ``benchmarks/couchsurfer/gpu_check.py`` is the script to run on a
GPU machine. On a CPU the same code runs (tests check it end to end); its numbers say nothing
about GPUs.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

from schedlab.core.errors import ConfigError, MissingDependencyError


def _torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:  # pragma: no cover - torch is installed in CI
        raise MissingDependencyError("the GPU check needs PyTorch",
                                     hint="pip install -e '.[torch]'") from exc
    return torch


def _check_device(torch: Any, device: str) -> None:
    """Only ``cpu``, ``cuda`` and ``cuda:N`` (N a visible device); anything else is named."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise ConfigError(f"unknown device '{device}'; valid: cpu, cuda, cuda:N", field="device")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise MissingDependencyError("no CUDA device is visible", hint="use --device cpu")
        if index and int(index) >= torch.cuda.device_count():
            raise ConfigError(f"no device {device}; {torch.cuda.device_count()} visible",
                              field="device")


def mps_active() -> bool:
    """Whether a CUDA MPS control daemon's pipe is visible to this process."""
    pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
    return (pipe / "control").exists()


def _worker(conn: Any, barrier: Any, device: str, width: int) -> None:  # pragma: no cover
    """A training process: waits for (steps, gap_s, priority, duty, together) and runs."""
    torch = _torch()
    torch.set_num_threads(1)
    gen = torch.Generator(device="cpu").manual_seed(width)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, width, generator=gen).to(device)
    cuda = device.startswith("cuda")
    streams: dict[int, Any] = {}

    def step(stream: Any) -> None:
        if stream is None:
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return
        with torch.cuda.stream(stream):
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        stream.synchronize()

    conn.send("ready")
    while True:
        cmd = conn.recv()
        if cmd is None:
            return
        steps, gap_s, priority, duty, together = cmd
        stream = None
        if cuda:
            stream = streams.get(priority)
            if stream is None:
                stream = streams[priority] = torch.cuda.Stream(device=device, priority=priority)
        step(stream)  # warm-up: allocator, kernels, clocks
        if together:
            barrier.wait()
        start = time.perf_counter()
        for _ in range(steps):
            t0 = time.perf_counter()
            step(stream)
            busy = time.perf_counter() - t0
            idle = gap_s + (busy * (1.0 / duty - 1.0) if duty < 1.0 else 0.0)
            if idle > 0:
                time.sleep(idle)
        conn.send(time.perf_counter() - start)


class _Pair:
    """Two persistent worker processes (host, surfer) on one device."""

    def __init__(self, device: str, host_width: int, surfer_width: int) -> None:
        ctx = mp.get_context("spawn")
        self.barrier = ctx.Barrier(2)
        self.conns, self.procs = [], []
        for width in (host_width, surfer_width):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, self.barrier, device, width),
                               daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)
        for conn in self.conns:
            if not conn.poll(300) or conn.recv() != "ready":
                self.close()
                raise MissingDependencyError("a GPU-check worker process did not start")

    def alone(self, who: int, *cmd: Any) -> float:
        self.conns[who].send((*cmd, False))
        return float(self.conns[who].recv())

    def together(self, host_cmd: tuple, surfer_cmd: tuple) -> tuple[float, float]:
        self.conns[0].send((*host_cmd, True))
        self.conns[1].send((*surfer_cmd, True))
        return float(self.conns[0].recv()), float(self.conns[1].recv())

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


def measure_pair(device: str = "cuda", steps: int = 200, host_width: int = 4096,
                 surfer_width: int = 2048, host_gap_ms: float = 5.0,
                 surfer_duty: float = 1.0, pair: _Pair | None = None) -> dict[str, Any]:
    """Host and surfer alone, then together at equal priority and with priorities."""
    torch = _torch()
    _check_device(torch, device)
    if steps < 1:
        raise ConfigError("must be at least 1", field="steps")
    if not 0 < surfer_duty <= 1:
        raise ConfigError("must be in (0, 1]", field="surfer_duty")
    high, low = 0, 0
    if device.startswith("cuda"):
        low, high = torch.cuda.Stream.priority_range()
    own = pair is None
    pair = pair or _Pair(device, host_width, surfer_width)
    gap = host_gap_ms / 1000.0
    try:
        host_alone = pair.alone(0, steps, gap, high, 1.0)
        surfer_alone = pair.alone(1, steps, 0.0, low, surfer_duty)
        eq_host, eq_surfer = pair.together((steps, gap, 0, 1.0), (steps, 0.0, 0, surfer_duty))
        pr_host, pr_surfer = pair.together((steps, gap, high, 1.0),
                                           (steps, 0.0, low, surfer_duty))
    finally:
        if own:
            pair.close()
    return dict(device=device, mps=mps_active(), steps=steps, surfer_duty=surfer_duty,
                host_alone_s=host_alone, surfer_alone_s=surfer_alone,
                host_equal_s=eq_host, surfer_equal_s=eq_surfer,
                host_priority_s=pr_host, surfer_priority_s=pr_surfer,
                equal_slowdown=eq_host / host_alone - 1.0,
                priority_slowdown=pr_host / host_alone - 1.0,
                surfer_equal_rate=surfer_alone / eq_surfer,
                surfer_priority_rate=surfer_alone / pr_surfer,
                host_util=max(0.0, 1.0 - steps * gap / host_alone))


def sweep(device: str = "cuda", steps: int = 200,
          duties: tuple[float, ...] = (0.25, 0.5, 1.0), host_width: int = 4096,
          surfer_width: int = 2048, host_gap_ms: float = 5.0) -> list[dict[str, Any]]:
    """measure_pair at several surfer duty cycles, reusing the two processes."""
    torch = _torch()
    _check_device(torch, device)
    pair = _Pair(device, host_width, surfer_width)
    try:
        return [measure_pair(device, steps, host_width, surfer_width, host_gap_ms, d, pair)
                for d in duties]
    finally:
        pair.close()
