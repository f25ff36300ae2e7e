"""Headline experiments: the paper's Llama-3/Qwen3 replays, the regime sweep where routing
matters, the step-time calibration against Vidur, and the joint-residency table.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). Targets are the paper's figures; our testbed is modelled
(schedlab.llm's Vidur-calibrated cost model for A800/A6000, OFDMA cell, 10 Gbit/s backhaul), so
magnitudes differ and the claims table says whether the *shape* holds. Every comparison's
yardstick is a baseline replayed on the same requests (each fixed mode, DistServe placement
search, Splitwise), never
the router's own estimate. Claims that hold by construction are labelled sanity checks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from schedlab.core import Claim, Figure, Result, register
from schedlab.edge_llm.bucketing import waste_bound
from schedlab.edge_llm.config import EdgeConfig
from schedlab.edge_llm.residency import analyse, summary
from schedlab.edge_llm.simulator import simulate
from schedlab.edge_llm.workloads import generate, mooncake

POLICIES = ("cloud", "split", "mix", "disagg", "distserve", "splitwise", "online",
            "online-nosm", "online-paper")
FIXED = ("cloud", "split", "mix", "disagg")
PAPER_MODES = ("cloud", "split", "mix")
SANITY = "Sanity check (holds by construction or for every policy, not evidence): "
BASE_RATE = 1.5
#: the four primary regimes: (name, config changes)
REGIMES: dict[str, dict] = {
    "base": {},
    "low-uplink": dict(uplink_mhz=5.0),
    "low-backhaul": dict(backhaul_gbps=1.0),
    "small-edge": dict(edge_sm_budget=0.5),
}


def p95_ci(
    values: np.ndarray, rng: np.random.Generator, resamples: int = 200
) -> tuple[float, float]:
    """Bootstrap 95% interval of the P95 latency (percentile method)."""
    idx = rng.integers(0, values.size, size=(resamples, values.size))
    p95 = np.percentile(values[idx], 95, axis=1)
    return float(np.percentile(p95, 2.5)), float(np.percentile(p95, 97.5))


def run_scenario(
    model: str,
    scenario: str,
    axis: str,
    value: float,
    rate: float,
    changes: dict,
    requests: int,
    seed: int,
) -> list[dict]:
    """Every policy on one workload and deployment; one row per policy."""
    cfg = EdgeConfig(model=model).with_(**changes)
    reqs = workload(requests, rate, seed)
    rng = np.random.default_rng(seed)
    rows = []
    for policy in POLICIES:
        res = simulate(reqs, policy, cfg)
        lo, hi = p95_ci(res.requests["e2e"].to_numpy(), rng)
        rows.append(
            dict(
                model=model,
                scenario=scenario,
                axis=axis,
                value=float(value),
                rate=rate,
                **res.summary,
                p95_lo=lo,
                p95_hi=hi,
            )
        )
    return rows


def workload(requests: int, rate: float, seed: int):
    """Real arrivals (the Alibaba GenAI trace, rescaled to ``rate``) with seeded lengths when
    ``../shared/data`` has the trace; seeded Poisson arrivals otherwise."""
    from schedlab.edge_llm.alibaba import default_path, replay

    if default_path().is_file():
        return replay(requests, rate, seed)
    return generate(requests, rate, seed)


def _real_arrivals() -> bool:
    from schedlab.edge_llm.alibaba import default_path

    return default_path().is_file()


def _data_note() -> str:
    if _real_arrivals():
        return (
            "arrivals: real (Alibaba GenAI production trace, rescaled); lengths/SNRs/SLOs: "
            "seeded class model"
        )
    return "arrivals and lengths: seeded generator (Alibaba GenAI trace not found)"


def _scenarios(model: str, loads: tuple[float, ...], full: bool):
    """Llama-3 (full): the four primary regimes and the offered-load points; Qwen3: the base
    regime its claims use. The wider sweeps are ``routing_regimes``'."""
    for name, changes in REGIMES.items():
        if full or name == "base":
            yield model, f"regime:{name}", "regime", 0.0, BASE_RATE, changes
    for rate in loads if full else ():
        yield model, "load", "rate", rate, rate, {}


