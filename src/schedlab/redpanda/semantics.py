"""What each RedPanda ALU function computes, bit-exactly as MLIR's arith dialect does.

Shared by the constant folder and the cycle simulator so both agree with xDSL's interpreter
(../shared/papers/08-redpanda.md: the simulator must reproduce the original kernel's results).
Division by zero yields 0 instead of trapping: a predicated (if-converted) division executes
even when its branch is not taken, and its result is then discarded.

Floating point (``f32``) travels through the graph, the memories and both simulators as its
IEEE-754 bit pattern, held as a signed 32-bit integer like an ``i32`` (so loads, stores,
steers, merges and selects need no change). The float functions (``addf`` ... ``fptosi``,
comparisons ``f<predicate>``) reinterpret those bits as ``numpy.float32`` and compute one
IEEE binary32 operation, rounded to nearest-even: exactly what gcc's ``float`` arithmetic does
with ``-ffp-contract=off`` and what xDSL's interpreter does (it rounds each result to f32).
IEEE 754 leaves the sign and payload of a NaN result open (x86 makes 0/0 a negative NaN,
Python a positive one), so every float function here returns the one canonical quiet NaN
(:data:`CANONICAL_NAN`, ``0x7fc00000``) for a NaN result, as the reference interpreter does;
NaNs that are only loaded, stored or selected keep their bits. ``fptosi`` truncates toward
zero; NaN or an out-of-range value (undefined in C, poison in MLIR: the reference interpreter
traps on it) gives 0 here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def wrap(value: int, bits: int) -> int:
    """Two's-complement wrap to ``bits`` (i1 stays 0/1)."""
    if bits == 1:
        return value & 1
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _unsigned(value: int, bits: int) -> int:
    return value & ((1 << bits) - 1)


def _div(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _rem(a: int, b: int) -> int:
    return 0 if b == 0 else a - _div(a, b) * b


_SIGNED: dict[str, Callable[[int, int], int]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": _div, "rem": _rem, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << b if b >= 0 else 0,
    "shr": lambda a, b: a >> b if b >= 0 else 0,
    "eq": lambda a, b: int(a == b), "ne": lambda a, b: int(a != b),
    "slt": lambda a, b: int(a < b), "sle": lambda a, b: int(a <= b),
    "sgt": lambda a, b: int(a > b), "sge": lambda a, b: int(a >= b),
}
_UNSIGNED = {"ult": lambda a, b: int(a < b), "ule": lambda a, b: int(a <= b),
             "ugt": lambda a, b: int(a > b), "uge": lambda a, b: int(a >= b)}
#: arith.cmpf predicates in MLIR's order (the attribute's integer value indexes this)
CMPF_PREDICATES = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
                   "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true")


#: the bit pattern of every NaN a float function produces (positive quiet NaN)
CANONICAL_NAN = 0x7FC00000


def f32_bits(value: float) -> int:
    """The IEEE binary32 bit pattern of ``value`` (rounded to f32) as a signed 32-bit int."""
    return int(np.array(value, dtype=np.float32).view(np.int32))


def bits_f32(bits: int) -> np.float32:
    """The f32 whose bit pattern is ``bits`` (any integer; its low 32 bits are used)."""
    return np.array(wrap(int(bits), 32), dtype=np.int32).view(np.float32)[()]


def _fcmp(pred: str, a: float, b: float) -> int:
    unordered = math.isnan(a) or math.isnan(b)
    if pred in ("false", "true"):
        return int(pred == "true")
    if pred == "ord":
        return int(not unordered)
    if pred == "uno":
        return int(unordered)
    rel = {"eq": a == b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b,
           "ne": a != b}[pred[1:]]
    return int(rel or unordered) if pred[0] == "u" else int(rel and not unordered)


def _fbin(op: Callable) -> Callable[[np.float32, np.float32], np.float32]:
    def run(a: np.float32, b: np.float32) -> np.float32:
        with np.errstate(all="ignore"):
            return np.float32(op(a, b))
    return run


_FLOAT: dict[str, Callable] = {
    "addf": _fbin(lambda a, b: a + b), "subf": _fbin(lambda a, b: a - b),
    "mulf": _fbin(lambda a, b: a * b), "divf": _fbin(lambda a, b: a / b),
}
FLOAT_COMPARISONS = frozenset(f"f{p}" for p in CMPF_PREDICATES)
#: functions whose operands are f32 bit patterns
FLOAT_OPERANDS = frozenset({*_FLOAT, "negf", "fptosi", *FLOAT_COMPARISONS})
#: functions whose result is an f32 bit pattern
FLOAT_RESULTS = frozenset({*_FLOAT, "negf", "sitofp"})
COMPARISONS = frozenset({"eq", "ne", "slt", "sle", "sgt", "sge", *_UNSIGNED})
FUNCTIONS = frozenset({*_SIGNED, *_UNSIGNED, "cast", "select", *FLOAT_OPERANDS, *FLOAT_RESULTS})


def fptosi(value: float, out_bits: int) -> int | None:
    """Truncate toward zero; None when NaN or outside the signed ``out_bits`` range."""
    if not math.isfinite(value):
        return None
    result = math.trunc(value)
    if not -(2 ** (out_bits - 1)) <= result < 2 ** (out_bits - 1):
        return None
    return result


def _evaluate_float(fn: str, values: list[int], bits: int, out_bits: int) -> int:
    if fn == "sitofp":
        return f32_bits(float(np.float32(wrap(values[0], bits))))
    a = bits_f32(values[0])
    if fn == "negf":
        if math.isnan(a):
            return CANONICAL_NAN
        return wrap(values[0] ^ (1 << 31), 32)  # flips the sign bit only
    if fn == "fptosi":
        result = fptosi(float(a), out_bits)
        return 0 if result is None else wrap(result, out_bits)
    b = bits_f32(values[1])
    if fn in FLOAT_COMPARISONS:
        return _fcmp(fn[1:], float(a), float(b))
    result = _FLOAT[fn](a, b)
    if math.isnan(result):
        return CANONICAL_NAN
    return int(np.array(result, dtype=np.float32).view(np.int32))


def evaluate(fn: str, values: list[int], bits: int, out_bits: int) -> int:
    """Apply ALU function ``fn``; ``bits`` is the operand width, ``out_bits`` the result's."""
    if fn == "select":
        return values[1] if values[0] else values[2]
    if fn == "cast":
        return wrap(values[0], out_bits)
    if fn in FLOAT_OPERANDS or fn in FLOAT_RESULTS:
        return _evaluate_float(fn, values, bits, out_bits)
    a, b = (wrap(v, bits) for v in values[:2])
    if fn in _UNSIGNED:
        return _UNSIGNED[fn](_unsigned(a, bits), _unsigned(b, bits))
    result = _SIGNED[fn](a, b)
    return result if fn in COMPARISONS else wrap(result, out_bits)
