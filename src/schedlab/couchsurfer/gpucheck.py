"""The real co-location measurement behind the Job Fusion Mechanism model (needs a GPU).

Two PyTorch training loops share one device: a *host* on a high-priority CUDA stream with an
idle gap after each step (standing in for data loading and communication, the gaps JFM fills)
and a *surfer* on a low-priority stream whose duty cycle JFM throttles. We time each alone and
both together and report the host's slowdown and the surfer's rate; :func:`.fusion.fit_params`
turns a few such pairs into the model's ``slice_ms`` and ``bandwidth``. On a CPU (no streams)
the same code runs so tests can check it end to end; its numbers say nothing about GPUs.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from schedlab.core.errors import ConfigError, MissingDependencyError


def _torch() -> Any:
    try:
        import torch
    except ModuleNotFoundError as exc:  # pragma: no cover - torch is installed in CI
        raise MissingDependencyError("the GPU check needs PyTorch",
                                     hint="pip install -e '.[torch]'") from exc
    return torch


def _loop(torch: Any, device: str, width: int, steps: int, gap_s: float, priority: int,
          duty: float = 1.0) -> float:
    """Train a small MLP for ``steps`` steps; return wall seconds (stream of ``priority``)."""
    gen = torch.Generator(device="cpu").manual_seed(width)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, width, generator=gen).to(device)
    use_cuda = device.startswith("cuda")
    stream = torch.cuda.Stream(device=device, priority=priority) if use_cuda else None
    start = time.perf_counter()
    for _ in range(steps):
        step_start = time.perf_counter()
        if stream is not None:
            with torch.cuda.stream(stream):
                loss = model(x).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
            stream.synchronize()
        else:
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        busy = time.perf_counter() - step_start
        idle = gap_s + (busy * (1.0 / duty - 1.0) if duty < 1.0 else 0.0)
        if idle > 0:
            time.sleep(idle)
    return time.perf_counter() - start


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


def measure_pair(device: str = "cuda", steps: int = 200, host_width: int = 4096,
                 surfer_width: int = 2048, host_gap_ms: float = 5.0,
                 surfer_duty: float = 1.0) -> dict[str, float]:
    """Host and surfer alone, then together; returns slowdowns, rates and utilisation.

    host_util is the host's busy share alone (its step time without the gap over its loop
    time); occupancy estimates the surfer's GPU share while co-located.
    """
    torch = _torch()
    _check_device(torch, device)
    low, high = (torch.cuda.Stream.priority_range() if device.startswith("cuda") else (0, 0))
    gap = host_gap_ms / 1000.0
    _loop(torch, device, host_width, 5, 0.0, high)  # warm-up: allocator, kernels, clocks
    host_alone = _loop(torch, device, host_width, steps, gap, high)
    surfer_alone = _loop(torch, device, surfer_width, steps, 0.0, low, surfer_duty)
    result: dict[str, float] = {}

    def run(key: str, *args: Any) -> None:
        result[key] = _loop(torch, device, *args)

    threads = [threading.Thread(target=run, args=("host", host_width, steps, gap, high)),
               threading.Thread(target=run, args=("surfer", surfer_width, steps, 0.0, low,
                                                  surfer_duty))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    host_util = max(0.0, 1.0 - steps * gap / host_alone)
    surfer_rate = surfer_alone / result["surfer"]
    return dict(device=device, host_alone_s=host_alone, surfer_alone_s=surfer_alone,
                host_together_s=result["host"], surfer_together_s=result["surfer"],
                host_slowdown=result["host"] / host_alone - 1.0, surfer_rate=surfer_rate,
                host_util=host_util, occupancy=min(1.0, surfer_rate * surfer_duty),
                surfer_duty=surfer_duty)


def sweep(device: str = "cuda", steps: int = 200,
          duties: tuple[float, ...] = (0.25, 0.5, 1.0)) -> list[dict[str, float]]:
    """measure_pair at several surfer duty cycles: the samples fit_params needs."""
    return [measure_pair(device=device, steps=steps, surfer_duty=d) for d in duties]
