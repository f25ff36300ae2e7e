"""The search kernel's array layout (slots, columns, statuses), importable without Numba.

``kernel.py`` (Numba JIT), the ahead-of-time compiled module (``aot.py``) and the Python side
(``state.py``, ``engine.py``, ``rc.py``) all read the same preallocated arrays; keeping their
indices here means the solve path can run the AOT kernel without ever importing Numba.
"""

from __future__ import annotations

import math

# ctl slots (int64): the resumable scalar state of one searcher
NODES, BEST, DEPTH, ENTER, STATUS, OFFLOADED, LOGPOS = 0, 1, 2, 3, 4, 5, 6
# lev columns (int64): per-level state
START, COUNT, SEL, VERT, LASTW, DONE, TRACE, FRESH, SUMMIN = range(9)
LEV_COLS = 9
# params (int64)
P_BASE, P_BUDGET, P_GOAL, P_BIGFIRST, P_CONNECTED, P_HEUR, P_TRACE_DEPTH = range(7)
N_PARAMS = 7
# shared (int64, one array for all threads): best size any thread has proven, stop flag
S_BEST, S_STOP = 0, 1
# statuses
FINISHED, BUDGET_SPENT, STOPPED, LOG_FULL = 0, 1, 2, 3
# trace columns (float64): entry nodes, exit nodes, depth, gap, sum_min, sum_prod, n_domains,
# sum_log_branch
T_ENTRY, T_EXIT, T_DEPTH, T_GAP, T_SUMMIN, T_SUMPROD, T_NDOM, T_LOGB = range(8)
TRACE_COLS = 8


def rc_log2(gap: float, sum_logb: float, sum_min: float) -> float:
    """RC in plain Python (the kernel's ``rc_log2``, same operations; formula: ``rc.py``)."""
    if gap <= 0 or sum_min <= 0:
        return 0.0
    return gap * (sum_logb / sum_min) + math.log2(1.0 + sum_min)
