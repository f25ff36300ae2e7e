"""Headline experiments for HIP-DFPT (../shared/papers/13-hip_dfpt.md), registered with reproduce.

1. ``real_dfpt``: a real DFPT (CPHF) static-polarisability cycle on a PySCF molecule, every grid
   integration executed by our runtime (NumPy, threads as streams, thread groups as devices):
   numerics vs PySCF, the 5%-sample performance model's error, micro-task composition's cost
   distribution and throughput, the pooled allocator, and every balancer's balance on measured
   task costs.
2. ``scale_balance``: the simulated scale study (320 devices / 10,000 atoms quick; 8,192 devices
   / 200,006 atoms full, the paper's scale): balance, occupation, utilisation and throughput of
   HIP-DFPT vs a per-batch single-stream port and vs every baseline balancer.

The seed changes the run's randomness (model samples, stealing victims, synthetic geometry,
device noise), not the molecule.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from schedlab.core import Claim, Figure, Result, register
from schedlab.hip_dfpt.perfmodel import MODELS, make_model, mape, sample_tasks
from schedlab.hip_dfpt.pipeline import (
    measured_costs,
    prepare,
    reference_polarizability,
    replay_balance,
    run_polarizability,
)
from schedlab.hip_dfpt.policies import BALANCERS, make_balancer
from schedlab.hip_dfpt.runtime import Runtime
from schedlab.hip_dfpt.scale import scale_study
from schedlab.hip_dfpt.tasks import cost_distribution
from schedlab.hip_dfpt.workloads import builtin_molecule

PAPER_BALANCE, PAPER_OCCUPATION, PAPER_THROUGHPUT = 1.06, 1.55, 1.70


def _model_errors(costs: np.ndarray, work, seed: int) -> dict[str, float]:
    features = work.composed.features
    sample = sample_tasks(features, 0.05, seed)
    held_out = np.setdiff1d(np.arange(len(features)), sample)
    return {
        name: mape(
            make_model(name).fit(features.take(sample), costs[sample]).predict(features)[held_out],
            costs[held_out],
        )
        for name in MODELS
    }


def _pool_allocations(work, devices: int, streams: int, seed: int) -> dict[str, float]:
    """Allocations in iterations 2-3 with the pool and without it (same plan, same inputs)."""
    rng = np.random.default_rng(seed)
    dms = rng.standard_normal((3, work.composed.nao, work.composed.nao))
    dms = dms + dms.transpose(0, 2, 1)
    out = {}
    for pooled in (True, False):
        runtime = Runtime(
            work.composed, make_balancer("hip-dfpt"), devices, streams, pooled=pooled, seed=seed
        )
        runtime.apply(dms)
        first = runtime.pool_stats
        first_allocations, first_requests = first.allocations, first.requests
        runtime.apply(dms)
        runtime.apply(dms)
        later = runtime.pool_stats
        key = "pooled" if pooled else "unpooled"
        out[key] = float(later.allocations - first_allocations)
        out[f"{key}_hit_rate"] = 1.0 - out[key] / max(1, later.requests - first_requests)
    return out


def _pipeline_speedup(work, seed: int) -> float:
    """Wall time of one device with 1 stream over 2 streams (mean of three iterations)."""
    nao = work.composed.nao
    dms = np.random.default_rng(seed).standard_normal((3, nao, nao))
    walls = []
    for streams in (1, 2):
        runtime = Runtime(work.composed, make_balancer("hip-dfpt"), 1, streams, seed=seed)
        for _ in range(3):
            runtime.apply(dms + dms.transpose(0, 2, 1))
        walls.append(np.mean([h.wall for h in runtime.history]))
    return float(walls[0] / walls[1])


def _cost_figure(raw: np.ndarray, composed: np.ndarray, title: str, unit: str) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    bins = np.logspace(
        np.log10(min(raw.min(), composed.min())), np.log10(max(raw.max(), composed.max())), 40
    )
    ax.hist(raw, bins=bins, alpha=0.6, label=f"raw batches ({len(raw)})")
    ax.hist(composed, bins=bins, alpha=0.6, label=f"micro-tasks ({len(composed)})")
    ax.set(xscale="log", xlabel=f"task cost ({unit})", ylabel="tasks", title=title)
    ax.legend()
    return Figure.from_matplotlib(
        fig,
        f"cost_distribution_{unit.replace(' ', '_')}",
        "Task-cost distribution before and after composition",
    )


@register(
    "hip_dfpt",
    quick=dict(molecule="ethane", basis="6-31g", grid_level=1, devices=4, streams=2),
    full=dict(molecule="butane", basis="6-31g", grid_level=2, devices=8, streams=2),
)
def real_dfpt(
    molecule: str, basis: str, grid_level: int, devices: int, streams: int, seed: int
) -> Result:
    """Real PySCF DFPT polarisability through the runtime: numerics, model, composition."""
    work = prepare(builtin_molecule(molecule), basis, grid_level)
    reference = reference_polarizability(work.system)
    raw_s, comp_s = measured_costs(work.raw, seed), measured_costs(work.composed, seed)
    errors = _model_errors(comp_s, work, seed)
    rows = []
    for name in BALANCERS:
        run = run_polarizability(work, name, reference, devices, streams, seed=seed)
        replay = replay_balance(run.runtime.plan, comp_s, streams, seed)
        rows.append(
            dict(
                molecule=molecule,
                basis=basis,
                **run.summary(),
                replay_balance=replay,
                tasks=len(work.composed.tasks),
            )
        )
    frame = pl.DataFrame(rows)
    pool = _pool_allocations(work, devices, streams, seed)
    speedup = float(raw_s.sum() / comp_s.sum())
    worst = float(frame["relative_error"].max())
    hip = frame.row(by_predicate=pl.col("balancer") == "hip-dfpt", named=True)
    pipeline = _pipeline_speedup(work, seed)
    before, after = cost_distribution(raw_s), cost_distribution(comp_s)
    notes = (
        f"{molecule}/{basis}: {len(work.raw.tasks)} raw batches -> "
        f"{len(work.composed.tasks)} micro-tasks; cost CV {before['cv']:.2f} -> "
        f"{after['cv']:.2f}, max/mean {before['max_over_mean']:.1f} -> "
        f"{after['max_over_mean']:.1f}; model MAPE "
        + ", ".join(f"{k} {v:.1%}" for k, v in errors.items())
        + f"; 2-stream pipeline speed-up {pipeline:.2f}x; Vxc error {work.vxc_error:.1e}; "
        f"allocations in iterations 2-3: pooled {pool['pooled']:.0f}, unpooled "
        f"{pool['unpooled']:.0f}"
    )
    claims = [
        Claim(
            "Runtime reproduces PySCF's polarisability (every balancer, max relative error)",
            metric="relative error",
            measured=worst,
            target=1e-8,
            comparison="<=",
            paper_figure="identical numerics",
            required=True,
            kind="sanity",
        ),
        Claim(
            "Runtime's ground-state XC potential matches PySCF nr_rks",
            metric="max abs error",
            measured=work.vxc_error,
            target=1e-10,
            comparison="<=",
            paper_figure="identical numerics",
            required=True,
            kind="sanity",
        ),
        Claim(
            "Branch-hybrid model from 5% samples beats a branch-blind fit (MAPE ratio)",
            metric="MAPE hybrid / MAPE global",
            measured=errors["branch-hybrid"] / errors["global-linear"],
            target=1.0,
            comparison="<",
            paper_figure="accurate with 5% samples",
            baseline="branch-blind linear fit",
        ),
        Claim(
            "Micro-task composition raises CPU throughput (raw / composed task time)",
            metric="speed-up",
            measured=speedup,
            target=1.0,
            comparison=">",
            paper_figure="part of +70% throughput",
            baseline="raw (uncomposed) tasks",
        ),
        Claim(
            "HIP-DFPT balance, its plan replayed on measured run-alone task costs (a "
            "replay, not the live balance: see live_balance)",
            metric="max/mean device time",
            measured=hip["replay_balance"],
            target=PAPER_BALANCE,
            comparison="<=",
            paper_figure="1.06",
        ),
        Claim(
            "Pooled allocator reuses buffers across iterations (hit rate, iterations 2-3)",
            metric="hit rate",
            measured=pool["pooled_hit_rate"],
            target=0.99,
            comparison=">=",
            paper_figure="GPU memory management",
        ),
    ]
    return Result(
        frame,
        claims=claims,
        notes=notes,
        data="real",
        figures=[
            _cost_figure(raw_s * 1e6, comp_s * 1e6, f"{molecule}/{basis} measured task times", "us")
        ],
    )


def _scale_figure(frame: pl.DataFrame) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    labels = frame["config"].to_list()
    for ax, column, title in zip(
        axes,
        ("balance", "occupation", "throughput_tflops"),
        ("max/mean device time", "occupation", "throughput (TFLOP/s)"),
        strict=True,
    ):
        ax.barh(labels, frame[column].to_list(), color="tab:blue")
        ax.set_title(title)
        ax.invert_yaxis()
    for ax in axes[1:]:
        ax.set_yticklabels([])
    fig.tight_layout()
    return Figure.from_matplotlib(fig, "scale_balance", "Simulated devices (see device model)")


@register(
    "hip_dfpt",
    quick=dict(atoms=10_000, devices=320, streams=4),
    full=dict(atoms=200_006, devices=8_192, streams=4),
)
def scale_balance(atoms: int, devices: int, streams: int, seed: int) -> Result:
    """Simulated scale: balance, occupation, throughput vs a per-batch port and baselines."""
    report = scale_study(atoms, devices, streams, seed)
    frame = pl.DataFrame(report.rows).with_columns(pl.lit(atoms).alias("atoms"))
    row = {r["config"]: r for r in report.rows}
    hip, sota = row["hip-dfpt"], row["sota"]
    others = [r for r in report.rows if r["config"].startswith("micro-tasks+")]
    best = max(others, key=lambda r: r["throughput_tflops"])
    best_other = best["throughput_tflops"]
    label = f"(simulated, {devices} devices, {atoms} atoms)"
    claims = [
        Claim(
            f"HIP-DFPT load-balance efficiency close to 1.06 {label}",
            metric="max/mean",
            measured=hip["balance"],
            target=PAPER_BALANCE,
            comparison="<=",
            paper_figure="1.06",
        ),
        Claim(
            f"Occupation gain over a per-batch single-stream port {label}",
            metric="occupation ratio",
            measured=hip["occupation"] / sota["occupation"],
            target=PAPER_OCCUPATION,
            comparison=">=",
            paper_figure="+55%",
            baseline="per-batch single-stream port",
        ),
        Claim(
            f"Throughput gain over a per-batch single-stream port {label}",
            metric="throughput ratio",
            measured=hip["throughput_tflops"] / sota["throughput_tflops"],
            target=PAPER_THROUGHPUT,
            comparison=">=",
            paper_figure="+70%",
            baseline="per-batch single-stream port",
            our_figure=hip["throughput_tflops"],
            figure_metric="throughput (TFLOP/s, simulated)",
            peer_figure=sota["throughput_tflops"],
        ),
        Claim(
            f"HIP-DFPT throughput >= every baseline balancer on the same micro-tasks {label}",
            metric="ratio to best baseline",
            measured=hip["throughput_tflops"] / best_other,
            target=1.0,
            comparison=">=",
            paper_figure="multi-level LB beats baselines",
            baseline=best["config"],
            our_figure=hip["throughput_tflops"],
            figure_metric="throughput (TFLOP/s, simulated)",
            peer_figure=best_other,
        ),
        # the simulator's task time is launch + points x basis^2 / rate(branch), exactly the
        # hybrid model's per-branch law: it can only miss by the injected noise
        Claim(
            "Sanity check (the model's law is the simulator's own cost formula; holds by "
            f"construction, not evidence): branch-hybrid model beats a branch-blind fit "
            f"{label}",
            metric="MAPE hybrid / MAPE global",
            measured=report.model_error["branch-hybrid"] / report.model_error["global-linear"],
            target=1.0,
            comparison="<",
            paper_figure="(sanity check) accurate with 5% samples",
            kind="sanity",
        ),
    ]
    notes = (
        "model MAPE: "
        + ", ".join(f"{k} {v:.1%}" for k, v in report.model_error.items())
        + f"; kernel-time CV raw {report.distribution['raw']['cv']:.2f} -> micro-tasks "
        f"{report.distribution['composed']['cv']:.2f}"
    )
    figures = [
        _scale_figure(frame),
        _cost_figure(
            report.raw_costs * 1e6, report.composed_costs * 1e6, "simulated kernel times", "sim us"
        ),
    ]
    return Result(frame, claims=claims, figures=figures, notes=notes, data="generated")


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(np.asarray(a).view(np.int64), np.asarray(b).view(np.int64)))


@register(
    "hip_dfpt",
    quick=dict(molecule="ethane", basis="6-31g", grid_level=1, devices=4, xc="pbe"),
    full=dict(molecule="benzene", basis="6-31g", grid_level=1, devices=4, xc="pbe"),
)
def live_balance(
    molecule: str, basis: str, grid_level: int, devices: int, xc: str, seed: int
) -> Result:
    """Live balance over OS processes, backend overhead, bit-identity, GGA vs PySCF.

    Every task's time is measured in place during the real CPHF iterations (thread CPU time:
    the machine has 2 cores shared with other jobs, so ``devices`` processes time-slice and
    wall time would measure the OS scheduler); micro-task sizes follow the tasks per device;
    the runtime adapts to unequal devices (``replan="adaptive"``: per-device speeds from the
    5% sample every device times, the model refitted on the live times, stealing in device
    time); unequal and changing devices: ``benchmarks/hip_dfpt/adaptive_balance.py``.
    """
    from schedlab.hip_dfpt.dft import pyscf_response

    work = prepare(  # the raw batches' features only: their task data is not used here
        builtin_molecule(molecule), basis, grid_level, xc, cache_ao=False, workers=devices,
        raw_store=False,
    )
    reference = reference_polarizability(work.system)
    live = run_polarizability(
        work, "hip-dfpt", reference, devices, 1, backend="process", seed=seed, replan="adaptive"
    )
    one = run_polarizability(work, "hip-dfpt", reference, 1, 1, seed=seed)
    two = run_polarizability(work, "hip-dfpt", reference, 2, 2, backend="process", seed=seed)
    hist = live.runtime.history
    cpu_bal = [h.cpu_balance for h in hist]
    overhead = [h.overhead_fraction for h in hist]
    nao = work.system.nao
    dms = np.random.default_rng(seed).standard_normal((3, nao, nao))
    dms = dms + dms.transpose(0, 2, 1)
    rt = Runtime(work.composed, make_balancer("hip-dfpt"), 1, 1, seed=seed)
    from schedlab.hip_dfpt.dft import coulomb_response

    ours = rt.apply(dms) + coulomb_response(work.system)(dms)
    theirs = pyscf_response(work.system)(dms)
    response_error = float(np.abs(ours - theirs).max() / np.abs(theirs).max())
    rows = [
        dict(
            iteration=i + 1,
            cpu_balance=h.cpu_balance,
            wall_balance=h.balance,
            overhead_fraction=h.overhead_fraction,
            wall_s=h.wall,
            task_cpu_s=float(np.nansum(h.task_cpu)) if h.task_cpu is not None else 0.0,
            mean_task_us=float(np.nanmean(h.task_cpu) * 1e6) if h.task_cpu is not None else 0.0,
        )
        for i, h in enumerate(hist)
    ]
    frame = pl.DataFrame(rows).with_columns(
        pl.lit(molecule).alias("molecule"), pl.lit(xc).alias("xc")
    )
    identical = _bits_equal(one.alpha, two.alpha) and _bits_equal(one.alpha, live.alpha)
    worst_diff = float(
        max(np.abs(one.alpha - two.alpha).max(), np.abs(one.alpha - live.alpha).max())
    )
    later = cpu_bal[1:] or cpu_bal
    notes = (
        f"{molecule}/{basis}/{xc}, {len(work.composed.tasks)} micro-tasks on {devices} "
        f"processes, basis values on the fly; live CPU-time balance per iteration "
        + ", ".join(f"{b:.3f}" for b in cpu_bal)
        + " (iteration 1 on the 5%-sample model and device speeds); "
        f"wall-time balance {np.mean([h.balance for h in hist]):.3f} (2 shared cores); "
        f"backend overhead {np.mean(overhead):.1%} of task CPU; polarisability error vs "
        f"PySCF {live.relative_error:.1e}; response error {response_error:.1e}; 1x1 "
        f"local, 2x2 and {devices}x1 processes bit-identical: {identical}"
    )
    claims = [
        Claim(
            f"Live load balance over {devices} processes (task CPU time measured in place; "
            "mean of iterations 2.., real run)",
            metric="max/mean device CPU time",
            measured=float(np.mean(later)),
            target=PAPER_BALANCE,
            comparison="<=",
            paper_figure="1.06",
        ),
        Claim(
            "Process backend overhead (CPU outside tasks / task CPU, real run)",
            metric="overhead fraction",
            measured=float(np.mean(overhead)),
            target=0.05,
            comparison="<=",
            paper_figure="issue: <= 5% per-task overhead",
        ),
        Claim(
            "Deterministic reduction: 1x1, 2x2 and Dx1 polarisabilities bit-identical",
            metric="max abs difference",
            measured=worst_diff,
            target=0.0,
            comparison="<=",
            paper_figure="identical numerics",
            required=True,
            kind="sanity",
        ),
        Claim(
            f"{xc} response potential matches PySCF gen_response (relative)",
            metric="relative error",
            measured=response_error,
            target=1e-10,
            comparison="<=",
            paper_figure="identical numerics",
            required=True,
            kind="sanity",
        ),
        Claim(
            f"{xc} polarisability matches PySCF's CPHF (relative)",
            metric="relative error",
            measured=live.relative_error,
            target=1e-10,
            comparison="<=",
            paper_figure="identical numerics",
            required=True,
            kind="sanity",
        ),
    ]
    return Result(frame, claims=claims, notes=notes, data="real")
