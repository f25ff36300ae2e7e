"""Figures of the X-Bucket evaluation (../shared/papers/15-xbucket.md): waste and efficiency per
workflow and allocation, and allocation over time. Matplotlib with the Agg backend.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from schedlab.core import Figure
from schedlab.xbucket.types import RESOURCES


def _pyplot():  # noqa: ANN202 - imported lazily so the CLI stays fast
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_waste_and_efficiency(frame: pl.DataFrame) -> Figure:
    """Per workflow: memory waste (relative to Whole Machine) and mean efficiency, per allocator."""
    plt = _pyplot()
    workflows = list(dict.fromkeys(frame["workflow"].to_list()))
    algorithms = list(dict.fromkeys(frame["algorithm"].to_list()))
    fig, axes = plt.subplots(2, 1, figsize=(12, 7), sharex=True)
    width = 0.8 / max(len(algorithms), 1)
    x = np.arange(len(workflows))
    for k, name in enumerate(algorithms):
        rows = frame.filter(pl.col("algorithm") == name)
        lookup = {r["workflow"]: r for r in rows.iter_rows(named=True)}
        waste = []
        for w in workflows:
            whole = frame.filter((pl.col("workflow") == w)
                                 & (pl.col("algorithm") == "whole-machine"))["waste_memory"]
            base = float(whole[0]) if whole.len() and whole[0] > 0 else 1.0
            waste.append(lookup[w]["waste_memory"] / base if w in lookup else np.nan)
        eff = [lookup[w]["efficiency_mean"] if w in lookup else np.nan for w in workflows]
        axes[0].bar(x + k * width, waste, width, label=name)
        axes[1].bar(x + k * width, eff, width, label=name)
    axes[0].set_ylabel("memory waste / Whole Machine's")
    axes[1].set_ylabel("efficiency (mean of " + ", ".join(RESOURCES) + ")")
    axes[1].set_xticks(x + 0.4 - width / 2, workflows, rotation=30, ha="right")
    axes[0].legend(ncol=5, fontsize=8)
    fig.tight_layout()
    return Figure.from_matplotlib(fig, "waste_efficiency",
                                  "Memory waste and efficiency per workflow and allocator")


def plot_allocation_over_time(attempts: dict[str, pl.DataFrame], workflow: str) -> Figure:
    """Memory allocated to each attempt (dots; failures in red) against the task's peak."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(attempts), figsize=(4 * len(attempts), 3.2), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, (name, frame) in zip(axes, attempts.items(), strict=True):
        ok = frame.filter(pl.col("success"))
        bad = frame.filter(~pl.col("success"))
        ax.scatter(ok["task"], ok["peak_memory"], s=2, c="0.7", label="peak")
        ax.scatter(ok["task"], ok["alloc_memory"], s=2, c="tab:blue", label="allocation (ok)")
        ax.scatter(bad["task"], bad["alloc_memory"], s=2, c="tab:red", label="allocation (failed)")
        ax.set_title(name)
        ax.set_xlabel("task (arrival order)")
    axes[0].set_ylabel("memory (MB)")
    axes[0].legend(fontsize=7, markerscale=3)
    fig.tight_layout()
    return Figure.from_matplotlib(fig, f"allocation_over_time_{workflow}",
                                  f"Memory allocation over time on {workflow}")
