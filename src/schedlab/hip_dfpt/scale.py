"""The scale study (simulated): thousands of devices, hundreds of thousands of atoms.

Configurations, all on the same synthetic system and device model:

* ``sota``: the raw batches, one stream per device, count-balanced (a per-batch GPU port);
* ``sota+streams``: raw batches on S streams (ablation: what streams alone buy);
* one row per balancer on micro-tasks and S streams; ``hip-dfpt`` is the complete method.

The performance model is fitted to a 5% sample of the micro-tasks' (noisy) kernel times and
its predictions, converted to device cost, are what the balancers receive.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.hip_dfpt.perfmodel import MODELS, make_model, mape, sample_tasks
from schedlab.hip_dfpt.policies import BALANCERS, make_balancer
from schedlab.hip_dfpt.simulator import (
    DeviceModel,
    compose_features,
    device_cost,
    simulate,
    task_costs,
    useful_flops,
    with_branches,
)
from schedlab.hip_dfpt.synthetic import synthetic_system
from schedlab.hip_dfpt.tasks import TaskFeatures, cost_distribution


@dataclass
class ScaleReport:
    rows: list[dict]
    model_error: dict[str, float]
    distribution: dict[str, dict[str, float]]
    raw_costs: np.ndarray
    composed_costs: np.ndarray


def evaluate(config: str, balancer: str, tasks: TaskFeatures, predicted: np.ndarray,
             devices: int, streams: int, device: DeviceModel, useful: float, seed: int) -> dict:
    """Plan and simulate one configuration; one result row."""
    start = time.perf_counter()
    plan = make_balancer(balancer).plan(tasks, predicted, devices, streams)
    outcome = simulate(plan, task_costs(tasks, device, seed + 1), streams, device, seed)
    return dict(config=config, balancer=balancer, tasks=len(tasks), devices=devices,
                streams=streams, balance=outcome.balance, utilisation=outcome.utilisation,
                occupation=outcome.occupation, makespan_s=outcome.makespan,
                throughput_tflops=useful / outcome.makespan / 1e12, steals=outcome.steals,
                plan_and_sim_s=time.perf_counter() - start)


def scale_study(atoms: int, devices: int, streams: int = 4, seed: int = 0,
                batches_per_atom: float = 8.0, sample_fraction: float = 0.05,
                device: DeviceModel | None = None,
                balancers: tuple[str, ...] | None = None) -> ScaleReport:
    """Simulate every configuration on one synthetic system; see the module docstring."""
    if devices < 1 or streams < 1:
        raise ConfigError("devices and streams must be at least 1", field="devices")
    device = device or DeviceModel()
    raw = with_branches(synthetic_system(atoms, seed, batches_per_atom), device)
    composed = compose_features(raw, device, devices, streams)
    useful = float(useful_flops(raw, device).sum())
    truth = task_costs(composed, device, seed + 1)
    sample = sample_tasks(composed, sample_fraction, seed)
    held_out = np.setdiff1d(np.arange(len(composed)), sample)
    errors, predicted = {}, {}
    for name in MODELS:
        model = make_model(name).fit(composed.take(sample), truth.kernel[sample])
        predicted[name] = model.predict(composed)
        errors[name] = mape(predicted[name][held_out], truth.kernel[held_out])
    cost = device_cost(predicted["branch-hybrid"], composed, device, streams)
    raw_cost = task_costs(raw, device, seed + 1).kernel
    rows = [
        evaluate("sota", "count-balanced", raw, raw_cost, devices, 1, device, useful, seed),
        evaluate("sota+streams", "count-balanced", raw, raw_cost, devices, streams, device,
                 useful, seed),
    ]
    for name in balancers or tuple(BALANCERS):
        config = "hip-dfpt" if name == "hip-dfpt" else f"micro-tasks+{name}"
        rows.append(evaluate(config, name, composed, cost, devices, streams, device, useful,
                             seed))
    distribution = {"raw": cost_distribution(raw_cost),
                    "composed": cost_distribution(truth.kernel)}
    return ScaleReport(rows, errors, distribution, raw_cost, truth.kernel)
