"""Headline experiments of ESR-HGNN (../shared/papers/05-esr_hgnn.md), registered with reproduce.

1. ``sampling_redundancy``: reads and measured CPU time per mini-batch, naive vs trie, on the
   DBLP/ACM/IMDB-like schemas, the published and the all-symmetric metapath sets, growing sizes;
   plus the chi-squared check that both samplers draw the same neighbours.
2. ``hardware_speedup``: the modelled multi-channel unit (with and without trie, with each
   grouping) against measured CPU and modelled GPU sampling, time and energy.
3. ``end_to_end``: HAN mini-batch inference time with each sampler.

Claims carry the paper's direction and, where the abstract or the issue gives one, its figure.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from schedlab.core import Claim, Figure, Result, register
from schedlab.esr_hgnn.grouping import brute_force_grouping, fanout_hop_cost, make_grouper
from schedlab.esr_hgnn.grouping import total_cost as grouping_cost
from schedlab.esr_hgnn.hwmodel import load_config
from schedlab.esr_hgnn.policies import make_sampler
from schedlab.esr_hgnn.stats import compare_samplers
from schedlab.esr_hgnn.study import compare_sampling, end_to_end, hardware_comparison, redundancy
from schedlab.esr_hgnn.workloads import SCHEMAS, generate, metapath_set, schema, seed_batches

FANOUTS = (10,)  # 10 metapath walks per seed and metapath, as HAN's neighbour sampling


def _geomean(values) -> float:
    values = np.asarray(list(values), dtype=float)
    return float(np.exp(np.log(values).mean())) if values.size else float("nan")


@register("esr_hgnn", quick=dict(scales=(1.0, 4.0), batch=512, batches=3, runs=300),
          full=dict(scales=(1.0, 4.0, 16.0, 64.0), batch=1024, batches=8, runs=2000))
def sampling_redundancy(scales: tuple[float, ...], batch: int, batches: int, runs: int,
                        seed: int) -> Result:
    """Trie sampling removes redundant reads and is faster than naive per-metapath sampling."""
    rows = []
    for name in SCHEMAS:
        for scale in scales:
            graph = generate(name, scale, seed)
            seeds = seed_batches(graph, schema(name).target, batch, batches, seed)
            for which in ("han", "sym4", "sym6"):
                mps = metapath_set(graph, name, which)
                for r in compare_sampling(graph, mps, seeds, FANOUTS, seed, repeats=5):
                    rows.append(dict(schema=name, graph_scale=scale, metapaths=which,
                                     n_metapaths=len(mps),
                                     predicted_saving=redundancy(mps, FANOUTS), **r))
    frame = pl.DataFrame(rows)
    wide = _naive_vs_trie(frame)
    pvalue = _distribution_pvalue(runs, seed)
    dblp = wide.filter((pl.col("schema") == "dblp") & (pl.col("graph_scale") == max(scales)))

    def pick(which: str, column: str) -> float:
        return float(dblp.filter(pl.col("metapaths") == which)[column][0])

    claims = [
        Claim("Sanity check (by construction: the trie walks a shared prefix once, so it never "
              "reads more): trie sampling removes redundant reads (DBLP-like, 7 symmetric "
              "metapaths)",
              metric="% of naive reads removed", measured=100 * pick("sym6", "saving"),
              target=0.0, comparison=">", paper_figure="eliminates redundant traversals",
              kind="sanity"),
        Claim("Sanity check (by construction): trie sampling removes redundant reads "
              "(DBLP-like, HAN's APA/APCPA/APTPA)",
              metric="% of naive reads removed", measured=100 * pick("han", "saving"),
              target=0.0, comparison=">", paper_figure="eliminates redundant traversals",
              kind="sanity"),
        Claim("Software trie sampling is >= 3x faster than naive on DBLP-like (issue goal; "
              "7 symmetric metapaths, measured CPU)", metric="naive/trie time per batch",
              measured=pick("sym6", "speedup"), target=3.0, paper_figure=">= 3x (issue goal)",
              baseline="naive CPU sampling"),
        Claim("Software trie sampling is faster than naive wherever metapaths share a prefix "
              "(geomean over schema/set/size with reads saved)", metric="naive/trie time",
              measured=_geomean(wide.filter(pl.col("saving") > 0)["speedup"]), target=1.0,
              comparison=">", paper_figure="faster than naive", baseline="naive CPU sampling"),
        Claim("Naive and trie draw the same metapath neighbours (chi-squared, Bonferroni p)",
              metric="min p x tests", measured=pvalue, target=0.01,
              paper_figure="same samples, fewer reads", kind="sanity"),
    ]
    return Result(frame, claims=claims, figures=[_plot_redundancy(wide)], data="generated",
                  notes="CPU times are measured (Numba, one core); reads are counted exactly.")


def _naive_vs_trie(frame: pl.DataFrame) -> pl.DataFrame:
    keys = ["schema", "graph_scale", "metapaths"]
    naive = frame.filter(pl.col("sampler") == "naive").select(
        *keys, pl.col("reads").alias("naive_reads"), pl.col("cpu_seconds").alias("naive_s"))
    trie = frame.filter(pl.col("sampler") == "trie").select(
        *keys, pl.col("reads").alias("trie_reads"), pl.col("cpu_seconds").alias("trie_s"))
    return naive.join(trie, on=keys).with_columns(
        saving=1 - pl.col("trie_reads") / pl.col("naive_reads"),
        speedup=pl.col("naive_s") / pl.col("trie_s"))


def _distribution_pvalue(runs: int, seed: int) -> float:
    """Bonferroni-corrected smallest p over every schema's symmetric metapaths (small graphs)."""
    pvalues = []
    for name in SCHEMAS:
        graph = generate(name, 0.02, seed)
        mps = metapath_set(graph, name, "sym4")
        seeds = np.arange(min(16, graph.node_counts[schema(name).target]))
        pvalues += compare_samplers(graph, make_sampler("naive"), make_sampler("trie"), mps,
                                    seeds, runs, seed).values()
    return min(1.0, min(pvalues) * len(pvalues))


