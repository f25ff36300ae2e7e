"""Decision-time measurements: a scheduler pick vs tenants, a host eviction vs cached blocks.

Used by the ``overhead`` experiment and by the benchmarks; timing lives here, never in tests.
"""

from __future__ import annotations

import time

import numpy as np

from schedlab.faircache.managers import make_manager
from schedlab.faircache.policies import AdmitUsage, make_scheduler
from schedlab.llm.accounting import CostWeights
from schedlab.llm.radix import Node
from schedlab.llm.requests import Request


class _View:
    """A stand-in engine for driving a scheduler on its own (what a real engine provides)."""

    def __init__(self, n_tenants: int) -> None:
        self.n_tenants = n_tenants
        self.weights = CostWeights()

    def cached_tokens(self, req: Request) -> int:
        return 0


def backlogged_scheduler(name: str, tenants: int, per_tenant: int = 4, seed: int = 0):
    """A scheduler with ``tenants`` backlogged tenants and random counters."""
    rng = np.random.default_rng(seed)
    sched = make_scheduler(name)
    sched.bind(_View(tenants))
    rid = 0
    for t in range(tenants):
        for _ in range(per_tenant):
            sched.on_arrival(Request(rid, t, 0.0, 256, 256, ()), 0.0)
            rid += 1
    for t in rng.permutation(tenants)[: tenants // 2]:
        cost = int(rng.integers(1, 500))
        sched.on_admit(Request(-1, int(t), 0.0, 1, 1, ()), AdmitUsage(int(t), cost))
    return sched


def time_pick(name: str, tenants: int, repeats: int = 2000) -> float:
    """Mean seconds of one pick + unpick with ``tenants`` backlogged tenants."""
    sched = backlogged_scheduler(name, tenants)
    start = time.perf_counter()
    for _ in range(repeats):
        req = sched.pick(0.0)
        sched.unpick(req)
    return (time.perf_counter() - start) / repeats


def full_manager(name: str, blocks: int, tenants: int = 16, seed: int = 0):
    """A host manager holding ``blocks`` blocks (capacity reached), plus a node factory."""
    rng = np.random.default_rng(seed)
    mgr = make_manager(name)
    mgr.bind(blocks, tenants, 16, 1e-5)
    root = Node(None, None, 0, -1)
    counter = iter(range(1, 1 << 62))

    def new_node(now: float) -> Node:
        uid = next(counter)
        node = Node(uid, root, uid, int(rng.integers(0, 64)))
        node.last_user = int(rng.integers(tenants))
        node.last = now
        mgr.on_access([node], node.last_user, now)
        return node

    for i in range(blocks):
        node = new_node(i * 1e-3)
        mgr.admit(node, i * 1e-3)
        node.host = True
    return mgr, new_node


def time_eviction(name: str, blocks: int, repeats: int = 2000) -> float:
    """Mean seconds of one admission that has to evict, with ``blocks`` blocks cached."""
    mgr, new_node = full_manager(name, blocks)
    now = blocks * 1e-3
    nodes = [new_node(now) for _ in range(repeats)]
    start = time.perf_counter()
    for node in nodes:
        victims = mgr.admit(node, now)
        node.host = victims is not None
        for v in victims or ():
            v.host = False
    return (time.perf_counter() - start) / repeats
