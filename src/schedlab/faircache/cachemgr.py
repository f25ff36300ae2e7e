"""Host-memory cache managers: FairCache's and every baseline, behind one ``CacheManager``.

The engine offers a block to the host tier when the GPU evicts it; the manager says whether to
keep it and which host copies to drop to make room. Blocks are charged to the tenant that last
used them when they were offered (``owner``).

* ``lru``        one global LRU list (SGLang HiCache / LMCache default).
* ``lfu``        least frequently used, ties by recency.
* ``static``     equal static partitions: each tenant may hold capacity/N blocks, LRU inside.
* ``isolated``   separate 1/N caches with no sharing between tenants (a tenant's blocks live in
                 its own namespace of the tree), the isolation baseline of FairRide.
* ``cost-aware`` LMCache-style value: EWMA of recompute tokens saved per second between
                 reuses, per byte, decayed by age; evict the lowest value.
* ``faircache``  FairCache: max-min fair shares of host memory by demand (re-referenced blocks
                 touched in the last ``window`` seconds), a reuse-value model (decayed reuse
                 frequency × recompute tokens saved / byte) that reclaims *cold* blocks from
                 any tenant, and otherwise evicts from the tenant furthest over its share.

Every priority queue keys blocks by a time-invariant number (``log value + t/τ``), so an
exponential age decay needs no re-keying and eviction stays O(log n) (lazy deletion).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.llm.plugins import CacheManager
from schedlab.llm.radix import Node

__all__ = ["CacheManager", "CostAware", "GlobalLRU", "Isolated", "LFU", "StaticPartition",
           "maxmin_shares", "recompute_tokens"]


def maxmin_shares(demands: np.ndarray, capacity: float) -> np.ndarray:
    """Max-min fair (water-filling) split of ``capacity`` over ``demands``.

    Each tenant gets min(demand, level) with the level chosen so the total is
    min(capacity, Σ demand): nobody below its demand could gain without taking from someone with
    less.
    """
    demands = np.maximum(np.asarray(demands, dtype=float), 0.0)
    n = demands.size
    if n == 0:
        return demands
    if demands.sum() <= capacity:
        return demands.copy()
    order = np.sort(demands)
    remaining, left = float(capacity), n
    level = 0.0
    for d in order:
        if d * left <= remaining:
            remaining -= d
            left -= 1
        else:
            level = remaining / left
            break
    return np.minimum(demands, level)


def recompute_tokens(node: Node, block_tokens: int, attn_ratio: float) -> float:
    """Prefill token units a block's loss would cost: linear part plus its attention share."""
    return block_tokens * (1.0 + attn_ratio * (2 * node.depth + 1) * block_tokens)


class _Base:
    """Capacity, owners and per-owner counts (plumbing shared by every manager)."""

    name = "base"

    def bind(
        self, capacity_blocks: int, n_tenants: int, block_tokens: int, attn_ratio: float
    ) -> None:
        if capacity_blocks < 0:
            raise ConfigError("host capacity must be >= 0", field="host_gb")
        self.capacity = capacity_blocks
        self.n = n_tenants
        self.block_tokens = block_tokens
        self.attn_ratio = attn_ratio
        self.used = 0
        self.owned = np.zeros(n_tenants, dtype=np.int64)

    def namespace(self, tenant: int) -> int:
        return 0

    def usage(self) -> np.ndarray:
        return self.owned.copy()

    def _take(self, node: Node) -> None:
        node.m_owner = node.last_user
        self.owned[node.m_owner] += 1
        self.used += 1

    def _release(self, node: Node) -> None:
        self.owned[node.m_owner] -= 1
        self.used -= 1

    def on_remove(self, node: Node) -> None:
        self._release(node)
        self._forget(node)

    def _forget(self, node: Node) -> None:
        return None


class GlobalLRU(_Base):
    name = "lru"

    def bind(self, *args, **kwargs) -> None:
        super().bind(*args, **kwargs)
        self.order: OrderedDict[int, Node] = OrderedDict()

    def on_access(self, path: list[Node], tenant: int, now: float) -> None:
        order = self.order
        for node in reversed(path):  # deepest first so ancestors are evicted last
            if node.host:
                order.move_to_end(node.uid)

    def admit(self, node: Node, now: float) -> list[Node] | None:
        if self.capacity == 0:
            return None
        victims = []
        while self.used >= self.capacity:
            _, victim = self.order.popitem(last=False)
            self._release(victim)
            victims.append(victim)
        self.order[node.uid] = node
        self._take(node)
        return victims

    def _forget(self, node: Node) -> None:
        self.order.pop(node.uid, None)


