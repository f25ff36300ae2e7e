"""Headline experiments of X-Bucket (../shared/papers/15-xbucket.md), registered with reproduce.

* ``waste_by_workflow``: the four X-Bucket algorithms against the five alternatives on the five
  synthetic shapes and their phase-changing variants (one-at-a-time replay), and the same on a
  pool of workers for the makespan. Paper: the X-Bucket family beats the alternatives on
  every one of its eight workflows.
* ``family_vs_alternatives``: the paper's headline claim as stated (the X-Bucket family beats
  all five alternatives on each workflow), on the real traces in ../shared/data/xbucket when
  present (seeded synthetic workflows otherwise), replayed both per resource (as cctools'
  harness) and jointly.
* ``prediction_latency``: the cost of one prediction in steady state and of re-bucketing after
  a report, for every mode. Paper: at most 3.9 ms per prediction for the best algorithm; our
  issue's target is p99 <= 15 us per prediction and re-bucketing amortised under 1 ms.
"""

from __future__ import annotations

import time

import numpy as np
import polars as pl

from schedlab.core import Claim, Result, register
from schedlab.core.data import data_path
from schedlab.xbucket.compare import compare, run_one
from schedlab.xbucket.plots import plot_allocation_over_time, plot_waste_and_efficiency
from schedlab.xbucket.policies import ALTERNATIVES, XBUCKET_FAMILY, make_allocator
from schedlab.xbucket.simulator import ReplayConfig
from schedlab.xbucket.types import RESOURCES, Machine, ResourceReport, Resources
from schedlab.xbucket.workloads import WORKFLOWS, read_reports, synthetic

ALGORITHMS = (*XBUCKET_FAMILY, *ALTERNATIVES)


def family_wins(frame: pl.DataFrame) -> tuple[int, int]:
    """(wins, contests): (workflow, resource) pairs where the best X-Bucket algorithm wastes
    strictly less than every alternative."""
    wins = contests = 0
    for (_workflow,), group in frame.group_by(["workflow"], maintain_order=True):
        family = group.filter(pl.col("algorithm").is_in(XBUCKET_FAMILY))
        others = group.filter(pl.col("algorithm").is_in(ALTERNATIVES))
        for name in RESOURCES:
            contests += 1
            wins += int(family[f"waste_{name}"].min() < others[f"waste_{name}"].min())
    return wins, contests


@register("xbucket", quick=dict(tasks=600, pool_tasks=400),
          full=dict(tasks=5000, pool_tasks=2000))
