"""A per-tenant fairness report of one simulation, on both yardsticks.

Yardsticks: **compute** (VTC's token-unit service: w_in per executed prefill token, w_out per
generated token; what the GPU actually did for the tenant) and **unified** (FairCache's cost:
compute + KV memory held + host memory + PCIe I/O, shared prefixes split among their users).
Service is divided by the tenant's weight before Jain's index and service differences are taken,
so equal numbers mean "served in proportion to the weights".

Reads the folder ``schedlab faircache simulate --out DIR`` writes (``tenants.csv``,
``requests.parquet``, ``samples.parquet``, ``summary.json``) or a ``SimResult`` directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.faircache.metrics import jain, service_difference

YARDSTICKS = {"compute": "compute_service", "unified": "unified_service"}
MEASURED = {"cpu": "cpu_s"}  # measured CPU seconds per tenant (``faircache serve`` folders)


def yardsticks(tenants: pl.DataFrame, samples: pl.DataFrame) -> dict[str, str]:
    """Both service yardsticks, plus measured CPU time when the run was on the real engine."""
    extra = {k: c for k, c in MEASURED.items() if c in tenants.columns and c in samples.columns}
    return {**YARDSTICKS, **extra}


def load_result(folder: str | Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict]:
    """(tenants, requests, samples, summary) from a ``simulate --out`` folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise BadInputError("no such folder (write one with simulate --out)", path=folder)
    need = ("tenants.csv", "requests.parquet", "samples.parquet", "summary.json")
    for name in need:
        if not (folder / name).is_file():
            raise BadInputError(f"missing {name} (written by simulate --out)", path=folder)
    try:
        tenants = pl.read_csv(folder / "tenants.csv")
        requests = pl.read_parquet(folder / "requests.parquet")
        samples = pl.read_parquet(folder / "samples.parquet")
    except Exception as exc:  # polars raises several types for damaged files
        raise BadInputError(f"unreadable result file: {exc}".splitlines()[0], path=folder) from exc
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInputError(f"not valid JSON: {exc}", path=folder / "summary.json") from exc
    for frame, name, cols in (
        (tenants, "tenants.csv", ("tenant", "compute_service", "unified_service")),
        (requests, "requests.parquet", ("tenant", "ttft", "tpot")),
        (
            samples,
            "samples.parquet",
            ("time", "tenant", "backlogged", "compute_service", "unified_service"),
        ),
    ):
        for col in cols:
            if col not in frame.columns:
                raise BadInputError("missing column", path=folder / name, field=col)
    return tenants, requests, samples, summary


def build_report(
    tenants: pl.DataFrame, requests: pl.DataFrame, samples: pl.DataFrame, summary: dict
) -> dict[str, Any]:
    """Per-tenant service and latency, and fairness on both yardsticks."""
    names = tenants["tenant"].to_list()
    weights = np.asarray(summary.get("tenant_weights") or [1.0] * len(names), dtype=float)
    if weights.size != len(names):
        raise BadInputError(
            f"{weights.size} tenant weights for {len(names)} tenants", field="tenant_weights"
        )
    rows = []
    # the samples' tenant column holds names; the requests' holds tenant indices or names
    by_tenant = requests.with_columns(pl.col("tenant").cast(pl.Utf8))
    index_names = {str(i): n for i, n in enumerate(names)}
    by_tenant = by_tenant.with_columns(pl.col("tenant").replace(index_names).alias("tenant"))
    for i, name in enumerate(names):
        mine = by_tenant.filter(pl.col("tenant") == name)
        row: dict[str, Any] = dict(tenant=name, weight=float(weights[i]), finished=mine.height)
        for key, col in yardsticks(tenants, samples).items():
            row[f"{key}_service"] = float(tenants[col][i])
        for col in ("ttft", "tpot"):
            for q in (0.5, 0.99):
                row[f"{col}_p{int(q * 100)}"] = (
                    float(mine[col].quantile(q, "linear")) if mine.height else float("nan")
                )
        rows.append(row)
    fairness = {}
    for key, col in yardsticks(tenants, samples).items():
        served = tenants[col].to_numpy() / weights
        scaled = samples.with_columns(
            pl.col(col)
            / pl.col("tenant").replace_strict(
                dict(zip(names, weights.tolist(), strict=True)), return_dtype=pl.Float64
            )
        )
        worst, mean = service_difference(scaled, col)
        total = served.sum()
        fairness[key] = dict(
            jain=jain(served),
            max_service_difference=worst,
            avg_service_difference=mean,
            shares=[float(v / total) if total else 0.0 for v in served],
        )
    return dict(
        tenants=rows,
        fairness=fairness,
        summary={
            k: summary.get(k)
            for k in (
                "requests",
                "sim_seconds",
                "throughput_rps",
                "ttft_p50",
                "ttft_p99",
                "tpot_p50",
                "tpot_p99",
                "truncated",
                "engine_seconds",
                "scheduler_share",
            )
            if k in summary
        },
    )


def difference_over_time(
    samples: pl.DataFrame, column: str, weights: dict[str, float], window: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """(times, max − min weighted service over the last ``window`` samples among tenants
    backlogged throughout that window); 0 where fewer than two tenants qualify."""
    tenants = samples["tenant"].unique(maintain_order=True).to_list()
    n = len(tenants)
    values = samples[column].to_numpy().reshape(-1, n) / np.array([weights[t] for t in tenants])
    back = samples["backlogged"].to_numpy().reshape(-1, n)
    times = samples["time"].to_numpy().reshape(-1, n)[:, 0]
    out = np.zeros(len(times))
    for k in range(window, len(times)):
        both = back[k - window : k + 1].all(axis=0)
        if both.sum() >= 2:
            got = values[k, both] - values[k - window, both]
            out[k] = got.max() - got.min()
    return times, out


def plot_difference(
    samples: pl.DataFrame, weights: dict[str, float], path: str | Path, window: int = 10
) -> Path:
    """PNG of the service difference over time on both yardsticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from schedlab.core.io import atomic_write

    fig, axes = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for ax, (key, col) in zip(axes, YARDSTICKS.items(), strict=True):
        times, diff = difference_over_time(samples, col, weights, window)
        ax.plot(times, diff, lw=1)
        ax.set_ylabel(f"{key} diff\n(token units)")
    axes[-1].set_xlabel(
        f"time (s); difference of weighted service over {window} samples among backlogged tenants"
    )
    fig.tight_layout()
    path = Path(path)
    with atomic_write(path, mode="wb", encoding=None) as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    return path
