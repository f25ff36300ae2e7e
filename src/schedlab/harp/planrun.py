"""Timing a plan by either method: the analytical estimator or the event simulator.

Why a module of its own: the one-call engine (``engine``) and crossbar reprogramming
(``reprogram``, which times each weight group) both time plans, and the engine calls
``reprogram`` for models that do not fit; the shared step sits below both.
"""

from __future__ import annotations

from typing import Literal

from schedlab.core.errors import UnknownNameError
from schedlab.harp.estimator import estimate
from schedlab.harp.plan import Plan
from schedlab.harp.simulator import simulate

Method = Literal["estimate", "simulate"]
METHODS = ("estimate", "simulate")


def run_plan(plan: Plan, method: str) -> tuple[float, dict[str, float]]:
    """(latency ns, busy ns per pool) of a plan by the chosen method."""
    if method == "estimate":
        result = estimate(plan)
    elif method == "simulate":
        result = simulate(plan)
    else:
        raise UnknownNameError("method", method, list(METHODS))
    return result.latency_ns, result.busy_ns
