"""Pooled device buffers for batch integrations (HIP-DFPT's GPU memory management).

Every integration task needs scratch arrays whose shapes change from task to task (points x
basis functions). Allocating and freeing them per task costs a ``hipMalloc``/``cudaMalloc`` (and
a device synchronisation) each time, thousands of times per DFPT iteration. The pool keeps
freed blocks in power-of-two size classes and hands them back as views of the requested shape,
so after the first iteration every request is a hit. It works over any array module with
``empty`` (NumPy here, CuPy on a GPU).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass
class PoolStats:
    requests: int = 0
    hits: int = 0
    allocations: int = 0
    bytes_allocated: int = 0
    peak_in_use: int = 0

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0


class Allocator(Protocol):
    """What a kernel asks for scratch memory; ``release`` returns what ``acquire`` gave."""

    stats: PoolStats

    def acquire(self, shape: tuple[int, ...]) -> Any: ...

    def release(self, array: Any) -> None: ...


def _size_class(nbytes: int) -> int:
    return 1 << max(8, int(nbytes - 1).bit_length())


class BufferPool:
    """Size-classed free lists of flat float64 blocks; ``acquire`` returns a shaped view.

    One pool per device, shared by its streams (hence the lock), as a GPU's memory is.
    """

    def __init__(self, xp: Any = np) -> None:
        self.xp = xp
        self._lock = threading.Lock()
        self.stats = PoolStats()
        self._free: dict[int, list[Any]] = defaultdict(list)
        self._owner: dict[int, Any] = {}  # id(view) -> backing block
        self._in_use = 0

    def acquire(self, shape: tuple[int, ...]) -> Any:
        count = int(np.prod(shape))
        size = _size_class(max(count, 1) * 8)
        with self._lock:
            self.stats.requests += 1
            free = self._free[size]
            block = free.pop() if free else None
            if block is None:
                self.stats.allocations += 1
                self.stats.bytes_allocated += size
            else:
                self.stats.hits += 1
            self._in_use += size
            self.stats.peak_in_use = max(self.stats.peak_in_use, self._in_use)
        if block is None:
            block = self.xp.empty(size // 8, dtype=np.float64)
        view = block[:count].reshape(shape)
        with self._lock:
            self._owner[id(view)] = block
        return view

    def release(self, array: Any) -> None:
        with self._lock:
            block = self._owner.pop(id(array))
            size = block.size * 8
            self._in_use -= size
            self._free[size].append(block)


class NoPool:
    """The baseline: a fresh allocation per request, freed by the garbage collector."""

    def __init__(self, xp: Any = np) -> None:
        self.xp = xp
        self.stats = PoolStats()

    def acquire(self, shape: tuple[int, ...]) -> Any:
        self.stats.requests += 1
        self.stats.allocations += 1
        self.stats.bytes_allocated += int(np.prod(shape)) * 8
        return self.xp.empty(shape, dtype=np.float64)

    def release(self, array: Any) -> None:
        return None


def merge_stats(stats: list[PoolStats]) -> PoolStats:
    total = PoolStats()
    for s in stats:
        total.requests += s.requests
        total.hits += s.hits
        total.allocations += s.allocations
        total.bytes_allocated += s.bytes_allocated
        total.peak_in_use += s.peak_in_use
    return total
