"""RC, Hydra-MCS's remaining-computation estimate, and its calibration against real subtrees.

Formula (log2 of an estimated node count below a node; cheap: one pass over the bidomains):

    gap   = bound - incumbent = depth + sum_b min(|L_b|,|R_b|) - incumbent
    beta  = sum_b min(|L_b|,|R_b|) * log2(1 + max(|L_b|,|R_b|)) / sum_b min(|L_b|,|R_b|)
    RC    = gap * beta + log2(1 + sum_b min(|L_b|,|R_b|))

Why: a subtree is pruned as soon as its bound falls to the incumbent, so it can be at most
``gap`` "wasted" pairs deep before every path dies; each step branches over roughly
``max(|L|,|R|)`` choices in the bidomain it splits, so ``beta`` is the mean log-branching.
The last term keeps nodes with the same gap ordered by how much is left to map.
The paper's abstract names the metric but not its formula; this one is ours, and
:func:`calibrate` measures how well it ranks subtrees (Spearman's rho against exact counts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from schedlab.hydra_mcs import layout as K

if TYPE_CHECKING:  # solve() uses only rc_of_counts: keep Polars and SciPy out of its import
    import polars as pl


def rc_of_counts(lcount: np.ndarray, rcount: np.ndarray, gap: int) -> float:
    """RC from bidomain sizes (the NumPy twin of the kernel's ``rc_log2``)."""
    lo = np.minimum(lcount, rcount).astype(np.float64)
    hi = np.maximum(lcount, rcount).astype(np.float64)
    sum_min = float(lo.sum())
    return float(K.rc_log2(int(gap), float((lo * np.log2(1.0 + hi)).sum()), int(sum_min)))


def trace_frame(trace: np.ndarray) -> pl.DataFrame:
    """The kernel's trace rows (one per subtree entered near the root) as a table."""
    import polars as pl

    rows = int(trace[0, 0])
    t = trace[1 : rows + 1]
    done = t[:, K.T_EXIT] >= 0
    t = t[done]
    sum_min = np.maximum(t[:, K.T_SUMMIN], 1e-9)
    rc = np.where(
        (t[:, K.T_GAP] > 0) & (t[:, K.T_SUMMIN] > 0),
        t[:, K.T_GAP] * t[:, K.T_LOGB] / sum_min + np.log2(1.0 + t[:, K.T_SUMMIN]),
        0.0,
    )
    return pl.DataFrame(
        {
            "depth": t[:, K.T_DEPTH].astype(np.int64),
            "subtree_nodes": (t[:, K.T_EXIT] - t[:, K.T_ENTRY]).astype(np.int64),
            "gap": t[:, K.T_GAP],
            "sum_min": t[:, K.T_SUMMIN],
            "sum_prod": t[:, K.T_SUMPROD],
            "domains": t[:, K.T_NDOM],
            "rc": rc,
        }
    )


def calibrate(frame: pl.DataFrame) -> dict[str, float]:
    """Spearman's rho of RC, and of simpler candidates, against exact subtree node counts."""
    from scipy.stats import spearmanr

    if frame.height < 3:
        return {
            "rc": float("nan"),
            "gap_only": float("nan"),
            "sum_prod": float("nan"),
            "rows": float(frame.height),
        }
    nodes = np.log2(frame["subtree_nodes"].to_numpy() + 1.0)

    def rho(x: np.ndarray) -> float:
        if np.ptp(x) == 0 or np.ptp(nodes) == 0:
            return float("nan")
        return float(spearmanr(x, nodes).statistic)

    return {
        "rc": rho(frame["rc"].to_numpy()),
        "gap_only": rho(frame["gap"].to_numpy()),
        "sum_prod": rho(frame["sum_prod"].to_numpy()),
        "rows": float(frame.height),
    }
