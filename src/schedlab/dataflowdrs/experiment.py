"""DataFlowDrs headline experiments (paper 09), registered with ``schedlab reproduce``.

Every experiment runs real workflows as processes on this machine, traced with dftracer:

* ``bottleneck_ranking``      injected bottleneck ranked first in >= 95% of seeded variants,
                              against three baseline diagnosers; DFL compression ratio.
* ``recommendation_speedup``  re-running with the top recommendation is measurably faster.
* ``scaling_prediction``      models fitted on small scales predict a larger one.
* ``tracing_overhead``        dftracer costs <= 5% of workflow time (measured, not assumed).
* ``tier_parallelism_grid``   bottlenecks ranked for each storage tier x parallelism.
* ``open_world``              real tools (python, dd, tar, sort|gzip, h5py) labelled before
                              diagnosis: top-1 vs labels and the Drishti-rule baseline, the
                              remedy's measured speed-up, strace/dftracer CPU and wall overhead.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import replace

import polars as pl

from schedlab.core import Claim, Figure, Result, register
from schedlab.core.doctor import dist_version
from schedlab.dataflowdrs.diagnosis import analyse
from schedlab.dataflowdrs.engine import Workspace, diagnose_analysis, run_config
from schedlab.dataflowdrs.policies import DIAGNOSERS
from schedlab.dataflowdrs.scaling import fit_all, predict_frame
from schedlab.dataflowdrs.traces import read_trace
from schedlab.dataflowdrs.workloads import (
    BOTTLENECK_KINDS,
    WORKFLOWS,
    WorkflowConfig,
    inject,
    seeded_config,
)

#: what the report's "What ran" says: real processes traced by the pip-shipped dftracer
_TRACED = f"dftracer {dist_version('dftracer') or '?'} (pip, LD_PRELOAD) on real processes"


def _bar_figure(frame: pl.DataFrame, x: str, y: str, hue: str, name: str, ylabel: str,
                caption: str) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = sorted(frame[x].unique().to_list())
    hues = sorted(frame[hue].unique().to_list())
    fig, ax = plt.subplots(figsize=(7, 3.2))
    width = 0.8 / max(1, len(hues))
    for i, h in enumerate(hues):
        part = {r[x]: r[y] for r in frame.filter(pl.col(hue) == h).iter_rows(named=True)}
        ax.bar([j + i * width for j in range(len(xs))], [part.get(v, 0) for v in xs], width,
               label=str(h))
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(xs))], xs)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return Figure.from_matplotlib(fig, name, caption)


def _variant(workflow: str, kind: str, seed: int, index: int, scale: int | None):
    base = seeded_config(workflow, seed * 1009 + index * 31 + len(kind), scale=scale)
    return inject(base, kind, seed * 7919 + index)


@register("dataflowdrs", quick=dict(variants=1, scale=4), full=dict(variants=3, scale=6))
def bottleneck_ranking(variants: int, scale: int, seed: int) -> Result:
    """The injected bottleneck is ranked first by DataFlowDrs in >= 95% of seeded variants."""
    from schedlab.dataflowdrs.parslrun import available

    engine = "parsl" if available() else "builtin"  # the workflow system runs the variants
    space = Workspace.create()
    rows = []
    try:
        for workflow in WORKFLOWS:
            for kind in BOTTLENECK_KINDS:
                for v in range(variants):
                    cfg, truth = _variant(workflow, kind, seed, v, scale)
                    record = run_config(cfg, space, engine=engine)
                    start = time.perf_counter()
                    analysis = analyse(read_trace(record.trace_dir))
                    seconds = time.perf_counter() - start
                    for name in DIAGNOSERS:
                        ranked = diagnose_analysis(analysis, name).ranked
                        keys = [(b.kind, b.target) for b in ranked]
                        rank = keys.index((truth.kind, truth.target)) + 1 if (
                            truth.kind, truth.target) in keys else 0
                        rows.append(dict(workflow=workflow, kind=kind, target=truth.target,
                                         variant=v, engine=engine, diagnoser=name,
                                         top1=rank == 1, rank=rank,
                                         top_kind=ranked[0].kind if ranked else "",
                                         top_target=ranked[0].target if ranked else "",
                                         makespan=record.makespan, analysis_s=seconds,
                                         reduction=analysis.compressed.reduction))
    finally:
        space.close()
    frame = pl.DataFrame(rows)
    acc = frame.group_by("diagnoser").agg(pl.col("top1").mean().alias("accuracy"))
    accuracy = dict(acc.iter_rows())
    best_name = max((k for k in accuracy if k != "dataflowdrs"), key=accuracy.__getitem__)
    best_baseline = accuracy[best_name]
    by_kind = frame.group_by(["diagnoser", "kind"]).agg(pl.col("top1").mean().alias("acc"))
    reduction = float(frame.filter(pl.col("diagnoser") == "dataflowdrs")["reduction"].mean())
    claims = [
        Claim("DataFlowDrs ranks the injected bottleneck first in >= 95% of seeded variants",
              metric="top-1 accuracy", measured=accuracy["dataflowdrs"], target=0.95,
              paper_figure="issue: >= 95% of seeded variants"),
        Claim("DataFlowDrs ranks better than every baseline diagnoser (io-volume, io-time, "
              "task-time)", metric="accuracy margin over best baseline",
              measured=accuracy["dataflowdrs"] - best_baseline, target=0.0, comparison=">",
              paper_figure="abstract: improvements over baseline and state-of-the-art",
              baseline=best_name, our_figure=accuracy["dataflowdrs"],
              figure_metric="top-1 accuracy",
              peer_figure=best_baseline),
        Claim("Compressing repeated patterns shrinks the DFL analysis data (our target: >= 2x)",
              metric="nodes+edges before / after", measured=reduction, target=2.0,
              paper_figure="abstract: reduces analysis data by compressing patterns"),
    ]
    fig = _bar_figure(by_kind, "kind", "acc", "diagnoser", "ranking_accuracy",
                      "top-1 accuracy", "Share of variants whose injected bottleneck is ranked "
                      "first, by kind and diagnoser.")
    return Result(frame, claims=claims, ran_with=_TRACED, data="generated", figures=[fig],
                  notes=f"accuracy by diagnoser: {accuracy}")


def _measure(configs: list[WorkflowConfig], space: Workspace, reps: int) -> dict[str, float]:
    """Best-of-``reps`` untraced makespan per distinct configuration, runs interleaved so
    other users' load on the machine falls on every configuration alike."""
    distinct = {repr(c): c for c in configs}
    best: dict[str, float] = {}
    for _ in range(reps):
        for key, cfg in distinct.items():
            span = run_config(cfg, space, tracer="untraced").makespan
            best[key] = min(best.get(key, span), span)
    return best