def _plot_redundancy(wide: pl.DataFrame) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    top = wide.filter(pl.col("graph_scale") == wide["graph_scale"].max())
    labels = [f"{s}\n{m}" for s, m in zip(top["schema"], top["metapaths"], strict=True)]
    x = np.arange(len(labels))
    left.bar(x - 0.2, top["naive_reads"], 0.4, label="naive")
    left.bar(x + 0.2, top["trie_reads"], 0.4, label="trie")
    left.set_xticks(x, labels, fontsize=7)
    left.set_ylabel("reads per mini-batch")
    left.legend()
    for (schema_name, which), part in wide.sort("graph_scale").group_by(["schema", "metapaths"],
                                                                  maintain_order=True):
        right.plot(part["graph_scale"], part["speedup"], marker="o", label=f"{schema_name} {which}")
    right.set_xscale("log")
    right.set_xlabel("graph scale (x dataset size)")
    right.set_ylabel("naive / trie CPU time")
    right.legend(fontsize=6, ncol=3)
    fig.tight_layout()
    return Figure.from_matplotlib(fig, "esr_hgnn_sampling",
                                  "Reads and measured CPU speedup of trie over naive sampling")


@register("esr_hgnn", quick=dict(scale=1.0, batch=512, batches=2, channels=4),
          full=dict(scale=8.0, batch=1024, batches=4, channels=4))
def hardware_speedup(scale: float, batch: int, batches: int, channels: int, seed: int) -> Result:
    """The modelled multi-channel unit is about 10x faster than CPU/GPU sampling."""
    cfg = load_config(channels=channels)
    rows = []
    for name in SCHEMAS:
        graph = generate(name, scale, seed)
        mps = metapath_set(graph, name, "sym6")
        seeds = seed_batches(graph, schema(name).target, batch, batches, seed)
        for r in hardware_comparison(graph, mps, seeds, FANOUTS, cfg,
                                     ["round-robin", "random", "greedy", "optimal"], seed,
                                     repeats=5):
            rows.append(dict(schema=name, **r))
    frame = pl.DataFrame(rows, infer_schema_length=None)
    claims = _hardware_claims(frame) + [_grouping_exactness(channels, seed)]
    return Result(frame, claims=claims, figures=[_plot_hardware(frame)], data="generated",
                  notes="esr-* and gpu-* rows are modelled (no ASIC, no GPU here); cpu-<sampler> "
                        "rows are measured thread CPU time (moves with machine load), "
                        "cpu-<sampler>-model rows the load-independent CPU cost model the "
                        "claims use.")