@register(
    "edge_llm",
    quick=dict(requests=250, loads=(0.5, 3.0)),
    full=dict(requests=2000, loads=(0.5, 1.0, 1.5, 2.0, 3.0, 4.0)),
)
def heterogeneous_replay(requests: int, loads: tuple[float, ...], seed: int) -> Result:
    """Online routing vs fixed modes and DistServe on Llama-3-8B and Qwen3-8B replays."""
    rows = []
    for model, full in (("llama-3-8b", True), ("qwen3-8b", False)):
        for args in _scenarios(model, loads, full):
            rows.extend(run_scenario(*args, requests=requests, seed=seed))
    frame = pl.DataFrame(rows)
    return Result(
        frame,
        claims=replay_claims(frame),
        figures=[latency_figure(frame)],
        notes="Modelled A800 (cloud) + A6000 (edge); "
        + _data_note()
        + "; "
        + _mode_note(frame)
        + "; see docs/systems/edge_llm.md.",
        data="real" if _real_arrivals() else "stand-in",
    )


def _mode_note(frame: pl.DataFrame) -> str:
    """Routing counts over the Llama-3 replay: the paper's router and the four-mode one."""
    llama = frame.filter(pl.col("model") == "llama-3-8b")

    def counts(policy: str, modes: tuple[str, ...]) -> str:
        sel = llama.filter(pl.col("policy") == policy)
        return "/".join(str(int(sel[f"n_{m}"].sum())) for m in modes)

    return (f"Llama-3 routing counts: online-paper cloud/split/mix = "
            f"{counts('online-paper', PAPER_MODES)}, online cloud/split/mix/disagg = "
            f"{counts('online', FIXED)}")


def _pick(
    frame: pl.DataFrame, model: str, scenario: str, policy: str, value: float | None = None
) -> dict:
    sel = frame.filter(
        (pl.col("model") == model) & (pl.col("scenario") == scenario) & (pl.col("policy") == policy)
    )
    if value is not None:
        sel = sel.filter(pl.col("value") == value)
    return sel.row(0, named=True)


def reduction_vs_best_fixed(
    frame: pl.DataFrame, model: str, scenario: str, value: float | None = None
) -> float:
    """(best fixed mean - online mean) / best fixed mean, in percent (all four fixed modes)."""
    best = min(_pick(frame, model, scenario, p, value)["mean_e2e"] for p in FIXED)
    online = _pick(frame, model, scenario, "online", value)["mean_e2e"]
    return 100.0 * (best - online) / best


