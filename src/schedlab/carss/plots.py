"""Figures for the ``forecast`` command: the series, the forecast band and change points.

CARSS (paper 07): showing where the detector fired next to the forecast makes it obvious when
the model was retrained and whether the new regime was picked up.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from schedlab.carss.forecast import Forecast
from schedlab.core.io import write_bytes


def forecast_figure(
    counts: np.ndarray, fc: Forecast, online: list[int], offline: list[int], path: str | Path
) -> Path:
    """Plot the arrival series, the forecast with its 10-90% band and change points; written
    atomically as PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n, h = counts.size, fc.mean.size
    ahead = np.arange(n, n + h)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    ax.plot(np.arange(n), counts, lw=0.8, label="arrivals")
    ax.plot(ahead, fc.point(), color="C1", label="forecast (median)")
    ax.fill_between(
        ahead, fc.quantile(0.1), fc.quantile(0.9), color="C1", alpha=0.3, label="10-90%"
    )
    for i, cp in enumerate(offline):
        ax.axvline(cp, color="grey", ls=":", lw=0.8, label="PELT change" if i == 0 else None)
    for i, cp in enumerate(online):
        ax.axvline(cp, color="C3", ls="--", lw=0.8, label="online change" if i == 0 else None)
    ax.set_xlabel("interval")
    ax.set_ylabel("arrivals")
    ax.legend(loc="upper left", fontsize=7)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return write_bytes(path, buffer.getvalue())