def _seconds(frame: pl.DataFrame, schema_name: str, platform: str, grouper: str = "") -> float:
    part = frame.filter((pl.col("schema") == schema_name) & (pl.col("platform") == platform)
                        & (pl.col("grouper") == grouper))
    return float(part["seconds"][0])


def _column(frame, schema_name, platform, grouper, column) -> float:
    part = frame.filter((pl.col("schema") == schema_name) & (pl.col("platform") == platform)
                        & (pl.col("grouper") == grouper))
    return float(part[column][0])


def _hardware_claims(frame: pl.DataFrame) -> list[Claim]:
    names = list(SCHEMAS)
    unit = {s: _seconds(frame, s, "esr-trie", "optimal") for s in names}
    vs_cpu = _geomean(_seconds(frame, s, "cpu-naive-model") / unit[s] for s in names)
    vs_cpu_trie = _geomean(_seconds(frame, s, "cpu-trie-model") / unit[s] for s in names)
    vs_gpu = _geomean(_seconds(frame, s, "gpu-naive") / unit[s] for s in names)
    energy_cpu = _geomean(_column(frame, s, "cpu-naive-model", "", "energy_j")
                          / _column(frame, s, "esr-trie", "optimal", "energy_j") for s in names)
    energy_gpu = _geomean(_column(frame, s, "gpu-naive", "", "energy_j")
                          / _column(frame, s, "esr-trie", "optimal", "energy_j") for s in names)
    reads_rr = _geomean(_column(frame, s, "esr-trie", "round-robin", "reads")
                        / _column(frame, s, "esr-trie", "optimal", "reads") for s in names)
    time_rr = _geomean(_column(frame, s, "esr-trie", "round-robin", "seconds")
                       / unit[s] for s in names)
    return [
        Claim("ESR-HGNN unit is ~10x faster than CPU sampling (modelled unit: 4 sampling "
              "channels on 4 shared HBM2 channels, graph partitioned; vs the CPU cost model of "
              "the same naive batch: counted L2/L3/DRAM accesses x cited latencies, "
              "load-independent; geomean of 3 schemas)", metric="speedup", measured=vs_cpu,
              target=10.0, paper_figure="~10x over CPU (avg)",
              baseline="naive CPU sampling (cost model)"),
        Claim("ESR-HGNN unit vs CPU running our own trie sampler (stricter baseline, same CPU "
              "cost model)",
              metric="speedup", measured=vs_cpu_trie, target=10.0,
              paper_figure="~10x over CPU (avg)", baseline="CPU trie sampler (cost model)",
              our_figure=_geomean(unit.values()),
              figure_metric="seconds per batch (geomean of 3 schemas)",
              peer_figure=_geomean(_seconds(frame, s, "cpu-trie-model") for s in names),
              lower_is_better=True),
        Claim("ESR-HGNN unit is ~10x faster than GPU sampling (both modelled: the GPU is a "
              "formula, no GPU measured here)", metric="speedup",
              measured=vs_gpu, target=10.0, paper_figure="~10x over GPU (avg)",
              baseline="GPU sampling (modelled)"),
        Claim("Sanity check (output of the model's own energy parameters, not evidence): "
              "the unit uses less energy than CPU sampling",
              metric="CPU J / unit J", measured=energy_cpu, target=1.0, comparison=">",
              paper_figure="significant energy savings", kind="sanity"),
        Claim("Sanity check (output of the model's own parameters; GPU modelled): the unit "
              "uses less energy than GPU sampling",
              metric="GPU J / unit J", measured=energy_gpu, target=1.0, comparison=">",
              paper_figure="significant energy savings", kind="sanity"),
        Claim("Sanity check (reads are the grouping's own objective): reusability-driven "
              "grouping cuts DRAM reads vs round-robin channel assignment",
              metric="round-robin reads / optimal reads", measured=reads_rr, target=1.0,
              comparison=">", paper_figure="maximises reusable traversals", kind="sanity"),
        Claim("Reusability-driven grouping speeds the modelled unit up vs round-robin (model "
              "output: fewer reads through the shared-channel DRAM replay)",
              metric="round-robin time / optimal time", measured=time_rr, target=1.0,
              comparison=">", paper_figure="enhances efficiency",
              baseline="round-robin channel assignment"),
    ]