def replay_claims(frame: pl.DataFrame) -> list[Claim]:
    qwen = "qwen3-8b"
    llama = "llama-3-8b"
    on = _pick(frame, qwen, "regime:base", "online")
    overlaps = sum(
        on["p95_lo"] <= _pick(frame, qwen, "regime:base", p)["p95_hi"]
        and _pick(frame, qwen, "regime:base", p)["p95_lo"] <= on["p95_hi"]
        for p in ("cloud", "mix")
    )
    online = frame.filter((pl.col("policy") == "online") & (pl.col("model") == llama))
    regimes = online.filter(pl.col("axis") == "regime")
    loads = online.filter(pl.col("scenario") == "load")
    # the paper's router (its three modes) over the whole Llama-3 replay: the four primary
    # regimes and the load points (the paper reports one replay's 18/21/6 of 45)
    paper = frame.filter((pl.col("policy") == "online-paper") & (pl.col("model") == llama))
    paper_counts = {m: int(paper[f"n_{m}"].sum()) for m in PAPER_MODES}
    modes_used = sum(c > 0 for c in paper_counts.values())
    least_share = 100.0 * min(paper_counts.values()) / max(1, sum(paper_counts.values()))
    worst_waste = float(frame["padding_waste"].max()) / waste_bound(EdgeConfig().delta)
    # discriminating SLO yardstick: the best baseline's SLO on the same replay
    slo_gap = []
    for row in frame.filter(
        (pl.col("model") == llama) & (pl.col("policy") == "online") & (pl.col("axis") == "regime")
    ).iter_rows(named=True):
        best = max(_pick(frame, llama, row["scenario"], p)["slo"] for p in (*FIXED, "distserve"))
        slo_gap.append(100.0 * (row["slo"] - best))
    cloud_regimes = frame.filter(
        (pl.col("policy") == "cloud") & (pl.col("model") == llama) & (pl.col("axis") == "regime")
    )
    return [
        Claim(
            "Qwen3-8B replay: online lowers mean E2E latency vs the best fixed mode "
            "(of cloud/split/mix/disagg)",
            metric="reduction vs best fixed (%)",
            measured=reduction_vs_best_fixed(frame, qwen, "regime:base"),
            target=6.4,
            paper_figure="6.4%",
            baseline="best fixed mode",
        ),
        Claim(
            "Qwen3-8B replay: online P95 CI overlaps fixed Cloud's and edge-local's",
            metric="CIs overlapping (of 2)",
            measured=float(overlaps),
            target=2.0,
            paper_figure="both overlap",
            baseline="fixed Cloud and Mix",
        ),
        # fixed cloud-only attains 100% in all four primary regimes too (so it meets this
        # claim as well): it does not discriminate; the sweep's SLO claim does
        Claim(
            f"{SANITY}Llama-3 replay: online SLO attainment >= the best baseline's (fixed "
            "modes, DistServe) in each of the four primary regimes (fixed cloud-only meets "
            "it too)",
            metric="min online - best baseline SLO (pp)",
            measured=min(slo_gap),
            target=0.0,
            paper_figure="(sanity check, not evidence) 100% in all four",
            kind="sanity",
        ),
        Claim(
            f"{SANITY}Llama-3 replay: online attains 100% SLO in the four primary regimes "
            f"(fixed cloud-only: {100.0 * float(cloud_regimes['slo'].min()):.1f}%)",
            metric="min SLO attainment (%)",
            measured=100.0 * float(regimes["slo"].min()),
            target=100.0,
            paper_figure="(sanity check, not evidence)",
            kind="sanity",
        ),
        Claim(
            f"{SANITY}Llama-3 replay: online SLO attainment across offered-load points",
            metric="min SLO attainment over loads (%)",
            measured=100.0 * float(loads["slo"].min()),
            target=95.6,
            paper_figure="(sanity check, not evidence) 95.6-100%",
            kind="sanity",
        ),
        Claim(
            "Llama-3 replay (4 primary regimes + load points): the paper's router, with the "
            "paper's three modes (online-paper), uses every one of them (per-seed counts, and "
            "the four-mode router's, in the notes)",
            metric="paper modes used (of 3)",
            measured=float(modes_used),
            target=3.0,
            paper_figure="Cloud/Mix/Split 18/21/6 of 45",
        ),
        Claim(
            "Llama-3 replay: share of the paper router's least-used mode (paper: Split, 6 of "
            "45 = 13.3%)",
            metric="least-used mode share (%)",
            measured=least_share,
            target=100.0 * 6 / 45,
            paper_figure="6/45 = 13.3%",
        ),
        Claim(
            f"{SANITY}delta-bucketing padding waste stays within delta/(1+delta) (the bound "
            "the bucketing is built to respect)",
            metric="max waste / bound",
            measured=worst_waste,
            target=1.0,
            comparison="<=",
            paper_figure="(sanity check, not evidence)",
            required=True,
            kind="sanity",
        ),
    ]


def latency_figure(frame: pl.DataFrame) -> Figure:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    loads = frame.filter((pl.col("scenario") == "load") & (pl.col("model") == "llama-3-8b"))
    for policy in POLICIES:
        sel = loads.filter(pl.col("policy") == policy).sort("rate")
        ax1.plot(sel["rate"], sel["mean_e2e"], marker="o", label=policy)
    ax1.set(
        xlabel="offered load (req/s)",
        ylabel="mean E2E latency (s)",
        yscale="log",
        title="Llama-3-8B replay",
    )
    ax1.legend(fontsize=7)
    online = frame.filter((pl.col("policy") == "online") & (pl.col("model") == "llama-3-8b"))
    labels = [f"{s}:{v:g}" for s, v in zip(online["scenario"], online["value"], strict=True)]
    bottom = np.zeros(online.height)
    for mode in FIXED:
        counts = online[f"n_{mode}"].to_numpy()
        ax2.bar(range(online.height), counts, bottom=bottom, label=mode)
        bottom += counts
    ax2.set_xticks(range(online.height), labels, rotation=80, fontsize=6)
    ax2.set(ylabel="requests", title="online routing mix")
    ax2.legend(fontsize=7)
    return Figure.from_matplotlib(fig, "edge_llm_latency", "Mean latency vs load; routing mix")