@register("dataflowdrs", quick=dict(reps=2, scale=4, kinds=2),
          full=dict(reps=3, scale=6, kinds=3))
def recommendation_speedup(reps: int, scale: int, kinds: int, seed: int) -> Result:
    """Re-running with DataFlowDrs's top recommendation is faster than the baseline config."""
    space = Workspace.create()
    rows = []
    try:
        for k in range(kinds):  # quick: two of the three kinds per seed, rotating
            kind = BOTTLENECK_KINDS[(seed + k) % len(BOTTLENECK_KINDS)]
            workflow = list(WORKFLOWS)[(seed + 2 * k) % len(WORKFLOWS)]
            cfg, truth = _variant(workflow, kind, seed, 100 + k, scale)
            analysis = analyse(read_trace(run_config(cfg, space).trace_dir))
            chosen = {}
            for name in DIAGNOSERS:
                recs = diagnose_analysis(analysis, name).recommendations
                chosen[name] = (recs[0], recs[0].apply(cfg)) if recs else (None, cfg)
            spans = _measure([cfg, *(new for _, new in chosen.values())], space, reps)
            for name, (rec, new) in chosen.items():
                rows.append(dict(workflow=workflow, kind=kind, target=truth.target,
                                 diagnoser=name, action=rec.action if rec else "",
                                 rec_target=rec.target if rec else "",
                                 baseline_s=spans[repr(cfg)], recommended_s=spans[repr(new)],
                                 speedup=spans[repr(cfg)] / spans[repr(new)]))
    finally:
        space.close()
    frame = pl.DataFrame(rows)
    mean = dict(frame.group_by("diagnoser").agg(
        pl.col("speedup").log().mean().exp()).iter_rows())
    best_name = max((k for k in mean if k != "dataflowdrs"), key=mean.__getitem__)
    best_baseline = mean[best_name]
    claims = [
        Claim("The configuration DataFlowDrs recommends runs faster than the baseline "
              "configuration (our target: geo-mean speedup >= 1.1x)", metric="speedup",
              measured=mean["dataflowdrs"], target=1.1,
              paper_figure="abstract: substantially reduces the impact of bottlenecks"),
        Claim("DataFlowDrs's recommendation beats the best baseline diagnoser's",
              metric="speedup ratio over best baseline",
              measured=mean["dataflowdrs"] / best_baseline, target=1.0, comparison=">",
              paper_figure="abstract: improvements over baseline and state-of-the-art",
              figure_metric="geo-mean speed-up",
              baseline=best_name, our_figure=mean["dataflowdrs"], peer_figure=best_baseline),
    ]
    fig = _bar_figure(frame, "kind", "speedup", "diagnoser", "recommendation_speedup",
                      "speedup (baseline / recommended)",
                      "Makespan speed-up of re-running with each diagnoser's top recommendation.")
    return Result(frame, claims=claims, ran_with=_TRACED, data="generated", figures=[fig],
                  notes=f"geo-mean speed-ups: {mean}")