def _grouping_exactness(channels: int, seed: int) -> Claim:
    """The DP grouping's cost equals brute force over all assignments (a correctness property)."""
    graph = generate("dblp", 0.05, seed)
    mps = metapath_set(graph, "dblp", "sym6")
    k = min(channels, 3)  # 3^7 assignments keep brute force fast
    cost = fanout_hop_cost(FANOUTS)
    dp = grouping_cost(make_grouper("optimal").group(mps, k, cost), cost)
    brute, _ = brute_force_grouping(mps, k, cost)
    return Claim("Optimal (DP) grouping matches brute force", metric="DP cost - brute cost",
                 measured=dp - brute, target=0.0, comparison="==", tolerance=1e-9,
                 paper_figure="optimal grouping", required=True, kind="sanity")


def _plot_hardware(frame: pl.DataFrame) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.6))
    frame = frame.with_columns(label=pl.concat_str(
        [pl.col("platform"), pl.lit(" "), pl.col("grouper")]).str.strip_chars())
    labels = list(dict.fromkeys(frame["label"]))
    width = 0.8 / len(SCHEMAS)
    for i, name in enumerate(SCHEMAS):
        part = frame.filter(pl.col("schema") == name)
        values = [float(part.filter(pl.col("label") == lab)["seconds"][0]) * 1e6
                  for lab in labels]
        ax.bar(np.arange(len(labels)) + i * width, values, width, label=name)
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, rotation=30, fontsize=7,
                  ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("sampling time per mini-batch (us)")
    ax.legend()
    fig.tight_layout()
    return Figure.from_matplotlib(fig, "esr_hgnn_hardware",
                                  "CPU (measured) vs GPU and ESR-HGNN unit (modelled)")


@register("esr_hgnn", quick=dict(scale=1.0, batch=256, batches=2),
          full=dict(scale=8.0, batch=1024, batches=4))
def end_to_end_inference(scale: float, batch: int, batches: int, seed: int) -> Result:
    """End-to-end HAN mini-batch inference is faster with trie sampling and with the unit."""
    cfg = load_config(channels=4)
    rows = []
    for name in SCHEMAS:
        graph = generate(name, scale, seed)
        mps = metapath_set(graph, name, "sym6")
        seeds = seed_batches(graph, schema(name).target, batch, batches, seed)
        for r in end_to_end(graph, mps, seeds, FANOUTS, cfg, seed):
            rows.append(dict(schema=name, **r))
    frame = pl.DataFrame(rows)

    def total(s: str, pipeline: str) -> float:
        part = frame.filter((pl.col("schema") == s) & (pl.col("pipeline") == pipeline))
        return float(part["total_seconds"][0])

    trie = _geomean(total(s, "cpu-naive") / total(s, "cpu-trie") for s in SCHEMAS)
    unit = _geomean(total(s, "cpu-naive") / total(s, "esr-trie (modelled)") for s in SCHEMAS)
    share = float(frame.filter(pl.col("pipeline") == "cpu-naive")["sampling_share"].mean())
    claims = [
        Claim("End-to-end HAN inference is faster with software trie sampling (CPU, measured)",
              metric="speedup", measured=trie, target=1.0, comparison=">",
              paper_figure="substantial end-to-end speedup", baseline="naive CPU sampling"),
        Claim("Sanity check (holds by construction once the modelled unit samples faster "
              "than the CPU: the same measured HAN time plus a smaller sampling time): "
              "end-to-end HAN inference is faster with the ESR-HGNN unit",
              metric="speedup", measured=unit, target=1.0,
              comparison=">", paper_figure="substantial end-to-end speedup", kind="sanity"),
        Claim("Sampling is a significant share of end-to-end time with naive CPU sampling (no "
              "figure in the abstract; we read 'significant bottleneck' as >= 30%)",
              metric="sampling share", measured=share, target=0.3,
              paper_figure="sampling is a significant bottleneck"),
    ]
    return Result(frame, claims=claims, data="generated",
                  notes="HAN runs on one CPU core in PyTorch; the paper pairs the unit with a GPU "
                        "or an HGNN accelerator, which would shrink model time and raise the "
                        "sampling share.")