@register("edge_llm", quick=dict(), full=dict())
def joint_residency(seed: int) -> Result:
    """Joint-residency of prefill/decode kernel pairs over Llama shapes on A800 and A6000."""
    rows, stats = [], {}
    for gpu in ("a800", "a6000"):
        shapes = analyse("llama-3-8b", gpu)
        rows.extend(r.__dict__ for r in shapes)
        stats[gpu] = summary(shapes)
    frame = pl.DataFrame(rows)
    worst = min(s["dominant_fail_share"] for s in stats.values())
    gap = 100.0 * (stats["a800"]["guarded_weight_share"] - stats["a6000"]["guarded_weight_share"])
    return Result(
        frame,
        claims=[
            Claim(
                "The dominant prefill/decode pair fails joint residency on every Llama shape, "
                "on both GPUs (ASSUMED register counts and SMEM from kernel names, "
                "llm/kernels.toml; no GPU profiled them)",
                metric="min share of shapes failing (%)",
                measured=100.0 * worst,
                target=100.0,
                paper_figure="37/37 shapes, both GPUs",
            ),
            Claim(
                "Guarded alternative pairs cover more pair weight on A800 than on A6000 "
                "(FLOP-weighted shapes, not the paper's profiled weights; ASSUMED register "
                "counts)",
                metric="A800 - A6000 guarded weight (pp)",
                measured=gap,
                target=0.0,
                comparison=">",
                paper_figure="41.4% vs 26.9%",
            ),
        ],
        notes=f"per GPU: {stats}",
        data="generated",
    )