@register("dataflowdrs", quick=dict(train=(2, 3, 4), test=6),
          full=dict(train=(2, 3, 4, 6, 8), test=12))
def scaling_prediction(train: tuple, test: int, seed: int) -> Result:
    """Models fitted on 3-5 small runs predict data volume and time at a larger scale."""
    space = Workspace.create()
    frames = []
    try:
        for workflow in ("genomes", "mapreduce"):
            cfg = WorkflowConfig(workflow=workflow, size_kb=256 + 64 * (seed % 3))
            runs = [(float(n), analyse(read_trace(run_config(replace(cfg, scale=n),
                                                             space).trace_dir)))
                    for n in train]
            actual = analyse(read_trace(run_config(replace(cfg, scale=test), space).trace_dir))
            frames.append(predict_frame(fit_all(runs), test, actual)
                          .with_columns(pl.lit(workflow).alias("workflow")))
    finally:
        space.close()
    frame = pl.concat(frames).filter(pl.col("rel_error").is_not_null())
    volume = frame.filter(pl.col("quantity") == "edge_bytes")
    times = frame.filter(pl.col("quantity").is_in(["task_time", "makespan"]))
    claims = [
        Claim("Data volume per DFL edge is predicted at a larger scale within 5% (median)",
              metric="median relative error, edge bytes",
              measured=float(volume["rel_error"].median()), target=0.05, comparison="<=",
              paper_figure="abstract: predicting data flow scaling"),
        Claim("Task-group time and makespan are predicted within 30% (median; our stated "
              "error on a shared 2-core machine)", metric="median relative error, time",
              measured=float(times["rel_error"].median()), target=0.30, comparison="<=",
              paper_figure="abstract: interpretable models of data flow"),
        Claim("The instance count of every task group is predicted exactly",
              metric="max relative error, instances",
              measured=float(frame.filter(pl.col("quantity") == "instances")["rel_error"]
                             .max() or 0.0), target=1e-6, comparison="<=", required=True,
              kind="sanity"),
    ]
    return Result(frame, claims=claims, ran_with=_TRACED, data="generated",
                  notes=f"trained on scales {list(train)}, tested at {test}")


@register("dataflowdrs", quick=dict(reps=3, workflows=("mapreduce",)),
          full=dict(reps=5, workflows=("mapreduce", "genomes")))
def tracing_overhead(reps: int, workflows: tuple, seed: int) -> Result:
    """dftracer's LD_PRELOAD tracing costs at most 5% of workflow time."""
    space = Workspace.create()
    rows = []
    # tasks of ~0.1-0.4 s: dftracer's fixed start-up cost (~14 ms per process here) would
    # dominate the 20 ms toy tasks of the other experiments, and no real workflow has those
    heavy = {"map": 150.0, "reduce": 100.0, "collect": 100.0, "individuals": 150.0,
             "individuals_merge": 40.0, "sifting": 100.0, "mutation_overlap": 100.0,
             "frequency": 100.0}
    try:
        for workflow in workflows:
            cfg = WorkflowConfig(workflow=workflow, scale=4, size_kb=2048, work=heavy)
            for rep in range(reps):  # alternate so background load hits both alike
                order = ("untraced", "dftracer") if (rep + seed) % 2 == 0 else (
                    "dftracer", "untraced")
                for tracer in order:
                    record = run_config(cfg, space, tracer=tracer)
                    rows.append(dict(workflow=workflow, rep=rep, tracer=tracer,
                                     makespan=record.makespan, cpu=record.cpu))
    finally:
        space.close()
    frame = pl.DataFrame(rows)
    wall = _overhead(frame, "makespan")
    cpu = _overhead(frame, "cpu")
    claims = [
        Claim("Tracing overhead is at most 5% of workflow time (measured wall clock)",
              metric="makespan traced / untraced - 1", measured=wall, target=0.05,
              comparison="<=", paper_figure="issue: <= 5%; abstract: lightweight"),
        Claim("Tracing overhead is at most 5% of the tasks' CPU time (robust to other users' "
              "load on the shared machine)", metric="CPU traced / untraced - 1",
              measured=cpu, target=0.05, comparison="<=",
              paper_figure="issue: <= 5%; abstract: lightweight"),
    ]
    return Result(frame, claims=claims, ran_with=_TRACED, data="generated",
                  notes=f"wall overhead {wall:.3f}, CPU {cpu:.3f}")


