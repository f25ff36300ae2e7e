"""Queueing delay at cloudlets: M/G/c waiting times, and a FIFO simulator that checks them.

Without queueing a plan that fills a cloudlet to its compute capacity looks as fast as an idle
one. Each cloudlet is modelled as c identical GPUs (c = its GPU count) serving a FIFO queue fed by
the Poisson streams of the users routed to it; a request needs ``tflop / gpu_tflops`` seconds of
one GPU, with the squared coefficient of variation (SCV) of its class's service time (measured
from the Alibaba GenAI trace when it is given, else 1: exponential).

* c = 1: the Pollaczek-Khinchine formula, exact for M/G/1: ``Wq = λ E[S²] / (2 (1 - ρ))``.
* c > 1: the Allen-Cunneen approximation, ``Wq ≈ C(c, a) / (c μ - λ) · (1 + SCV) / 2`` with
  Erlang's C probability of waiting; exact for M/M/c (SCV = 1). ``simulate_fifo`` measures the
  same quantity on a sampled stream; the tests hold the formula to the simulation.

The planners (ILP, rounding, coalition mechanism, baselines) do not see this delay: the engine
adds it when it evaluates a plan (``evaluate(..., queueing=True)``), so it is a yardstick none of
the methods optimises.
"""

from __future__ import annotations

import heapq

import numpy as np

from schedlab.core.errors import BadInputError


def erlang_c(servers: int, offered: float) -> float:
    """Probability that an arrival waits in M/M/c with ``offered`` = λ/μ Erlangs (< c)."""
    if servers < 1:
        raise BadInputError("needs at least one server", field="servers")
    if offered >= servers:
        return 1.0
    if offered <= 0:
        return 0.0
    term = 1.0  # Erlang B by the stable recursion, then C from B
    for k in range(1, servers + 1):
        term = offered * term / (k + offered * term)
    blocking = term
    rho = offered / servers
    return blocking / (1 - rho + rho * blocking)


def mgc_wait(rate: float, mean_s: float, scv: float, servers: int) -> float:
    """Mean wait in queue (s) of M/G/c: P-K for c = 1, Allen-Cunneen above; inf if ρ >= 1."""
    if rate < 0 or mean_s < 0 or scv < 0:
        raise BadInputError("rate, service time and SCV must be non-negative", field="rate")
    if rate == 0 or mean_s == 0:
        return 0.0
    offered = rate * mean_s
    if offered >= servers:
        return float("inf")
    mu = 1.0 / mean_s
    return erlang_c(servers, offered) / (servers * mu - rate) * (1.0 + scv) / 2.0


def cloudlet_waits(rate: np.ndarray, service_s: np.ndarray, scv: np.ndarray,
                   node: np.ndarray, servers: np.ndarray) -> np.ndarray:
    """Mean queueing wait per cloudlet for streams (rate, service time, SCV) routed to ``node``.

    Streams with different service times are merged into one class with the mixture's first two
    moments: E[S] = Σλ s / Σλ, E[S²] = Σλ s² (1 + SCV) / Σλ.
    """
    n = servers.size
    lam = np.bincount(node, rate, n)
    first = np.bincount(node, rate * service_s, n)
    second = np.bincount(node, rate * service_s ** 2 * (1.0 + scv), n)
    wait = np.zeros(n)
    for k in np.nonzero(lam > 0)[0]:
        mean = first[k] / lam[k]
        mix_scv = max(second[k] / lam[k] / mean ** 2 - 1.0, 0.0)
        wait[k] = mgc_wait(float(lam[k]), mean, mix_scv, int(servers[k]))
    return wait


def simulate_fifo(arrivals: np.ndarray, service: np.ndarray, servers: int) -> np.ndarray:
    """Wait of each job in a FIFO queue with ``servers`` identical servers (sorted arrivals)."""
    free = [0.0] * servers  # min-heap of the times each server becomes free
    wait = np.empty(arrivals.size)
    for i, (t, s) in enumerate(zip(arrivals.tolist(), service.tolist(), strict=True)):
        start = max(t, heapq.heappop(free))
        wait[i] = start - t
        heapq.heappush(free, start + s)
    return wait


def sample_service(mean_s: float, scv: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Gamma service times with the given mean and SCV (SCV 0: deterministic)."""
    if scv <= 0:
        return np.full(size, mean_s)
    shape = 1.0 / scv
    return rng.gamma(shape, mean_s / shape, size)