@register(
    "edge_llm", quick=dict(requests=150, congested=2000), full=dict(requests=2000, congested=2000)
)
def routing_regimes(requests: int, congested: int, seed: int) -> Result:
    """Online routing vs every fixed mode and DistServe across cloud SM share, WAN RTT,
    backhaul, edge GPU class, length mix and load; plus the 30%-cloud-SM 2,000-request regime."""
    from schedlab.edge_llm.sweep import BASELINES, frontier_figure, sweep, versus_best

    frame = sweep(requests, seed, extra=())
    hot = sweep(congested, seed, axes=("cloud_sm",), only=(0.3,))  # that one point, not all 4
    hot = hot.with_columns(pl.lit("congested-2000").alias("axis"))
    frame = pl.concat([frame, hot], how="diagonal_relaxed")
    vs = versus_best(frame)
    sweep_vs = vs.filter(pl.col("axis") != "congested-2000")
    hot_row = vs.filter(pl.col("axis") == "congested-2000").row(0, named=True)
    pick = {p: hot.filter(pl.col("policy") == p).row(0, named=True) for p in BASELINES}
    ds = pick["distserve"]
    worst = sweep_vs.sort("gain_pct").row(0, named=True)
    significant = sweep_vs.filter(pl.col("gain_hi") < 0)
    fixed_best = {}
    for row in frame.filter(pl.col("policy").is_in(list(FIXED))).iter_rows(named=True):
        key = (row["axis"], row["value"])
        fixed_best[key] = min(fixed_best.get(key, float("inf")), row["mean_e2e"])
    online = {
        (r["axis"], r["value"]): r["mean_e2e"]
        for r in frame.filter(pl.col("policy") == "online").iter_rows(named=True)
    }
    gain_fixed = {k: 100.0 * (fixed_best[k] - online[k]) / fixed_best[k] for k in online}
    best_point = max(gain_fixed, key=gain_fixed.get)
    best_hot = min(pick[p]["mean_e2e"] for p in FIXED)
    notes = (
        f"worst sweep point: {worst['axis']}={worst['value']} "
        f"({worst['gain_pct']:.2f}% vs {worst['best_e2e_policy']}, paired 95% CI "
        f"[{worst['gain_lo']:.2f}, {worst['gain_hi']:.2f}]%); points where online is "
        f"significantly worse: {significant.height}; largest gain vs best "
        f"fixed at {best_point[0]}={best_point[1]} ({gain_fixed[best_point]:.2f}%); "
        f"30% cloud SMs: online {hot_row['online_e2e']:.3f} s, DistServe "
        f"{ds['mean_e2e']:.3f} s, best fixed {best_hot:.3f} s. "
    )
    claims = [
        Claim(
            "Online mean E2E is no worse than the best of every fixed mode and DistServe "
            "(placement search) and Splitwise at every sweep point",
            metric="min reduction vs best baseline (%)",
            measured=float(sweep_vs["gain_pct"].min()),
            target=0.0,
            paper_figure="never worse than a fixed mode",
            baseline="best of fixed modes, DistServe (placement search), Splitwise",
        ),
        Claim(
            "Online is never significantly worse than the best baseline: at every sweep point "
            "the paired bootstrap 95% CI of its mean-E2E reduction (same requests, resampled "
            "in pairs) reaches 0 or above",
            metric="min upper CI end of the reduction vs best baseline (%)",
            measured=float(sweep_vs["gain_hi"].min()),
            target=0.0,
            paper_figure="never worse than a fixed mode",
            baseline="best of fixed modes, DistServe (placement search), Splitwise",
        ),
        Claim(
            "Online SLO attainment is no worse than the best baseline's at every sweep point",
            metric="min online - best baseline SLO (pp)",
            measured=float(sweep_vs["slo_pp"].min()),
            target=0.0,
            paper_figure="100% SLO in primary regimes",
            baseline="best of fixed modes, DistServe (placement search), Splitwise",
        ),
        Claim(
            f"Cloud at 30% of its SMs, {congested} requests: online mean E2E vs DistServe "
            "(placement search)",
            metric="reduction vs DistServe (%)",
            measured=100.0 * (ds["mean_e2e"] - hot_row["online_e2e"]) / ds["mean_e2e"],
            target=0.0,
            paper_figure="(issue 26: was -142%, 7.59 s vs 3.13 s)",
            baseline="DistServe (placement search)",
            our_figure=hot_row["online_e2e"],
            figure_metric="mean E2E latency (s), 30% cloud SMs",
            peer_figure=ds["mean_e2e"],
            lower_is_better=True,
        ),
        Claim(
            f"Cloud at 30% of its SMs, {congested} requests: online mean E2E vs the best "
            "fixed mode",
            metric="reduction vs best fixed (%)",
            measured=100.0 * (best_hot - hot_row["online_e2e"]) / best_hot,
            target=0.0,
            paper_figure="(issue 26: fixed split was 7.70 s)",
            baseline="best fixed mode",
            our_figure=hot_row["online_e2e"],
            figure_metric="mean E2E latency (s), 30% cloud SMs",
            peer_figure=best_hot,
            lower_is_better=True,
        ),
        Claim(
            f"Cloud at 30% of its SMs, {congested} requests: online SLO vs DistServe "
            "(placement search)",
            metric="online - DistServe SLO (pp)",
            measured=100.0 * (hot_row["online_slo"] - ds["slo"]),
            target=0.0,
            paper_figure="(issue 26: was 95.0% vs 99.9%)",
            baseline="DistServe (placement search)",
            our_figure=100.0 * hot_row["online_slo"],
            figure_metric="SLO attainment (%), 30% cloud SMs",
            peer_figure=100.0 * ds["slo"],
        ),
        Claim(
            "Routing pays where the regime rewards it: the largest reduction of mean E2E vs "
            "the best fixed mode over the sweep",
            metric="max reduction vs best fixed (%)",
            measured=gain_fixed[best_point],
            target=6.4,
            paper_figure="6.4% (Qwen3-8B replay)",
            baseline="best fixed mode",
        ),
    ]
    return Result(
        frame.join(
            vs.select("axis", "value", "seed", "gain_pct", "slo_pp", "best_e2e_policy"),
            on=["axis", "value", "seed"],
            how="left",
        ),
        claims=claims,
        figures=[
            Figure.from_matplotlib(
                frontier_figure(frame),
                "edge_llm_frontier",
                "Mean E2E per policy along each regime axis; online's mode histogram",
            )
        ],
        notes=notes + "seeded generator (Poisson arrivals, class-model lengths); "
        "Llama-3-8B on modelled A800 cloud + A6000 edge unless the axis says",
        data="generated",
    )