class _HeapManager(_Base):
    """Evict the block with the smallest ``m_key``; subclasses define the key."""

    def bind(self, *args, **kwargs) -> None:
        super().bind(*args, **kwargs)
        self.heap: list[tuple[float, int, int, Node]] = []

    def _key(self, node: Node, now: float) -> float:
        raise NotImplementedError

    def _update(self, node: Node, now: float) -> None:
        """Per-access statistics (kept for every block, resident on the host or not)."""
        node.m_count += 1

    def on_access(self, path: list[Node], tenant: int, now: float) -> None:
        for node in path:
            self._update(node, now)
            if node.host:
                self._push(node, now)

    def _push(self, node: Node, now: float) -> None:
        node.m_ver += 1
        node.m_key = self._key(node, now)
        heapq.heappush(self.heap, (node.m_key, node.m_ver, node.uid, node))
        if len(self.heap) > 4 * self.used + 64:  # drop stale entries now and then
            self.heap = [e for e in self.heap if self._valid(e)]
            heapq.heapify(self.heap)

    @staticmethod
    def _valid(entry: tuple[float, int, int, Node]) -> bool:
        node = entry[3]
        return node.host and node.alive and node.m_ver == entry[1]

    def _pop_min(self, heap: list) -> Node | None:
        while heap:
            entry = heapq.heappop(heap)
            if self._valid(entry):
                return entry[3]
        return None

    def admit(self, node: Node, now: float) -> list[Node] | None:
        if self.capacity == 0:
            return None
        victims = []
        while self.used >= self.capacity:
            victim = self._pop_min(self.heap)
            if victim is None:  # nothing evictable (cannot happen while used > 0)
                return None
            self._release(victim)
            victim.m_ver += 1
            victims.append(victim)
        node.host = True  # so _push sees it as resident; the engine sets it too
        self._take(node)
        self._push(node, now)
        return victims


class LFU(_HeapManager):
    name = "lfu"

    def _key(self, node: Node, now: float) -> float:
        return node.m_count + 1e-12 * node.last  # ties: least recent first


class CostAware(_HeapManager):
    """LMCache-style: EWMA of recompute tokens saved per second between reuses, age-decayed."""

    name = "cost-aware"

    def __init__(self, tau: float = 60.0, alpha: float = 0.3) -> None:
        self.tau, self.alpha = tau, alpha

    def _update(self, node: Node, now: float) -> None:
        gap = max(now - node.last, 1e-3) if node.m_count else self.tau
        rate = recompute_tokens(node, self.block_tokens, self.attn_ratio) / gap
        node.m_freq = (
            rate if node.m_count == 0 else (self.alpha * rate + (1 - self.alpha) * node.m_freq)
        )
        node.m_count += 1

    def _key(self, node: Node, now: float) -> float:
        return math.log(max(node.m_freq, 1e-300)) + now / self.tau


def _logaddexp(a: float, b: float) -> float:
    if a == -math.inf:
        return b
    high, low = (a, b) if a > b else (b, a)
    return high + math.log1p(math.exp(low - high))


class StaticPartition(_Base):
    """Each tenant owns capacity/N host blocks, LRU inside its partition, never more."""

    name = "static"

    def bind(self, *args, **kwargs) -> None:
        super().bind(*args, **kwargs)
        self.quota = self.capacity // self.n
        self.orders: list[OrderedDict[int, Node]] = [OrderedDict() for _ in range(self.n)]

    def on_access(self, path: list[Node], tenant: int, now: float) -> None:
        for node in reversed(path):
            if node.host:
                self.orders[node.m_owner].move_to_end(node.uid)

    def admit(self, node: Node, now: float) -> list[Node] | None:
        owner = node.last_user
        if self.quota == 0:
            return None
        victims = []
        order = self.orders[owner]
        while self.owned[owner] >= self.quota:
            _, victim = order.popitem(last=False)
            self._release(victim)
            victims.append(victim)
        self._take(node)
        order[node.uid] = node
        return victims

    def _forget(self, node: Node) -> None:
        self.orders[node.m_owner].pop(node.uid, None)


class Isolated(StaticPartition):
    """Separate 1/N caches: tenants never see each other's blocks (own tree namespace)."""

    name = "isolated"

    def namespace(self, tenant: int) -> int:
        return tenant + 1
