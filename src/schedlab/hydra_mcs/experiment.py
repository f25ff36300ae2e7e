"""Headline experiment: instances solved over time, sequential vs naive vs RC-parallel (vs GPU).

Paper (../shared/papers/02-hydra_mcs.md): Hydra-MCS's RC metric "accurately" estimates the
remaining computation; sharing only where RC says so beats McSplit-style parallel splitting;
the GPU adds ~3x on top. We run every policy on the same seeded G(n,p) pairs, plot the fraction
solved against time, check that every policy returns the same (verified) size, and calibrate RC
against exact subtree node counts.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from schedlab.core import Claim, Figure, Result, register  # noqa: E402
from schedlab.hydra_mcs.api import solve  # noqa: E402
from schedlab.hydra_mcs.gpu import cuda_available  # noqa: E402
from schedlab.hydra_mcs.graph import induced, mcsplit_order, to_bitsets  # noqa: E402
from schedlab.hydra_mcs.rc import calibrate, trace_frame  # noqa: E402
from schedlab.hydra_mcs.state import Searcher  # noqa: E402
from schedlab.hydra_mcs.verify import check_mapping  # noqa: E402
from schedlab.hydra_mcs.workloads import gnp_pairs  # noqa: E402


def _runs(instances, threads: int, timeout: float) -> pl.DataFrame:
    policies = [("mcsplit", 1), ("naive-parallel", threads), ("hydra-cpu", threads)]
    if cuda_available():
        policies.append(("hydra-gpu", threads))
    rows = []
    for inst in instances:
        for name, th in policies:
            r = solve(
                inst.g0, inst.g1, policy=name, threads=th, timeout=timeout, gpu=name == "hydra-gpu"
            )
            valid = check_mapping(inst.g0, inst.g1, list(r.mapping.items())) is None
            rows.append(
                dict(
                    instance=inst.name,
                    policy=name,
                    threads=th,
                    size=r.size,
                    nodes=r.nodes,
                    seconds=r.seconds,
                    optimal=r.optimal,
                    valid=valid,
                    tasks_shared=r.tasks_shared,
                    offloaded=r.offloaded,
                )
            )
    return pl.DataFrame(rows)


def long_pairs(count: int) -> list:
    """The first ``count`` real s30 ARG pairs of ../shared/data/mcs (the reference McSplit
    takes 7-16 s on each, our sequential search 2-5 s): instances long enough for a
    work-sharing comparison, unlike the millisecond G(n,p) pairs. [] when the data is absent."""
    from schedlab.core.data import data_dir
    from schedlab.hydra_mcs.readers import read_arg
    from schedlab.hydra_mcs.workloads import Instance

    folder = data_dir() / "mcs"
    out = []
    for k in range(count):
        a, b = folder / f"s30.A{k:02d}", folder / f"s30.B{k:02d}"
        if a.is_file() and b.is_file():
            out.append(Instance(f"s30.{k:02d}", read_arg(a), read_arg(b)))
    return out


def _sharing_runs(instances, threads: int, rounds: int = 2) -> pl.DataFrame:
    """naive-parallel vs hydra-cpu at ``threads``, alternating which runs first: wall time and
    this process's CPU time (all threads) per run."""
    import time

    rows = []
    for rnd in range(rounds):
        for inst in instances:
            order = (
                ("naive-parallel", "hydra-cpu") if rnd % 2 == 0 else ("hydra-cpu", "naive-parallel")
            )
            for name in order:
                cpu0 = time.process_time()
                r = solve(inst.g0, inst.g1, policy=name, threads=threads)
                cpu = time.process_time() - cpu0
                rows.append(
                    dict(
                        instance=inst.name,
                        policy=name,
                        round=rnd,
                        size=r.size,
                        seconds=r.seconds,
                        cpu_s=cpu,
                        tasks_shared=r.tasks_shared,
                        valid=check_mapping(inst.g0, inst.g1, list(r.mapping.items())) is None,
                    )
                )
    return pl.DataFrame(rows)