def _overhead(frame: pl.DataFrame, column: str) -> float:
    """Geometric mean over workflows of median(traced) / median(untraced), minus one."""
    ratios = []
    for workflow in frame["workflow"].unique().to_list():
        part = frame.filter(pl.col("workflow") == workflow)
        traced = statistics.median(part.filter(pl.col("tracer") == "dftracer")[column])
        plain = statistics.median(part.filter(pl.col("tracer") == "untraced")[column])
        ratios.append(traced / plain)
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios)) - 1


@register("dataflowdrs", quick=dict(parallelism=(1, 2), scale=4),
          full=dict(parallelism=(1, 2, 4), scale=8))
def tier_parallelism_grid(parallelism: tuple, scale: int, seed: int) -> Result:
    """Bottlenecks quantified and ranked for each storage tier x task parallelism."""
    space = Workspace.create()
    rows = []
    try:
        for tier in ("tmpfs", "local", "shared"):
            for p in parallelism:
                cfg = WorkflowConfig(workflow="genomes", scale=scale, parallelism=p,
                                     default_tier=tier, size_kb=2048 + 256 * (seed % 2))
                record = run_config(cfg, space)
                diagnosis = diagnose_analysis(analyse(read_trace(record.trace_dir)))
                top = diagnosis.ranked[0] if diagnosis.ranked else None
                rows.append(dict(tier=tier, parallelism=p, makespan=record.makespan,
                                 top_kind=top.kind if top else "",
                                 top_target=top.target if top else "",
                                 top_saving=top.saving if top else 0.0))
    finally:
        space.close()
    frame = pl.DataFrame(rows)
    span = {(r["tier"], r["parallelism"]): r["makespan"] for r in frame.iter_rows(named=True)}
    slower = statistics.mean(span[("shared", p)] > span[("tmpfs", p)] for p in parallelism)
    # what the ranking should say: one worker on fast storage is parallelism-bound; with
    # two or more workers on the throttled tier, the tier is
    expected = {(t, p): "parallelism" for t in ("tmpfs", "local") for p in parallelism
                if p == 1}
    expected.update({("shared", p): "slow-tier" for p in parallelism if p >= 2})
    top = {(r["tier"], r["parallelism"]): r["top_kind"] for r in frame.iter_rows(named=True)}
    matched = statistics.mean(top[cell] == kind for cell, kind in expected.items())
    claims = [
        Claim("The shared (throttled) tier is slower than node-local tmpfs at every "
              "parallelism", metric="share of parallelism levels", measured=slower,
              target=1.0, paper_figure="abstract: tradeoffs of parallelism and storage",
              kind="sanity"),  # the shared tier is throttled by the harness
        Claim("The top bottleneck follows the combination: parallelism with 1 worker on fast "
              "tiers, the storage tier with >= 2 workers on the shared tier",
              metric="share of grid cells as expected", measured=matched, target=1.0,
              paper_figure="abstract: rank bottlenecks per parallelism x storage"),
    ]
    return Result(frame, claims=claims, ran_with=_TRACED, data="generated",
                  figures=[_grid_figure(frame)])


def _grid_figure(frame: pl.DataFrame) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tiers = ["tmpfs", "local", "shared"]
    levels = sorted(frame["parallelism"].unique().to_list())
    fig, ax = plt.subplots(figsize=(5, 2.8))
    cell = {(r["tier"], r["parallelism"]): r for r in frame.iter_rows(named=True)}
    grid = [[cell[(t, p)]["makespan"] for p in levels] for t in tiers]
    image = ax.imshow(grid, cmap="viridis_r")
    for i, t in enumerate(tiers):
        for j, p in enumerate(levels):
            ax.text(j, i, f"{grid[i][j]:.2f}s\n{cell[(t, p)]['top_kind']}", ha="center",
                    va="center", fontsize=7, color="white")
    ax.set_xticks(range(len(levels)), [f"p={p}" for p in levels])
    ax.set_yticks(range(len(tiers)), tiers)
    fig.colorbar(image, ax=ax, label="makespan (s)")
    return Figure.from_matplotlib(fig, "tier_parallelism", "Makespan and top bottleneck per "
                                  "storage tier and parallelism (genomes).")