@register("edge_llm", quick=dict(), full=dict())
def step_calibration(seed: int) -> Result:
    """Prefill/decode step times vs Vidur's profiled operators (tp=1), per shape."""
    from schedlab.core.data import data_path
    from schedlab.edge_llm.calibration import fit, summary

    root = data_path("vidur_profiles")
    ran_with = f"real data: Vidur profiles ({root})"
    if not root.is_dir():  # a fresh machine: the vendored tp=1 medians of the same files
        root = Path(__file__).resolve().parents[1] / "llm" / "data" / "vidur_profiles_tp1"
        ran_with = "real data: Vidur profiles, tp=1 medians vendored in schedlab/llm/data"
    _, rows = fit(root)
    table = pl.DataFrame(rows)
    stats = summary(rows)
    executed = table.filter(pl.col("tokens").is_in([1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512]))
    held = table.filter(pl.col("held_out"))
    return Result(
        table,
        claims=[
            Claim(
                "Step time (layers x profiled operators + embedding) within 10% of Vidur's "
                "profile on every held-out shape, every profiled GPU/model at tp=1",
                metric="max |error| over held-out shapes (%)",
                measured=100.0 * float(held["error"].abs().max()),
                target=10.0,
                comparison="<=",
                paper_figure="(issue 26: error <= 10%)",
                kind="sanity",  # our step model against Vidur, not the paper
            ),
            Claim(
                "Step time within 10% on the shapes the delay model runs (decode batches 1-64, "
                "prefill chunks 128-512 tokens)",
                metric="max |error| (%)",
                measured=100.0 * float(executed["error"].abs().max()),
                target=10.0,
                comparison="<=",
                paper_figure="(issue 26: error <= 10%)",
                kind="sanity",  # our step model against Vidur, not the paper
            ),
            Claim(
                "Share of held-out shapes within 10%",
                metric="share (%)",
                measured=100.0 * float((held["error"].abs() <= 0.10).mean()),
                target=100.0,
                paper_figure="(issue 26: error <= 10%)",
                kind="sanity",  # our step model against Vidur, not the paper
            ),
        ],
        notes=f"{ran_with}; per set: {stats}",
        ran_with=ran_with,
        data="real",
    )


#: the overloaded real-length regime, where admission is compared
SATURATED = "raw"
#: real-length regimes: (name, arrival stretch, config changes). Raw Mooncake arrivals saturate
#: one A800 + one A6000 (3 req/s of ~12k-token prompts); stretched 10x they do not.
REAL_REGIMES: tuple[tuple[str, float, dict], ...] = (
    ("raw", 1.0, {}),
    ("stretched-10x", 10.0, {}),
    ("stretched-10x uplink-bound (5 MHz)", 10.0, dict(uplink_mhz=5.0)),
    ("stretched-10x backhaul-bound (1 Gbit/s)", 10.0, dict(backhaul_gbps=1.0)),
)


