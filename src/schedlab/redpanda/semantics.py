"""What each RedPanda ALU function computes, bit-exactly as MLIR's arith dialect does.

Shared by the constant folder and the cycle simulator so both agree with xDSL's interpreter
(../shared/papers/08-redpanda.md: the simulator must reproduce the original kernel's results).
Division by zero yields 0 instead of trapping: a predicated (if-converted) division executes
even when its branch is not taken, and its result is then discarded.
"""

from __future__ import annotations

from collections.abc import Callable


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
COMPARISONS = frozenset({"eq", "ne", "slt", "sle", "sgt", "sge", *_UNSIGNED})
FUNCTIONS = frozenset({*_SIGNED, *_UNSIGNED, "cast", "select"})


def evaluate(fn: str, values: list[int], bits: int, out_bits: int) -> int:
    """Apply ALU function ``fn``; ``bits`` is the operand width, ``out_bits`` the result's."""
    if fn == "select":
        return values[1] if values[0] else values[2]
    if fn == "cast":
        return wrap(values[0], out_bits)
    a, b = (wrap(v, bits) for v in values[:2])
    if fn in _UNSIGNED:
        return _UNSIGNED[fn](_unsigned(a, bits), _unsigned(b, bits))
    result = _SIGNED[fn](a, b)
    return result if fn in COMPARISONS else wrap(result, out_bits)
