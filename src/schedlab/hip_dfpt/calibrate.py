"""A calibrated simulator: device cost parameters fitted on measured micro-task times.

The scale simulator (``simulator.DeviceModel``) prices a task as ``launch + flops / rate``
(rate per kernel branch) times log-normal noise. Its defaults are GPU-like choices, not
measurements. Here the parameters are *fitted*: every micro-task of some training molecules
is timed on this machine (run-alone, min of repeats, the real NumPy kernels), the law
``t = launch + F / rate_branch + 8 n_g n_b n_dm / bandwidth`` (F = 4 n_g n_b^2 n_dm flops) is
fitted by non-negative relative-error least squares, the noise sigma is the robust (MAD) spread
of the log residuals, and the fit is validated on *held-out* molecules the fit never saw (MAPE
per task and error of the total).

The scale study then runs on CPU-calibrated devices, with the balancers fed by the 5%-sample
branch-hybrid model trained on **measured** task times (a 5% sample of the training molecules'
measured tasks), not on the simulator's own formula. Its figures are labelled as simulation:
the devices are modelled, only their parameters come from measurements. A GPU calibration
needs a GPU machine (none was lent); the same code runs with ``xp=cupy`` timings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl

from schedlab.core.errors import ConfigError
from schedlab.hip_dfpt.perfmodel import make_model, mape, sample_tasks
from schedlab.hip_dfpt.simulator import DeviceModel
from schedlab.hip_dfpt.tasks import DENSE, TaskFeatures

TRAIN = ("water", "ammonia", "ethane", "alkane-3", "alkane-5")
HELD_OUT = ("butane", "benzene")


def measure_tasks(
    molecules: tuple[str, ...],
    basis: str = "6-31g",
    grid_level: int = 1,
    xc: str = "lda,vwn",
    repeats: int = 2,
    passes: int = 3,
    seed: int = 0,
) -> pl.DataFrame:
    """Every composed micro-task of each molecule, timed alone: the minimum over ``passes``
    sweeps over all tasks, ``repeats`` back-to-back runs each. Separate sweeps matter on a
    loaded machine: a stall of the whole process (seen here: 0.4 s on a 200 us task) hits
    consecutive tasks of one sweep, rarely the same task in another."""
    from schedlab.hip_dfpt.dft import pyscf_threads
    from schedlab.hip_dfpt.pipeline import prepare
    from schedlab.hip_dfpt.runtime import time_tasks
    from schedlab.hip_dfpt.workloads import load_molecule

    frames = []
    for name in molecules:
        work = prepare(load_molecule(name), basis, grid_level, xc, raw_store=False)
        store = work.composed
        with pyscf_threads():
            seconds = np.min(
                [
                    time_tasks(
                        store.tasks,
                        np.arange(len(store.tasks)),
                        store.nao,
                        repeats=repeats,
                        seed=seed + k,
                    )
                    for k in range(passes)
                ],
                axis=0,
            )
        f = store.features
        frames.append(
            pl.DataFrame(
                dict(
                    molecule=[name] * len(f),
                    n_points=f.n_points,
                    n_basis=f.n_basis,
                    n_atoms=f.n_atoms,
                    branch=f.branch,
                    key=f.key,
                    seconds=seconds,
                )
            )
        )
    return pl.concat(frames)


def features_of(frame: pl.DataFrame) -> TaskFeatures:
    return TaskFeatures(
        *(
            frame[c].to_numpy().astype(np.int64)
            for c in ("n_points", "n_basis", "n_atoms", "branch", "key")
        )
    )


@dataclass(frozen=True)
class Calibration:
    device: DeviceModel
    train_mape: float
    held_out_mape: float
    held_out_total_error: float
    held_out_model_mape: float  # the 5%-sample branch-hybrid model trained on measured times
    per_molecule: dict[str, float]


def _design(frame: pl.DataFrame, ndm: int) -> tuple[np.ndarray, np.ndarray]:
    g = frame["n_points"].to_numpy().astype(float)
    b = frame["n_basis"].to_numpy().astype(float)
    flops = 4.0 * g * b * b * ndm
    dense = frame["branch"].to_numpy() == DENSE
    x = np.column_stack(
        [
            np.ones_like(g),
            np.where(dense, flops, 0.0),
            np.where(dense, 0.0, flops),
            8.0 * g * b * ndm,
        ]
    )
    return x, frame["seconds"].to_numpy()


def fit_device(train: pl.DataFrame, base: DeviceModel | None = None) -> DeviceModel:
    """Launch overhead, dense and sparse branch rates, memory bandwidth and noise sigma from
    measured tasks.

    A CPU core is one lane (a task always fills it): ``lanes`` = 1, and every task's branch
    is the one the real store chose, mapped to the simulator's branch threshold below.
    """
    from schedlab.hip_dfpt.perfmodel import _fit_relative

    base = base or DeviceModel()
    if train.height < 8:
        raise ConfigError("calibration needs at least 8 measured tasks", field="molecules")
    x, y = _design(train, base.ndm)
    coef = _fit_relative(x, y)
    launch, inv_dense, inv_sparse, inv_bw = coef
    pred = x @ coef
    residual = np.log(y / np.maximum(pred, 1e-12))
    sigma = float(1.4826 * np.median(np.abs(residual - np.median(residual))))  # robust
    dense_b = train.filter(pl.col("branch") == DENSE)["n_basis"]
    threshold = int(dense_b.min()) if dense_b.len() else base.branch_threshold
    big = 1e30  # a branch with no measured tasks stays effectively free of that term
    return replace(
        base,
        lanes=1.0,
        launch_overhead=float(launch),
        gemm_flops=1.0 / inv_dense if inv_dense > 0 else big,
        loop_flops=1.0 / inv_sparse if inv_sparse > 0 else big,
        memory_bandwidth=1.0 / inv_bw if inv_bw > 0 else float("inf"),
        branch_threshold=threshold,
        noise_sigma=sigma,
        steal_latency=0.0,
        link_bandwidth=big,
    )


def predict_seconds(device: DeviceModel, frame: pl.DataFrame) -> np.ndarray:
    x, _ = _design(frame, device.ndm)
    return x @ np.array(
        [
            device.launch_overhead,
            1.0 / device.gemm_flops,
            1.0 / device.loop_flops,
            1.0 / device.memory_bandwidth,
        ]
    )


def calibrate(train: pl.DataFrame, held_out: pl.DataFrame, seed: int = 0) -> Calibration:
    """Fit on ``train``, validate on ``held_out`` (molecules the fit never saw)."""
    device = fit_device(train)
    train_pred = predict_seconds(device, train)
    pred = predict_seconds(device, held_out)
    measured = held_out["seconds"].to_numpy()
    per_molecule = {}
    for name in held_out["molecule"].unique(maintain_order=True).to_list():
        mask = (held_out["molecule"] == name).to_numpy()
        per_molecule[name] = mape(pred[mask], measured[mask])
    feats = features_of(train)
    sample = sample_tasks(feats, 0.05, seed)
    model = make_model("branch-hybrid").fit(feats.take(sample), train["seconds"].to_numpy()[sample])
    model_pred = model.predict(features_of(held_out))
    totals = [
        abs(pred[m].sum() / measured[m].sum() - 1)
        for m in ((held_out["molecule"] == n).to_numpy() for n in per_molecule)
    ]
    return Calibration(
        device,
        mape(train_pred, train["seconds"].to_numpy()),
        mape(pred, measured),
        float(np.mean(totals)),
        mape(model_pred, measured),
        per_molecule,
    )


def calibrated_scale(
    calibration: Calibration, train: pl.DataFrame, atoms: int, devices: int, seed: int = 0
) -> dict[str, float]:
    """SIMULATED balance at scale on CPU-calibrated devices (1 stream each), the balancers
    fed by the branch-hybrid model trained on a 5% sample of *measured* task times."""
    from schedlab.hip_dfpt.policies import BALANCERS, make_balancer
    from schedlab.hip_dfpt.simulator import (
        compose_features,
        simulate,
        task_costs,
        with_branches,
    )
    from schedlab.hip_dfpt.synthetic import synthetic_system

    device = calibration.device
    raw = with_branches(synthetic_system(atoms, seed), device)
    # composition sized for a CPU core, as on the real runtime (pipeline.CPU_COMPOSITION)
    from schedlab.hip_dfpt.pipeline import CPU_COMPOSITION

    composed = compose_features(
        raw, replace(device, lanes=CPU_COMPOSITION.min_parallelism * 2), devices, 1
    )
    composed = with_branches(composed, device)
    truth = task_costs(composed, device, seed + 1)
    feats = features_of(train)
    sample = sample_tasks(feats, 0.05, seed)
    model = make_model("branch-hybrid").fit(feats.take(sample), train["seconds"].to_numpy()[sample])
    predicted = model.predict(composed)
    out = dict(
        simulated=1.0,
        tasks=float(len(composed)),
        model_mape_on_simulated=mape(predicted, truth.kernel),
    )
    for name in BALANCERS:
        plan = make_balancer(name).plan(composed, predicted, devices, 1)
        out[f"balance_{name}"] = simulate(plan, truth, 1, device, seed).balance
    return out