@register("edge_llm", quick=dict(), full=dict())
def real_lengths(seed: int) -> Result:
    """Online vs every baseline (fixed modes, DistServe's placement search, Splitwise) on real
    Mooncake conversation lengths and arrivals, Qwen3-8B, raw and stretched, two radio limits."""
    from schedlab.edge_llm.sweep import BASELINES, versus_best

    rows = []
    for name, stretch, changes in REAL_REGIMES:
        cfg = EdgeConfig(model="qwen3-8b").with_(**changes)
        reqs = mooncake(stretch, seed)
        policies = [*BASELINES, "online", "online-paper"]
        if name == SATURATED:  # deadline-aware admission, for online and every baseline alike
            policies += [f"{p}+admit" for p in (*BASELINES, "online")]
        for policy in policies:
            s = simulate(reqs, policy, cfg).summary
            rows.append(dict(model="qwen3-8b", axis="mooncake", value=name, seed=seed, **s))
    frame = pl.DataFrame(rows)
    vs = versus_best(frame)
    raw = frame.filter(pl.col("value") == SATURATED)
    slo_of = dict(zip(raw["policy"].to_list(), raw["slo"].to_list(), strict=True))
    peers = [p for p in slo_of if p.removesuffix("+admit") in BASELINES]
    best_peer = max(peers, key=lambda p: slo_of[p])
    admit_pp = 100.0 * (slo_of["online+admit"] - slo_of[best_peer])
    paper = frame.filter(pl.col("policy") == "online-paper")
    paper_counts = {m: int(paper[f"n_{m}"].sum()) for m in PAPER_MODES}
    least_share = 100.0 * min(paper_counts.values()) / max(1, sum(paper_counts.values()))
    worst_e2e = vs.sort("gain_pct").row(0, named=True)
    worst_slo = vs.sort("slo_pp").row(0, named=True)
    refused = int(frame["refused"].max())
    best = dict(baseline="best of fixed modes, DistServe (placement search), Splitwise",
                figure_metric="mean E2E latency (s), mean over the 4 Mooncake regimes",
                our_figure=float(vs["online_e2e"].mean()), peer_figure=float(vs["best_e2e"].mean()),
                lower_is_better=True)
    slo = dict(baseline=best["baseline"], figure_metric="SLO attainment (%), mean over regimes",
               our_figure=100.0 * float(vs["online_slo"].mean()),
               peer_figure=100.0 * float(vs["best_slo"].mean()))
    return Result(
        frame.join(vs.select("value", "seed", "gain_pct", "slo_pp", "best_e2e_policy"),
                   on=["value", "seed"], how="left"),
        claims=[
            Claim("Real lengths (Mooncake): online mean E2E is no worse than the best baseline "
                  "(fixed modes, DistServe placement search, Splitwise) in every regime",
                  metric="min reduction vs best baseline (%)",
                  measured=float(vs["gain_pct"].min()), target=0.0,
                  paper_figure="6.4% lower than the best fixed mode (Qwen3-8B replay)", **best),
            Claim("Real lengths (Mooncake): online SLO attainment is no worse than the best "
                  "baseline's in every regime", metric="min online - best baseline SLO (pp)",
                  measured=float(vs["slo_pp"].min()), target=0.0,
                  paper_figure="100% SLO in the primary regimes", **slo),
            Claim("Real lengths (Mooncake): the largest reduction of mean E2E vs the best "
                  "baseline over the regimes", metric="max reduction vs best baseline (%)",
                  measured=float(vs["gain_pct"].max()), target=6.4,
                  paper_figure="6.4% (Qwen3-8B replay)", baseline=best["baseline"]),
            Claim("Real lengths, saturated raw arrivals: with deadline-aware admission (a "
                  "request predicted to miss its deadline on every mode is refused, and counts "
                  "as a miss) online's SLO attainment is no worse than the best baseline's, "
                  "each baseline with and without the same admission rule",
                  metric="online+admit - best baseline SLO (pp)", measured=admit_pp, target=0.0,
                  paper_figure="100% SLO in the primary regimes (no overload in the paper)",
                  baseline="best of fixed modes, DistServe, Splitwise, each with and without "
                           "admission",
                  figure_metric="SLO attainment (%) of all requests, saturated raw arrivals",
                  our_figure=100.0 * slo_of["online+admit"],
                  peer_figure=100.0 * slo_of[best_peer]),
            Claim("Real lengths (4 regimes): share of the paper router's (online-paper, the "
                  "paper's three modes) least-used mode (paper: Split, 6 of 45 = 13.3%)",
                  metric="least-used mode share (%)", measured=least_share,
                  target=100.0 * 6 / 45, paper_figure="Cloud/Mix/Split 18/21/6 of 45"),
        ],
        data="real",
        notes=(f"Mooncake FAST'25 conversation trace, first 600 requests (vendored, Apache-2.0); "
               f"{refused} prompts beyond Qwen3-8B's 32k context refused (same for every "
               f"policy); SNRs seeded, SLOs 2 s TTFT / 80 ms TPOT. Worst E2E regime: "
               f"{worst_e2e['value']} ({worst_e2e['gain_pct']:.2f}% vs "
               f"{worst_e2e['best_e2e_policy']}); worst SLO regime: {worst_slo['value']} "
               f"({worst_slo['slo_pp']:.2f} pp). Saturated raw arrivals with admission: "
               f"online+admit {100 * slo_of['online+admit']:.2f}% SLO vs {best_peer} "
               f"{100 * slo_of[best_peer]:.2f}% (without admission online "
               f"{100 * slo_of['online']:.2f}%); online-paper cloud/split/mix = "
               f"{'/'.join(str(paper_counts[m]) for m in PAPER_MODES)}."),
    )
