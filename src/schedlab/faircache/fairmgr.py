"""FairCache's host-memory manager: max-min fair shares plus reuse-value reclamation of cold data.

Why both: static partitions isolate tenants but leave memory idle when a tenant's demand is below
its 1/N (and keep low-reuse data of streaming tenants); a global policy uses all memory but lets a
heavy tenant push everyone else out. Max-min shares over *demand* give every tenant at least
min(demand, C/N) (isolation) and hand unused share to others (Pareto efficiency); the reuse-value
model then lets the manager take back *cold* blocks from anyone, inside shares too, because a
block nobody will reuse is not demand.

Demand of a tenant = its distinct re-referenced blocks (accessed at least twice) touched within
the last ``window`` seconds. Reuse value of a block = decayed reuse frequency
Σ_a exp(-(now - t_a)/τ) × recompute tokens saved (linear + attention share). A block is cold when
its value falls below ``cold`` × block_tokens (it has not been touched for a few τ).

Victim order when the host tier is full: (1) the globally coldest block if it is cold; (2) the
lowest-value block among tenants above their share; (3) the incoming tenant's own
lowest-value block, unless that is worth more than the incoming block (then the offer is
declined). Every step is a heap operation, so a decision is O(log n) amortised.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict

import numpy as np

from schedlab.faircache.cachemgr import _HeapManager, _logaddexp, maxmin_shares, recompute_tokens
from schedlab.llm.radix import Node


class FairCacheManager(_HeapManager):
    name = "faircache"

    def __init__(
        self, tau: float = 10.0, window: float = 120.0, cold: float = 0.05, refresh: float = 1.0
    ) -> None:
        self.tau, self.window, self.cold, self.refresh = tau, window, cold, refresh

    def bind(self, *args, **kwargs) -> None:
        super().bind(*args, **kwargs)
        self.heaps: list[list[tuple[float, int, int, Node]]] = [[] for _ in range(self.n)]
        self.recent: list[OrderedDict[int, float]] = [OrderedDict() for _ in range(self.n)]
        self.shares = np.full(self.n, self.capacity / max(self.n, 1))
        self.next_refresh = 0.0
        self._log_cold = math.log(self.cold * self.block_tokens)

    # --- statistics ---------------------------------------------------------------------------
    def _update(self, node: Node, now: float) -> None:
        node.m_freq = (
            now / self.tau if node.m_count == 0 else _logaddexp(node.m_freq, now / self.tau)
        )
        node.m_count += 1

    def _key(self, node: Node, now: float) -> float:
        return node.m_freq + math.log(recompute_tokens(node, self.block_tokens, self.attn_ratio))

    def on_access(self, path: list[Node], tenant: int, now: float) -> None:
        recent = self.recent[tenant]
        for node in path:
            self._update(node, now)
            if node.m_count >= 2:
                recent[node.uid] = now
                recent.move_to_end(node.uid)
            if node.host:
                self._push(node, now)
        if now >= self.next_refresh:
            self.refresh_shares(now)

    def refresh_shares(self, now: float) -> None:
        """Expire old demand and recompute the max-min shares (water-filling, O(N log N))."""
        horizon = now - self.window
        for recent in self.recent:
            while recent:
                uid, stamp = next(iter(recent.items()))
                if stamp >= horizon:
                    break
                recent.popitem(last=False)
        self.demand = np.fromiter((len(r) for r in self.recent), dtype=float, count=self.n)
        self.shares = maxmin_shares(self.demand, self.capacity)
        self.next_refresh = now + self.refresh

    # --- heaps --------------------------------------------------------------------------------
    def _push(self, node: Node, now: float) -> None:
        node.m_ver += 1
        node.m_key = self._key(node, now)
        entry = (node.m_key, node.m_ver, node.uid, node)
        heapq.heappush(self.heap, entry)
        heap = self.heaps[node.m_owner]
        heapq.heappush(heap, entry)
        if len(self.heap) > 4 * self.used + 64:
            self.heap = [e for e in self.heap if self._valid(e)]
            heapq.heapify(self.heap)
            for i, h in enumerate(self.heaps):
                self.heaps[i] = [e for e in h if self._valid(e)]
                heapq.heapify(self.heaps[i])

    def _peek(self, heap: list) -> Node | None:
        while heap and not self._valid(heap[0]):
            heapq.heappop(heap)
        return heap[0][3] if heap else None

    def _is_cold(self, node: Node, now: float) -> bool:
        return node.m_key - now / self.tau < self._log_cold

    # --- decisions ----------------------------------------------------------------------------
    def _victim(self, owner: int, incoming_key: float, now: float) -> Node | None:
        coldest = self._peek(self.heap)
        if coldest is not None and self._is_cold(coldest, now):
            return coldest
        over = np.flatnonzero(self.owned > self.shares)
        best: Node | None = None
        for tenant in over:  # the lowest-value block among tenants above their share
            candidate = self._peek(self.heaps[tenant])
            if candidate is not None and (best is None or candidate.m_key < best.m_key):
                best = candidate
        if best is not None:
            return best
        own = self._peek(self.heaps[owner])
        if own is None:
            return coldest
        return own if own.m_key <= incoming_key else None

    def admit(self, node: Node, now: float) -> list[Node] | None:
        if self.capacity == 0:
            return None
        if now >= self.next_refresh:
            self.refresh_shares(now)
        node.m_owner = node.last_user
        incoming = self._key(node, now)
        victims: list[Node] = []
        while self.used >= self.capacity:
            victim = self._victim(node.last_user, incoming, now)
            if victim is None:
                return victims if victims else None
            self._release(victim)
            victim.m_ver += 1
            victims.append(victim)
        node.host = True
        self._take(node)
        self._push(node, now)
        return victims