def waste_by_workflow(tasks: int, pool_tasks: int, seed: int) -> Result:
    """X-Bucket wastes less than the five alternatives on most synthetic workflows."""
    frames, pooled = [], []
    sequential = ReplayConfig(workers=1, slots=1)
    pool = ReplayConfig(workers=4, slots=None, machine=Machine())  # 16 cores / 64 GiB workers
    for workflow in WORKFLOWS:
        trace = synthetic(workflow, tasks, seed)
        frames.append(compare(trace, ALGORITHMS, sequential, seed=seed,
                              labels=dict(workflow=workflow, setting="sequential")))
        if workflow.endswith("-phase"):
            continue
        small = synthetic(workflow, pool_tasks, seed)  # fits the 64 GiB worker (peaks < 40 GB)
        pooled.append(compare(small, ("pg-bucket", "de-bucket", "max-seen", "whole-machine"),
                              pool, seed=seed, labels=dict(workflow=workflow, setting="pool-4")))
    frame = pl.concat(frames)
    pool_frame = pl.concat(pooled)
    wins, contests = family_wins(frame)
    complete = float((frame["tasks"] == tasks).all() and (pool_frame["tasks"] == pool_tasks).all())
    eff = frame.select([pl.col(f"efficiency_{r}") for r in RESOURCES]).to_numpy()
    bounded = float(np.all((eff >= 0) & (eff <= 1 + 1e-9)))
    best_xb = _mean_makespan(pool_frame, ("pg-bucket", "de-bucket"))
    whole = _mean_makespan(pool_frame, ("whole-machine",))
    phase_trace = synthetic("bimodal-phase", tasks, seed)
    timeline = {name: run_one(phase_trace, name, sequential, seed=seed).attempts
                for name in ("pg-bucket", "de-bucket", "max-seen")}
    claims = [
        Claim("(ours, a weaker form of the paper's claim: see family_vs_alternatives for the "
              "paper's own) X-Bucket family has the lowest waste on most (workflow, resource) "
              "pairs of 5 synthetic shapes + 5 phase-changing, joint replay, 3 types each",
              metric="share of pairs won", measured=wins / contests, target=0.5,
              comparison=">", paper_figure="not in the paper (it claims all, on 8/8)",
              baseline="best of the five alternatives"),
        Claim("Every task completes despite failed attempts (no task lost)", metric="all done",
              measured=complete, target=1.0, comparison="==", required=True, kind="sanity"),
        Claim("Efficiency (consumed / allocated) lies in [0, 1] for every replay",
              metric="bounded", measured=bounded, target=1.0, comparison="==", required=True,
              kind="sanity"),
        Claim("On a pool of 4 workers of 16 cores / 64 GiB, X-Bucket's makespan is below "
              "Whole Machine's "
              "(packing more tasks per worker)", metric="makespan ratio xbucket/whole",
              measured=best_xb / whole, target=1.0, comparison="<",
              paper_figure="not in the paper's abstract", baseline="whole-machine",
              figure_metric="mean makespan on 4 workers (s)",
              our_figure=best_xb, peer_figure=whole, lower_is_better=True),
    ]
    figures = [plot_waste_and_efficiency(frame),
               plot_allocation_over_time(timeline, "bimodal-phase")]
    notes = (f"X-Bucket won {wins}/{contests} (workflow, resource) pairs. Failed attempts run "
             "their whole wall time before the kill (kill_fraction=1.0); failures report the "
             "true peak (replay semantics).")
    return Result(pl.concat([frame, pool_frame], how="diagonal_relaxed"), claims=claims,
                  figures=figures, notes=notes, data="generated")


def real_traces() -> dict[str, list]:
    """{workflow: tasks} of every ``*.txt`` report file under ``<data dir>/xbucket`` ({} if
    none; the data dir is ``--data`` / ``$SCHEDLAB_DATA``, see schedlab.core.data)."""
    folder = data_path("xbucket")
    if not folder.is_dir():
        return {}
    return {path.stem: read_reports(path) for path in sorted(folder.glob("*.txt"))}


def family_table(frame: pl.DataFrame) -> pl.DataFrame:
    """Per (mode, workflow, resource): best X-Bucket efficiency, best alternative's, who."""
    rows = []
    for (mode, workflow), group in frame.group_by(["mode", "workflow"], maintain_order=True):
        family = group.filter(pl.col("algorithm").is_in(XBUCKET_FAMILY))
        others = group.filter(pl.col("algorithm").is_in(ALTERNATIVES))
        for name in RESOURCES:
            column = f"efficiency_{name}"
            best_f = family.sort(column, descending=True).row(0, named=True)
            best_o = others.sort(column, descending=True).row(0, named=True)
            rows.append(dict(mode=mode, workflow=workflow, resource=name,
                             family_best=best_f["algorithm"], family_eff=best_f[column],
                             alternative_best=best_o["algorithm"],
                             alternative_eff=best_o[column],
                             family_wins=best_f[column] > best_o[column],
                             tie=abs(best_f[column] - best_o[column]) <= 1e-9))
    return pl.DataFrame(rows)


@register("xbucket", quick=dict(real_tasks=600, synthetic_tasks=300),
          full=dict(real_tasks=0, synthetic_tasks=2000))
