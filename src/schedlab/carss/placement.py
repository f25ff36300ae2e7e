"""Placement building blocks shared by the heuristic schedulers and the co-simulator.

CARSS (paper 07) and its COSCO/GOBI lineage decide, at each interval, a host for every waiting
task and optionally migrations of running ones. These helpers turn a per-host scoring rule into a
RAM-feasible placement vector (one host per task, -1 = leave as is) for
:meth:`schedlab.carss.simulator.Cluster.apply`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numba import njit

from schedlab.carss.simulator import Cluster

#: score(projected cpu load fraction, projected ram fraction, demand fraction per host) -> lower
#: is better; infeasible hosts (RAM) are masked out before the score is consulted.
Score = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def least_loaded(load: np.ndarray, ram: np.ndarray, need: np.ndarray) -> np.ndarray:
    """Spread: the host whose CPU load after placement is lowest."""
    return load + need


def best_fit(load: np.ndarray, ram: np.ndarray, need: np.ndarray) -> np.ndarray:
    """Pack: the host left with the least spare CPU that still fits; overflow is penalised."""
    spare = 1.0 - (load + need)
    return np.where(spare >= 0, spare, 10.0 - spare)


class Consolidate:
    """Energy-aware first fit: the most power-efficient host (MIPS per peak watt) under ``cap``."""

    def __init__(self, efficiency: np.ndarray, cap: float = 0.85) -> None:
        self.rank = np.argsort(np.argsort(-efficiency)).astype(float)
        self.cap = cap

    def __call__(self, load: np.ndarray, ram: np.ndarray, need: np.ndarray) -> np.ndarray:
        over = (load + need) > self.cap
        return np.where(over, 1e3 + load + need, self.rank)


def make_consolidate(efficiency: np.ndarray, cap: float = 0.85) -> Score:
    return Consolidate(efficiency, cap)


@njit(cache=True)
def _greedy_kernel(
    kind: int,
    waiting: np.ndarray,
    load: np.ndarray,
    ram: np.ndarray,
    ram_cap: np.ndarray,
    task_ram: np.ndarray,
    demand: np.ndarray,
    cpu: np.ndarray,
    rank: np.ndarray,
    cap: float,
) -> np.ndarray:
    """The three built-in scores compiled: 0 least-loaded, 1 best-fit, 2 consolidate.
    Same rules and tie-breaking (first minimum) as the NumPy path."""
    out = np.full(waiting.size, -1, dtype=np.int64)
    for k in range(waiting.size):
        i = waiting[k]
        best, best_h = np.inf, -1
        for h in range(load.size):
            if ram[h] + task_ram[i] > ram_cap[h]:
                continue
            after = load[h] + demand[i] / cpu[h]
            if kind == 0:
                score = after
            elif kind == 1:
                spare = 1.0 - after
                score = spare if spare >= 0 else 10.0 - spare
            else:
                score = 1e3 + after if after > cap else rank[h]
            if score < best:
                best, best_h = score, h
        if best_h >= 0:
            out[k] = best_h
            load[best_h] += demand[i] / cpu[best_h]
            ram[best_h] += task_ram[i]
    return out


def greedy(cluster: Cluster, score: Score, order: np.ndarray | None = None) -> np.ndarray:
    """Place waiting tasks one by one (arrival order by default) on the best-scoring host that
    has RAM for them; tasks that fit nowhere stay waiting (-1)."""
    hosts, tk = cluster.hosts, cluster.tasks
    placement = np.full(len(tk), -1, dtype=np.int64)
    waiting = np.flatnonzero(tk.host < 0) if order is None else order
    if waiting.size == 0:
        return placement
    load = cluster.host_load().copy()
    ram = cluster.ram_used().copy()
    demand = cluster.demand()
    kind = KERNELS.get(score) if not isinstance(score, Consolidate) else 2
    if kind is not None:
        rank, cap = (score.rank, score.cap) if isinstance(score, Consolidate) else (load, 0.0)
        placement[waiting] = _greedy_kernel(
            kind,
            waiting.astype(np.int64),
            load,
            ram,
            hosts.ram,
            tk.ram,
            demand,
            hosts.cpu,
            rank,
            cap,
        )
        return placement
    for i in waiting:
        fits = ram + tk.ram[i] <= hosts.ram
        if not fits.any():
            continue
        need = demand[i] / hosts.cpu
        scores = np.where(fits, score(load, ram / hosts.ram, need), np.inf)
        h = int(np.argmin(scores))
        placement[i] = h
        load[h] += need[h]
        ram[h] += tk.ram[i]
    return placement


KERNELS: dict[Callable, int] = {least_loaded: 0, best_fit: 1}


class WakeAware:
    """Least-loaded over awake hosts; a sleeping host is woken only when every awake host
    with room would be loaded above 100 % (wake on demand)."""

    def __init__(self, asleep: np.ndarray) -> None:
        self.penalty = np.where(asleep, 1.0, 0.0)

    def __call__(self, load: np.ndarray, ram: np.ndarray, need: np.ndarray) -> np.ndarray:
        return load + need + self.penalty


def spread(cluster: Cluster, order: np.ndarray | None = None) -> np.ndarray:
    """Least-loaded placement that respects sleeping hosts (plain least-loaded if none)."""
    if not cluster.asleep.any():
        return greedy(cluster, least_loaded, order)
    return greedy(cluster, WakeAware(cluster.asleep), order)


def rebalance(
    cluster: Cluster, placement: np.ndarray, threshold: float = 1.0, max_moves: int = 4
) -> np.ndarray:
    """Add migrations: from hosts loaded above ``threshold`` move their smallest-RAM running
    task (cheapest to migrate) to the least-loaded host that has room."""
    hosts, tk = cluster.hosts, cluster.tasks
    out = placement.copy()
    target = np.where(out >= 0, out, tk.host)
    demand = cluster.demand()
    placed = target >= 0
    load = np.bincount(target[placed], demand[placed], hosts.n) / hosts.cpu
    ram = np.bincount(target[placed], tk.ram[placed], hosts.n)
    for _ in range(max_moves):
        src = int(np.argmax(load))
        if load[src] <= threshold:
            break
        movable = np.flatnonzero((tk.host == src) & (target == src))
        if movable.size == 0:
            break
        i = movable[np.argmin(tk.ram[movable])]
        fits = (ram + tk.ram[i] <= hosts.ram) & (np.arange(hosts.n) != src)
        if not fits.any():
            break
        dst = int(np.argmin(np.where(fits, load + demand[i] / hosts.cpu, np.inf)))
        if load[dst] + demand[i] / hosts.cpu[dst] >= load[src]:
            break
        out[i], target[i] = dst, dst
        load[src] -= demand[i] / hosts.cpu[src]
        load[dst] += demand[i] / hosts.cpu[dst]
        ram[src] -= tk.ram[i]
        ram[dst] += tk.ram[i]
    return out


def efficiency(cluster: Cluster) -> np.ndarray:
    """MIPS per watt at full load: the energy-aware ranking of hosts."""
    return cluster.hosts.cpu / cluster.hosts.power_table[:, -1]
