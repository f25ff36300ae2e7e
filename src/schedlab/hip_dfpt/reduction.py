"""Deterministic reductions: exact fixed-point accumulation of the per-task blocks.

Floating-point addition is not associative, so summing the same task contributions in another
order (another device count, another stream interleaving, a steal) changes the last bits of the
response potential. The runtime instead accumulates every task's block in two-word fixed point:
a value x becomes ``hi = floor(x 2^23)`` and ``lo = round(frac 2^52)`` (frac the remainder in
[0, 1)), both int64. Integer addition is exact, associative and commutative, so any partition of
the tasks over devices and streams, summed in any order, gives the same integers, and one final
conversion gives bit-identical doubles. Range: |sum| < 2^40; resolution 2^-75 (~2.6e-23)
absolute, finer than a double's ulp for every value above ~1e-7, so the result is the exactly
rounded sum of the blocks to well below PySCF's own rounding. ``lo`` carries into ``hi`` every
1,024 additions, long before an int64 could overflow (each ``lo`` < 2^52).

This is the fixed-point device reduction GPU MD codes use for reproducible forces; here it also
makes a 1x1 run and a 2x2 run (or a 4-process run) give identical polarisabilities.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError

HI_BITS = 23
LO_BITS = 52
_HI_SCALE = float(2**HI_BITS)
_LO_SCALE = float(2**LO_BITS)
_LO_MASK = (1 << LO_BITS) - 1
_LIMIT = float(2**62)
CARRY_EVERY = 1024


class FixedPoint:
    """An exact accumulator for (n, nao, nao) blocks; ``hi``/``lo`` may live in shared memory."""

    def __init__(self, shape: tuple[int, ...], xp: Any = np, hi: Any = None, lo: Any = None):
        self.xp = xp
        self.hi = xp.zeros(shape, dtype=np.int64) if hi is None else hi
        self.lo = xp.zeros(shape, dtype=np.int64) if lo is None else lo
        self.pending = 0
        self.peak = None if xp is np else xp.zeros((), dtype=np.float64)  # GPU: checked late

    def zero(self) -> None:
        self.hi[...] = 0
        self.lo[...] = 0
        self.pending = 0

    def split(self, block: Any) -> tuple[Any, Any]:
        """The two int64 words of every element of ``block`` (float64)."""
        xp = self.xp
        v = block * _HI_SCALE
        h = xp.floor(v)
        if self.peak is None:
            if not float(xp.abs(h).max(initial=0.0)) < _LIMIT:
                _out_of_range()
        elif h.size:  # on a GPU a host check would synchronise every task: keep it on device
            self.peak = xp.maximum(self.peak, xp.abs(h).max())
        v -= h
        v *= _LO_SCALE
        return h.astype(np.int64), xp.rint(v).astype(np.int64)

    def add_block(self, block: Any, idx: Any = None) -> None:
        """hi/lo[:, idx, idx] += the words of ``block`` (all elements when ``idx`` is None)."""
        hi, lo = self.split(block)
        if idx is None:
            self.hi += hi
            self.lo += lo
        else:
            sel = (slice(None), idx[:, None], idx)
            self.hi[sel] += hi
            self.lo[sel] += lo
        self.pending += 1
        if self.pending >= CARRY_EVERY:
            self.carry()

    def carry(self) -> None:
        carry = self.lo >> LO_BITS
        self.hi += carry
        self.lo &= _LO_MASK
        self.pending = 0

    def merge(self, other: FixedPoint) -> FixedPoint:
        """self += other, leaving ``other`` untouched (it may be a read-only view): its ``lo``
        holds fewer than 1,025 uncarried words, so the sum cannot overflow int64."""
        self.carry()
        if self.peak is not None and other.peak is not None:
            self.peak = self.xp.maximum(self.peak, other.peak)
        self.hi += other.hi
        self.lo += other.lo
        self.carry()
        return self

    def value(self) -> Any:
        """The accumulated sum as float64 (one rounding, the same for every partition)."""
        if self.peak is not None and not float(self.peak) < _LIMIT:
            _out_of_range()
        self.carry()
        return self.hi * (1.0 / _HI_SCALE) + self.lo * (1.0 / (_HI_SCALE * _LO_SCALE))


def _out_of_range() -> None:
    raise ConfigError(
        "response block outside the fixed-point range (|x| >= 2^39) or not finite", field="dms"
    )


def reduce_exact(parts: list[FixedPoint]) -> Any:
    """Sum accumulators exactly (any order gives the same integers) and convert once."""
    total = FixedPoint(parts[0].hi.shape, parts[0].xp)
    for part in parts:
        total.merge(part)
    return total.value()