def family_vs_alternatives(real_tasks: int, synthetic_tasks: int, seed: int) -> Result:
    """The X-Bucket family against the five alternatives on each workflow, per resource and
    jointly, on the real traces when present."""
    traces = real_traces()
    if traces:
        ran_with = f"real traces ({data_path('xbucket')})"
        workflows = {name: tasks[:real_tasks] if real_tasks else tasks
                     for name, tasks in traces.items()}
    else:
        ran_with = "seeded synthetic traces"
        workflows = {name: synthetic(name, synthetic_tasks, seed) for name in WORKFLOWS}
    config = ReplayConfig(workers=1, slots=1)
    frames = []
    for name, tasks in workflows.items():
        for per_resource in (True, False):
            frames.append(compare(tasks, ALGORITHMS, config, seed=seed,
                                  labels=dict(workflow=name), per_resource=per_resource))
    frame = pl.concat(frames, how="diagonal_relaxed")
    table = family_table(frame)
    claims = []
    where = (f"{len(workflows)} real workflows ({', '.join(workflows)})" if traces else
             f"{len(workflows)} seeded synthetic workflows")
    scale = f"first {real_tasks} tasks of each" if traces and real_tasks else "whole traces"
    if not traces:
        scale = f"{synthetic_tasks} tasks each"
    for mode, how in (("per-resource", "each resource replayed alone, as cctools' harness"),
                      ("joint", "resources replayed jointly: a task short of any type fails "
                                "and wastes all three")):
        part = table.filter(pl.col("mode") == mode)
        won = part.group_by("workflow").agg(pl.col("family_wins").all())["family_wins"]
        claims.append(Claim(
            f"The X-Bucket family (best of PG/PE/DG/DE) beats all five alternatives on each "
            f"workflow, on every resource ({mode}: {how}; {where}, {scale}; yardstick: "
            "efficiency = consumed / allocated, one task at a time, per category with pooled "
            "fallback, Whole Machine = trace max)",
            metric=f"share of workflows won on all 3 resources ({mode})",
            measured=float(won.mean()), target=1.0, comparison=">=",
            paper_figure="8/8 workflows", baseline="best of the five alternatives"))
        claims.append(Claim(
            f"Same, counted per (workflow, resource) pair ({mode})",
            metric=f"share of (workflow, resource) pairs won ({mode})",
            measured=float(part["family_wins"].mean()), target=1.0, comparison=">=",
            paper_figure="all pairs (8/8 workflows)", baseline="best of the five alternatives",
            our_figure=float(part["family_eff"].mean()),
            figure_metric=f"mean efficiency, consumed / allocated ({mode})",
            peer_figure=float(part["alternative_eff"].mean())))
    complete = all(int(t) == len(workflows[w]) for w, t in
                   zip(frame["workflow"], frame["tasks"], strict=True))
    eff = frame.select([pl.col(f"efficiency_{r}") for r in RESOURCES]).to_numpy()
    claims.append(Claim("Every task of every replay completes (no task lost)", metric="all done",
                        measured=float(complete), target=1.0, comparison="==", required=True,
                        kind="sanity"))
    claims.append(Claim("Efficiency lies in [0, 1] for every replay", metric="bounded",
                        measured=float(np.all((eff >= 0) & (eff <= 1 + 1e-9))), target=1.0,
                        comparison="==", required=True, kind="sanity"))
    lost = table.filter(~pl.col("family_wins"))
    lost_text = "; ".join(
        f"{r['mode']} {r['workflow']} {r['resource']}: {r['alternative_best']} "
        f"{r['alternative_eff']:.4f} {'ties' if r['tie'] else '>'} {r['family_best']} "
        f"{r['family_eff']:.4f}" for r in lost.iter_rows(named=True))
    won_pairs = {m: int(table.filter(pl.col("mode") == m)["family_wins"].sum())
                 for m in ("per-resource", "joint")}
    notes = (f"(workflow, resource) pairs won: per-resource {won_pairs['per-resource']}, joint "
             f"{won_pairs['joint']}, of {len(workflows) * 3} each. ")
    notes += (f"Where the family does not win: {lost_text}." if lost_text else
              "The family won every (mode, workflow, resource).")
    return Result(pl.concat([frame, table.with_columns(pl.lit("family-table").alias("kind"))],
                            how="diagonal_relaxed"),
                  claims=claims, ran_with=ran_with, notes=notes,
                  data="real" if traces else "stand-in")