def _calibration(instances) -> pl.DataFrame:
    frames = []
    for inst in instances:
        o0, o1 = mcsplit_order(inst.g0, inst.g1)
        s0 = induced(inst.g0, o0)
        s = Searcher(to_bitsets(s0, induced(inst.g1, o1)), s0.n, trace_rows=4000, trace_depth=4)
        s.load_root()
        s.run(np.zeros(4, np.int64), 1 << 62)
        frames.append(trace_frame(s.trace).with_columns(pl.lit(inst.name).alias("instance")))
    return pl.concat(frames)


def _plot(runs: pl.DataFrame, calib: pl.DataFrame, rho: float) -> Figure:
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    total = runs["instance"].n_unique()
    for name in runs["policy"].unique(maintain_order=True):
        t = np.sort(runs.filter((pl.col("policy") == name) & pl.col("optimal"))["seconds"])
        a.step(np.concatenate([[0], t]), np.arange(t.size + 1) / total, where="post", label=name)
    a.set_xscale("symlog", linthresh=0.01)
    a.set(xlabel="time (s)", ylabel="fraction of instances solved", title="solved over time")
    a.legend()
    b.scatter(calib["rc"], np.log2(calib["subtree_nodes"] + 1.0), s=4, alpha=0.4)
    b.set(
        xlabel="RC (log2 estimate)",
        ylabel="log2(exact subtree nodes + 1)",
        title=f"RC calibration, Spearman rho = {rho:.2f}",
    )
    return Figure.from_matplotlib(
        fig,
        "hydra_mcs_solved_over_time",
        "Instances solved over time, and RC vs exact subtree size",
    )


