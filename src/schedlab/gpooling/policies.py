"""Where a virtual device goes: gPooling's fragmentation-aware placement and its baselines.

gPooling (../shared/papers/14-gpooling.md) argues that coarse *device-level* allocation wastes
accelerators and fragments them. Every policy here answers the same question -- which devices,
and how much of each, for this request -- behind one protocol, so the simulator and the control
plane run any of them unchanged:

- ``frag-aware`` (gPooling's method): places a slice where it raises the pool's expected
  fragmentation least. Fragmentation is measured against the workload actually seen, as in
  Weng et al., "Beware of Fragmentation" (ATC'23, the paper behind the Alibaba GPU-sharing
  trace): a device's free compute counts as fragmented for a request type that no longer fits
  there, weighted by how often that type arrives.
- ``best-fit`` / ``first-fit`` / ``worst-fit``: the classic bin-packing heuristics on slices.
- ``whole-device``: device-level allocation; every request gets whole free devices.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from typing import Protocol

import numpy as np

from schedlab.core.registry import lookup
from schedlab.gpooling.state import FULL, ClusterState, Grant, Request


class PlacementPolicy(Protocol):
    """Chooses devices for a request; reads the state, never changes it."""

    name: str

    def place(self, request: Request, state: ClusterState) -> list[Grant] | None:
        """Grants for every slice of ``request``, or None when it does not fit now."""
        ...

    def observe(self, request: Request) -> None:
        """Learn from a request that arrived (placed or not)."""
        ...


def _pick(request: Request, scores: np.ndarray, mask: np.ndarray) -> list[Grant] | None:
    """The ``count`` feasible devices with the lowest score (ties: lowest index)."""
    candidates = np.flatnonzero(mask)
    if candidates.size < request.count:
        return None
    order = candidates[np.argsort(scores[candidates], kind="stable")[:request.count]]
    return [Grant(int(d), request.memory, request.milli) for d in order]


class _Scored:
    """Shared body of the slice policies: score feasible devices, take the lowest."""

    name = "scored"

    def score(self, request: Request, state: ClusterState) -> np.ndarray:
        raise NotImplementedError

    def place(self, request: Request, state: ClusterState) -> list[Grant] | None:
        mask = state.fits_now(request)
        if int(mask.sum()) < request.count:
            return None
        return _pick(request, self.score(request, state), mask)

    def observe(self, request: Request) -> None:
        return None


class FirstFit(_Scored):
    """The first device (inventory order) with room."""

    name = "first-fit"

    def score(self, request: Request, state: ClusterState) -> np.ndarray:
        return np.arange(len(state), dtype=float)


class BestFit(_Scored):
    """The device left with the least free compute (then memory): packs tightly."""

    name = "best-fit"

    def score(self, request: Request, state: ClusterState) -> np.ndarray:
        left_milli = (state.free_milli - request.milli) / FULL
        left_memory = (state.free_memory - request.memory) / state.total_memory
        return left_milli + 1e-3 * left_memory


class WorstFit(_Scored):
    """The device left with the most free compute: spreads load (Kubernetes' LeastAllocated)."""

    name = "worst-fit"

    def score(self, request: Request, state: ClusterState) -> np.ndarray:
        return -(state.free_milli - request.milli) / FULL


class WholeDevice:
    """Device-level allocation: whole idle devices, however small the request."""

    name = "whole-device"

    def place(self, request: Request, state: ClusterState) -> list[Grant] | None:
        idle = (state.eligible(request) & (state.free_milli == FULL)
                & (state.free_memory == state.total_memory))
        candidates = np.flatnonzero(idle)
        if candidates.size < request.count:
            return None
        return [Grant(int(d), int(state.total_memory[d]), FULL)
                for d in candidates[:request.count]]

    def observe(self, request: Request) -> None:
        return None


class FragAware:
    """gPooling: the slice that raises expected fragmentation least (ties: best fit).

    For request types t with arrival frequency p_t, a device with free (memory m, compute c) has
    fragmentation F(m, c) = c * sum_t p_t * [t does not fit in (m, c)]: the compute no typical
    request could use. Placing a slice moves the device from F(m, c) to F(m - r_m, c - r_c); the
    policy picks the device with the smallest increase. The mix is learned online from the last
    ``window`` requests, so it needs no knowledge of the trace ahead of time.
    """

    name = "frag-aware"

    def __init__(self, window: int = 2000, memory_bucket: int = 1 << 30) -> None:
        self.window = window
        self.memory_bucket = memory_bucket
        self._recent: deque[tuple[int, int]] = deque(maxlen=window)
        self._counts: Counter[tuple[int, int]] = Counter()
        self._types: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def observe(self, request: Request) -> None:
        # gangs of whole devices are treated like single whole-device requests for the mix
        key = (request.memory // self.memory_bucket * self.memory_bucket, request.milli)
        if len(self._recent) == self.window:
            old = self._recent[0]
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
        self._recent.append(key)
        self._counts[key] += 1
        self._types = None

    def _mix(self, request: Request) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if not self._counts:
            self.observe(request)  # no history yet: the request itself is the mix
        if self._types is None:
            keys = list(self._counts)
            total = sum(self._counts.values())
            self._types = (np.array([k[0] for k in keys], dtype=np.int64),
                           np.array([k[1] for k in keys], dtype=np.int64),
                           np.array([self._counts[k] / total for k in keys]))
        return self._types

    def fragmentation(self, free_memory: np.ndarray, free_milli: np.ndarray,
                      request: Request) -> np.ndarray:
        """F per device (in milli) for the learned request mix."""
        memory, milli, weight = self._mix(request)
        misfit = ((free_memory[:, None] < memory[None, :])
                  | (free_milli[:, None] < milli[None, :]))
        return free_milli * (misfit @ weight)

    def place(self, request: Request, state: ClusterState) -> list[Grant] | None:
        mask = state.fits_now(request)
        candidates = np.flatnonzero(mask)
        if candidates.size < request.count:
            return None
        free_m, free_c = state.free_memory[candidates], state.free_milli[candidates]
        before = self.fragmentation(free_m, free_c, request)
        after = self.fragmentation(free_m - request.memory, free_c - request.milli, request)
        left = (free_c - request.milli) / FULL
        scores = np.zeros(len(state))
        scores[candidates] = (after - before) / FULL + 1e-3 * left
        return _pick(request, scores, mask)


POLICIES: dict[str, Callable[[], PlacementPolicy]] = {
    "frag-aware": FragAware,
    "best-fit": BestFit,
    "first-fit": FirstFit,
    "worst-fit": WorstFit,
    "whole-device": WholeDevice,
}


def make_policy(name: str) -> PlacementPolicy:
    """A fresh policy by CLI name."""
    return lookup(POLICIES, "placement policy", name)()
