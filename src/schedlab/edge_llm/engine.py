"""The trace-driven engine: admission windows, OFDMA uplink, padded prefills, KV backhaul,
continuous-batching decode and downlink, for any router.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). The engine owns time and resources; a router only returns a
:class:`~schedlab.edge_llm.policies.Plan`, and the engine never asks which router it was.

Modelling choices (documented in docs/systems/edge_llm.md): resources are reservation queues
(a prefill lane per GPU, one FIFO backhaul link); a decode's time per output token is fixed when
it joins its batch, from the batch size, context and the prefill duty of the GPU at that moment.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import polars as pl

from schedlab.core.errors import BadInputError
from schedlab.edge_llm.config import EdgeConfig
from schedlab.edge_llm.context import fit_to_context
from schedlab.edge_llm.delay import Link, allocate_rbs, rate_bps
from schedlab.edge_llm.policies import MODE_OF, Plan, Router, Window
from schedlab.edge_llm.sites import ClusterView, Site, make_sites
from schedlab.edge_llm.workloads import EdgeRequest
from schedlab.llm.costmodel import get_model

COLUMNS = (
    "rid",
    "arrival",
    "input_len",
    "output_len",
    "mode",
    "ttft",
    "tpot",
    "e2e",
    "deadline",
    "met",
    "ttft_met",
    "tpot_met",
    "uplink_s",
    "queue_s",
    "prefill_s",
    "kv_s",
    "pad_to",
    "group_size",
)


@dataclass
class SimResult:
    """Per-request measurements and a summary of one replay."""

    requests: pl.DataFrame
    summary: dict


def run(requests: list[EdgeRequest], router: Router, cfg: EdgeConfig | None = None) -> SimResult:
    """Replay ``requests`` (sorted by arrival) through a router object on deployment ``cfg``
    (``simulator.simulate`` also takes a router's name)."""
    cfg = (cfg or EdgeConfig()).validate()
    if not requests:
        raise BadInputError("needs at least one request", field="requests")
    fit = fit_to_context(requests, get_model(cfg.model).max_context, cfg.context)
    if not fit.requests:
        raise BadInputError(f"every request exceeds {cfg.model}'s context "
                            f"({get_model(cfg.model).max_context} tokens)", field="requests")
    reqs = sorted(fit.requests, key=lambda r: (r.arrival, r.rid))
    sites = make_sites(cfg)
    link = Link(cfg.backhaul.gbps, cfg.backhaul.transfer_ms)
    width = cfg.window_ms / 1e3
    rows: list[tuple] = []
    stats = dict(windows=0, buckets=0, padded=0, used=0)
    i = 0
    while i < len(reqs):
        end = (np.floor(reqs[i].arrival / width) + 1) * width
        while end <= reqs[i].arrival:  # float rounding (e.g. 8.26 / 0.02 = 412.999...)
            end += width
        j = i
        while j < len(reqs) and reqs[j].arrival < end:
            j += 1
        window = Window(float(end), reqs[i:j], uplink_ready(reqs[i:j], float(end), cfg))
        plan = router.plan(window, ClusterView(sites, link, cfg, float(end)))
        check_plan(plan, window, sites)
        for name, sm in plan.sm.items():
            sites[name].set_plan(sm)
        rows.extend(execute(window, plan, sites, link, cfg, stats))
        i = j
    frame = pl.DataFrame(rows, schema=list(COLUMNS), orient="row")
    summary = summarise(frame, sites, link, stats, router.name)
    summary.update(refused=fit.refused, truncated=fit.truncated)
    return SimResult(frame, summary)


def uplink_ready(window: list[EdgeRequest], now: float, cfg: EdgeConfig) -> list[float]:
    """OFDMA uplink of the window's prompts, scheduled at the window's end."""
    w = cfg.wireless
    bits = np.array([r.input_len * w.bits_per_token for r in window])
    snr = np.array([r.snr_up_db for r in window])
    shares = allocate_rbs(w.uplink_rbs, bits, snr)
    return [
        now + w.air_ms / 1e3 + b / rate_bps(s, q) for b, s, q in zip(bits, shares, snr, strict=True)
    ]


def check_plan(plan: Plan, window: Window, sites: dict[str, Site]) -> None:
    """A router bug must surface as a clear error, not as a silently wrong replay."""
    n = len(window.requests)
    if len(plan.routes) != n or len(plan.groups) != n:
        raise BadInputError(
            f"plan has {len(plan.routes)} routes / {len(plan.groups)} groups for {n} requests",
            field="plan",
        )
    for route in plan.routes:
        if route not in MODE_OF:
            raise BadInputError(f"route {route!r} is not a known mode", field="plan")
    if any(not 0 <= k < n for k in plan.dropped):
        raise BadInputError(f"plan drops {sorted(plan.dropped)}, outside 0..{n - 1}", field="plan")
    for name in plan.sm:
        if name not in sites:
            raise BadInputError(f"SM plan for unknown site {name!r}", field="plan")


def execute(
    window: Window, plan: Plan, sites: dict[str, Site], link: Link, cfg: EdgeConfig, stats: dict
) -> list[tuple]:
    """Run the window's prefill groups FIFO by readiness, then ship KV and join decodes."""
    wan = cfg.backhaul.wan_ms / 1e3
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    rows = [_dropped(window.requests[k]) for k in sorted(plan.dropped)]
    for k, (route, group) in enumerate(zip(plan.routes, plan.groups, strict=True)):
        if k not in plan.dropped:
            groups[(group, route[0])].append(k)
    ordered = sorted(groups.items(), key=lambda g: max(window.ready[k] for k in g[1]))
    stats["windows"] += 1
    stats["buckets"] += len({g for g, _ in groups})
    for (_, p), members in ordered:
        site = sites[p]
        lengths = [window.requests[k].input_len for k in members]
        pad = max(lengths)
        stats["padded"] += pad * len(lengths)
        stats["used"] += sum(lengths)
        at = max(window.ready[k] for k in members) + (wan if p == "cloud" else 0.0)
        start = max(at, site.lane.free_at)
        duration = site.prefill_s(lengths, pad, start)
        start, end = site.lane.run(at, duration)
        for k in members:
            rows.append(
                _finish(window, k, plan.routes[k], start, end, pad, len(members), sites, link, cfg)
            )
    return rows


def _dropped(req: EdgeRequest) -> tuple:
    """A request refused at admission: no latency, counted as an SLO miss."""
    nan = float("nan")
    return (req.rid, req.arrival, req.input_len, req.output_len, "dropped", nan, nan, nan,
            req.deadline, False, False, False, nan, nan, nan, nan, 0, 0)


def _finish(
    window: Window,
    k: int,
    route: tuple[str, str],
    start: float,
    end: float,
    pad: int,
    size: int,
    sites: dict[str, Site],
    link: Link,
    cfg: EdgeConfig,
) -> tuple:
    req, ready = window.requests[k], window.ready[k]
    p, d = route
    wan, air = cfg.backhaul.wan_ms / 1e3, cfg.wireless.air_ms / 1e3
    join, kv_s = end, 0.0
    if p != d:
        _, done = link.transfer(end, sites[p].kv_per_token * req.input_len)
        join = done + wan
        kv_s = join - end
    dsite = sites[d]
    join = dsite.pool.admit_time(join)
    tpot = dsite.tpot_s(join)
    finish = join + (req.output_len - 1) * tpot
    dsite.pool.add(join, finish, req.input_len + req.output_len / 2, req.output_len)
    streams = sum(s.pool.active(join) for s in sites.values())
    token_s = cfg.wireless.bits_per_token / rate_bps(
        cfg.wireless.downlink_rbs / max(1, streams), req.snr_down_db
    )
    first = end + (wan if p == "cloud" else 0.0) + air + token_s
    last = finish + (wan if d == "cloud" else 0.0) + air + token_s
    ttft, e2e = first - req.arrival, last - req.arrival
    tpot_seen = (last - first) / (req.output_len - 1)
    at_p = ready + (wan if p == "cloud" else 0.0)
    return (
        req.rid,
        req.arrival,
        req.input_len,
        req.output_len,
        MODE_OF[route],
        ttft,
        tpot_seen,
        e2e,
        req.deadline,
        e2e <= req.deadline + 1e-9,
        ttft <= req.ttft_slo + 1e-9,
        tpot_seen <= req.tpot_slo + 1e-9,
        ready - window.now,
        max(0.0, start - at_p),
        end - start,
        kv_s,
        pad,
        size,
    )


def summarise(
    frame: pl.DataFrame, sites: dict[str, Site], link: Link, stats: dict, name: str
) -> dict:
    """Mean/P95 latency, TTFT, TPOT, SLO attainment, goodput and the routing mix. Requests
    refused at admission (mode ``dropped``) count in the SLO fractions as misses and are left
    out of the latency figures (``dropped`` says how many)."""
    everyone = frame
    frame = frame.filter(pl.col("mode") != "dropped")
    if frame.height == 0:
        raise BadInputError("every request was refused at admission", field="plan")
    e2e = frame["e2e"].to_numpy()
    span = float((frame["arrival"] + frame["e2e"]).max() - frame["arrival"].min())
    modes = frame["mode"].value_counts()
    mix = {m: 0 for m in ("cloud", "split", "mix", "disagg")}
    mix.update(dict(zip(modes["mode"].to_list(), modes["count"].to_list(), strict=True)))
    padded = max(stats["padded"], 1)
    return dict(
        policy=name,
        requests=everyone.height,
        dropped=everyone.height - frame.height,
        mean_e2e=float(e2e.mean()),
        p95_e2e=float(np.percentile(e2e, 95)),
        mean_ttft=float(frame["ttft"].mean()),
        p95_ttft=float(np.percentile(frame["ttft"].to_numpy(), 95)),
        mean_tpot=float(frame["tpot"].mean()),
        slo=float(frame["met"].sum()) / everyone.height,
        ttft_slo=float(frame["ttft_met"].sum()) / everyone.height,
        tpot_slo=float(frame["tpot_met"].sum()) / everyone.height,
        goodput=float(frame["met"].sum()) / max(span, 1e-9),
        **{f"n_{m}": int(c) for m, c in mix.items()},
        padding_waste=(padded - stats["used"]) / padded,
        buckets_per_window=stats["buckets"] / max(stats["windows"], 1),
        backhaul_util=link.busy_s / max(span, 1e-9),
        cloud_fallbacks=sites["cloud"].fallbacks,
        edge_fallbacks=sites["edge"].fallbacks,
    )