@register(
    "hydra_mcs",
    quick=dict(instances=6, n=18, p=0.4, threads=2, timeout=10.0, long=0),
    full=dict(instances=20, n=26, p=0.35, threads=2, timeout=120.0, long=3),
)
def solved_over_time(
    instances: int, n: int, p: float, threads: int, timeout: float, seed: int, long: int = 0
) -> Result:
    """RC-driven sharing solves seeded G(n,p) MCS pairs faster than naive parallel splitting."""
    pairs = gnp_pairs(instances, n, p, seed)
    runs = _runs(pairs, threads, timeout)
    calib = _calibration(pairs)
    stats = calibrate(calib)
    rho, gap_rho = stats["rc"], stats["gap_only"]
    agree = (
        runs.filter(pl.col("optimal"))
        .group_by("instance")
        .agg((pl.col("size").n_unique() == 1).alias("same"))
    )
    valid = float(runs["valid"].all() and agree["same"].all())
    tot = {
        k: float(runs.filter(pl.col("policy") == k)["seconds"].sum())
        for k in ("mcsplit", "naive-parallel", "hydra-cpu")
    }
    shared = {
        k: float(runs.filter(pl.col("policy") == k)["tasks_shared"].sum())
        for k in ("naive-parallel", "hydra-cpu")
    }
    claims = [
        Claim(
            "Every policy returns a verified mapping of the same (optimal) size",
            metric="all agree and verify (1 = yes)",
            measured=valid,
            target=1.0,
            comparison="==",
            paper_figure="exact solver",
            required=True,
            kind="sanity",
        ),
        Claim(
            "RC ranks subtrees by their remaining computation (Spearman rho vs exact counts)",
            metric="Spearman rho",
            measured=rho,
            target=0.5,
            comparison=">=",
            paper_figure="'accurately estimate' (no figure in abstract)",
        ),
        Claim(
            "RC ranks subtrees better than the plain gap (bound - incumbent) alone",
            metric="Spearman rho of RC minus rho of the gap",
            measured=rho - gap_rho,
            target=0.0,
            comparison=">",
            paper_figure="RC's added value (can fail)",
            baseline="plain gap (bound - incumbent)",
            our_figure=rho,
            figure_metric="Spearman rho",
            peer_figure=gap_rho,
        ),
        Claim(
            "Sanity check, holds by construction (hydra-cpu shares at most one task per idle "
            "thread, naive splits every open level): RC sharing hands over fewer tasks",
            metric="tasks shared, naive / hydra-cpu",
            measured=shared["naive-parallel"] / max(1.0, shared["hydra-cpu"]),
            target=1.0,
            comparison=">",
            paper_figure="'minimize unnecessary task sharing' (not evidence)",
            kind="sanity",
        ),
        Claim(
            f"RC sharing (hydra-cpu) is faster than a non-RC splitter (naive-parallel, "
            f"McSplit-style, our own) at {threads} threads, total wall time; the real "
            f"parallel McSplit is compared in benchmarks/hydra_mcs",
            metric="total time naive / hydra-cpu",
            measured=tot["naive-parallel"] / max(1e-9, tot["hydra-cpu"]),
            target=1.0,
            comparison=">",
            paper_figure="~4x over parallel McSplit with GPU; CPU-only direction",
            baseline="naive-parallel (McSplit-style)",
            our_figure=tot["hydra-cpu"],
            figure_metric="total wall time (s)",
            peer_figure=tot["naive-parallel"],
            lower_is_better=True,
        ),
    ]
    sharing = _sharing_runs(long_pairs(long), threads) if long else None
    if sharing is not None and sharing.height:
        wall = {k: float(sharing.filter(pl.col("policy") == k)["seconds"].sum()) for k in tot}
        cpu = {k: float(sharing.filter(pl.col("policy") == k)["cpu_s"].sum()) for k in tot}
        names = ", ".join(sharing["instance"].unique(maintain_order=True).to_list())
        if (
            not sharing["valid"].all()
            or int(sharing.group_by("instance").agg(pl.col("size").n_unique())["size"].max()) > 1
        ):
            import dataclasses

            claims[0] = dataclasses.replace(claims[0], measured=0.0)
        claims += [
            Claim(
                f"RC sharing (hydra-cpu) is faster than the non-RC splitter (naive-parallel) "
                f"at {threads} threads on instances that take >= 5 s (the real {names} pairs; "
                f"the reference McSplit takes 7-16 s each), total wall time of 2 rounds",
                metric="total wall time naive / hydra-cpu (long instances)",
                measured=wall["naive-parallel"] / max(1e-9, wall["hydra-cpu"]),
                target=1.0,
                comparison=">",
                paper_figure="RC sharing beats McSplit-style splitting",
                baseline="naive-parallel (McSplit-style)",
                our_figure=wall["hydra-cpu"],
                figure_metric="total wall time (s)",
                peer_figure=wall["naive-parallel"],
                lower_is_better=True,
            ),
            Claim(
                f"RC sharing spends less CPU than the non-RC splitter at {threads} threads on "
                f"the same long instances (process CPU, all threads)",
                metric="total CPU naive / hydra-cpu (long instances)",
                measured=cpu["naive-parallel"] / max(1e-9, cpu["hydra-cpu"]),
                target=1.0,
                comparison=">",
                paper_figure="'minimize unnecessary task sharing'",
                baseline="naive-parallel (McSplit-style)",
                our_figure=cpu["hydra-cpu"],
                figure_metric="total CPU (s)",
                peer_figure=cpu["naive-parallel"],
                lower_is_better=True,
            ),
        ]
    if "hydra-gpu" in runs["policy"].unique().to_list():
        gpu_t = float(runs.filter(pl.col("policy") == "hydra-gpu")["seconds"].sum())
        claims.append(
            Claim(
                "GPU offload speeds up Hydra-MCS CPU",
                metric="speed-up",
                measured=tot["hydra-cpu"] / max(1e-9, gpu_t),
                target=3.0,
                paper_figure="~3x",
                baseline="hydra-cpu",
                our_figure=gpu_t,
                figure_metric="total wall time (s)",
                peer_figure=tot["hydra-cpu"],
                lower_is_better=True,
            )
        )
    notes = "No GPU here: the hydra-gpu policy was not run." if not cuda_available() else ""
    if sharing is not None and sharing.height:
        notes += (
            " The long-instance sharing rows run on the real s30 ARG pairs of ../shared/data/mcs"
            " (read unlabelled); the rest on seeded G(n,p) pairs."
        )
    return Result(
        runs, claims=claims, figures=[_plot(runs, calib, rho)], notes=notes, data="generated"
    )