@register("dataflowdrs", quick=dict(scale=1.0, reps=1), full=dict(scale=1.0, reps=3))
def open_world(scale: float, reps: int, seed: int) -> Result:
    """Real tools labelled before diagnosis: top-1 vs labels and Drishti, remedy speed-up."""
    from schedlab.dataflowdrs.openworld import evaluate

    del seed  # the workloads are fixed programs; inputs are seeded inside
    diag, timing = evaluate(scale=scale, reps=reps)
    frame = pl.DataFrame(diag)
    times = pl.DataFrame(timing)
    acc = dict(frame.group_by("diagnoser").agg(pl.col("correct").mean()).iter_rows())
    ours, drishti = float(acc.get("dataflowdrs", 0.0)), float(acc.get("drishti", 0.0))
    listed = dict(frame.group_by("diagnoser").agg(pl.col("listed").mean()).iter_rows())
    drishti_any = float(listed.get("drishti", 0.0))
    med = (times.group_by("workload", "variant", "tracer").agg(pl.col("wall").median(),
                                                              pl.col("cpu").median()))
    lookup = {(r["workload"], r["variant"], r["tracer"]): r for r in med.iter_rows(named=True)}
    speedups = [lookup[(w, "original", "untraced")]["wall"] / r["wall"]
                for (w, v, _), r in lookup.items() if v.startswith("remedy:")
                and (w, "original", "untraced") in lookup and r["wall"] > 0]
    speedup = math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else 0.0

    def overhead(tracer: str, column: str) -> float:
        ratios = [lookup[(w, "original", tracer)][column] / r[column]
                  for (w, v, t), r in lookup.items() if v == "original" and t == "untraced"
                  and (w, "original", tracer) in lookup and r[column] > 0]
        return math.exp(statistics.fmean(math.log(x) for x in ratios)) - 1 if ratios else 0.0

    claims = [
        Claim("DataFlowDrs's top finding matches the expert label on real tools it was not "
              "designed around (our target)", metric="top-1 accuracy", measured=ours,
              target=0.8, paper_figure="issue 30: open-world evaluation"),
        Claim("DataFlowDrs beats the Drishti-rule baseline on the same traces",
              metric="top-1 accuracy margin", measured=ours - drishti, target=0.0,
              comparison=">", paper_figure="abstract: better than baseline methods",
              figure_metric="top-1 accuracy",
              baseline="Drishti rules", our_figure=ours, peer_figure=drishti),
        Claim("DataFlowDrs's first finding is right more often than the label appears anywhere "
              "among Drishti's HIGH insights (the baseline read generously)",
              metric="top-1 minus Drishti's any-insight hit rate",
              measured=ours - drishti_any, target=0.0, comparison=">=",
              paper_figure="abstract: better than baseline methods",
              baseline="Drishti rules (any HIGH insight)"),
        Claim("The recommended remedy, run untraced, is faster (geo-mean over workloads with "
              "a remedy variant; our target)", metric="speed-up", measured=speedup,
              target=1.1, paper_figure="abstract: recommendations improve performance"),
        Claim("dftracer's CPU-time overhead on these tools is at most 5%",
              metric="CPU traced / untraced - 1 (geo-mean)",
              measured=overhead("dftracer-stdio", "cpu"), target=0.05, comparison="<=",
              paper_figure="issue: <= 5%"),
        Claim("strace's CPU-time overhead on these tools is at most 5%",
              metric="CPU traced / untraced - 1 (geo-mean)",
              measured=overhead("strace", "cpu"), target=0.05, comparison="<=",
              paper_figure="issue: <= 5%"),
    ]
    notes = (f"accuracy dataflowdrs {ours:.2f}, drishti {drishti:.2f} (label among its HIGH "
             f"insights: {drishti_any:.2f}); remedy speed-ups "
             f"{[round(s, 2) for s in speedups]}; wall overhead dftracer "
             f"{overhead('dftracer-stdio', 'wall'):.2f}, strace {overhead('strace', 'wall'):.2f}")
    return Result(frame.drop("evidence"), claims=claims,
                  ran_with="real programs (python, dd, tar, sort, gzip, h5py) traced by strace "
                           "-ff; untraced / strace / dftracer-stdio timed", notes=notes,
                  data="real")