def _mean_makespan(frame: pl.DataFrame, names: tuple[str, ...]) -> float:
    chosen = frame.filter(pl.col("algorithm").is_in(names))
    return float(chosen.group_by("workflow").agg(pl.col("makespan").min())["makespan"].mean())


def time_predictions(algorithm: str, workflow: str, tasks: int, seed: int,
                     probes: int = 2000) -> dict[str, float]:
    """Feed ``tasks`` completed reports, timing each observe(); then time ``probes`` allocate()
    calls in steady state (half fresh, half retries after a failure)."""
    trace = synthetic(workflow, tasks, seed)
    allocator = make_allocator(algorithm, Machine.covering(trace), seed=seed)
    observe_ns = np.empty(tasks)
    for i, task in enumerate(trace):
        report = ResourceReport(task.peak, task.peak, task.wall_time)
        allocator.allocate(task.category)
        start = time.perf_counter_ns()
        allocator.observe(task.category, report)
        observe_ns[i] = time.perf_counter_ns() - start
    predict_ns = np.empty(probes)
    clock = time.perf_counter_ns
    for i in range(probes):
        task = trace[i % tasks]
        failed = None
        if i % 2:
            small = Resources(task.peak.cores / 2, task.peak.memory / 2, task.peak.disk)
            failed = ResourceReport(small, task.peak, task.wall_time, ("cores", "memory"))
        start = clock()
        allocator.allocate(task.category, failed)
        predict_ns[i] = clock() - start
    steady = observe_ns[min(10, tasks - 1):]
    return dict(predict_mean_us=float(predict_ns.mean() / 1e3),
                predict_p99_us=float(np.percentile(predict_ns, 99) / 1e3),
                predict_p999_us=float(np.percentile(predict_ns, 99.9) / 1e3),
                predict_max_us=float(predict_ns.max() / 1e3),
                rebucket_mean_us=float(steady.mean() / 1e3),
                rebucket_p99_us=float(np.percentile(steady, 99) / 1e3))


@register("xbucket", quick=dict(tasks=2000), full=dict(tasks=2000))
def prediction_latency(tasks: int, seed: int) -> Result:
    """X-Bucket's steady-state prediction takes microseconds, far under the paper's 3.9 ms."""
    modes = (*XBUCKET_FAMILY, "quantized")
    rows = [dict(algorithm=m, workflow="trimodal", tasks=tasks,
                 **time_predictions(m, "trimodal", tasks, seed)) for m in modes]
    frame = pl.DataFrame(rows)
    worst_p99 = float(frame["predict_p99_us"].max())
    worst_tail_ms = float(frame["predict_p999_us"].max()) / 1e3
    worst_rebucket_ms = float(frame["rebucket_mean_us"].max()) / 1e3
    claims = [
        Claim("The best X-Bucket algorithm's prediction takes at most 3.9 ms in steady state "
              "(ours: p99.9 of the slowest mode; single maxima are OS preemption on a shared "
              "machine and are kept in the frame)", metric="worst p99.9 prediction (ms)",
              measured=worst_tail_ms, target=3.9, comparison="<=", paper_figure="3.9 ms"),
        Claim("p99 prediction latency <= 15 us for every mode (issue target; the reference C "
              "code's p99 is 2.5-15 us)", metric="worst p99 (us)", measured=worst_p99,
              target=15.0, comparison="<=", paper_figure="reference: 2.5-15 us p99"),
        Claim("Re-bucketing after a report is amortised under 1 ms (issue target), "
              f"{tasks}-task trace", metric="worst mean observe (ms)",
              measured=worst_rebucket_ms, target=1.0, comparison="<=",
              paper_figure="issue target"),
    ]
    return Result(frame, claims=claims, data="generated",
                  notes="Timed in-process with perf_counter_ns on a shared machine.")
