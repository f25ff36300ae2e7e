"""The online edge-cloud router and its baselines, behind one ``Router`` protocol.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). Routes are (prefill site, decode site):

* ``cloud``  = (cloud, cloud): mode (i), cloud-only;
* ``split``  = (cloud, edge):  mode (ii), cloud prefill + edge decode, KV over the backhaul;
* ``mix``    = (edge, edge):   mode (iii), edge prefill-decode mix;
* ``disagg`` = (edge, cloud):  edge prefill + cloud decode (the direction DistServe-style
  disaggregation picks when the cloud's compute is scarce), KV over the backhaul.

The online policy runs the paper's four-stage loop on each admission window: (1) windowed
admission in earliest-deadline order, (2) delta-similar bucketing, (3) tile selection and
(4) SM-feasible prefill/decode allocation from the joint-residency frontier, re-chosen every
window from the decode load (dynamic adjustment), falling back to time slicing when no pair
co-resides (guard); then each request takes the mode with the lowest predicted end-to-end
latency among those predicted to meet its deadline. Baselines: each fixed mode here; DistServe's
placement search and Splitwise's phase split in :mod:`schedlab.edge_llm.placement`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from schedlab.edge_llm.bucketing import delta_buckets
from schedlab.edge_llm.sites import ClusterView, SmPlan
from schedlab.edge_llm.workloads import EdgeRequest

Route = tuple[str, str]
MODES: dict[str, Route] = {
    "cloud": ("cloud", "cloud"),
    "split": ("cloud", "edge"),
    "mix": ("edge", "edge"),
    "disagg": ("edge", "cloud"),
}
MODE_OF: dict[Route, str] = {v: k for k, v in MODES.items()}
#: padded tokens per prefill batch (a CUDA-graph-sized static shape)
MAX_BATCH_TOKENS = 8192
#: tokens an active decode is assumed to still owe when stage 4 weighs its slowdown
DECODE_TOKENS_AHEAD = 64
#: weight of the duty term of the externality (see externality())
DUTY_WEIGHT = 1.0


@dataclass
class Window:
    """One admission window: the requests that arrived in it and when each prompt reaches the
    edge server (after its uplink)."""

    now: float
    requests: list[EdgeRequest]
    ready: list[float]


@dataclass
class Plan:
    """A router's answer: a route and a prefill group per request, SM plans per site."""

    routes: list[Route]
    groups: list[int]
    sm: dict[str, SmPlan] = field(default_factory=dict)
    #: indices of the window's requests refused at admission (never served; SLO misses)
    dropped: frozenset[int] = frozenset()


class Router(Protocol):
    """Decides, for every request of a window, where it is prefilled and decoded."""

    name: str

    def plan(self, window: Window, view: ClusterView) -> Plan: ...


def bucket_groups(window: Window, delta: float) -> tuple[list[int], list[list[int]]]:
    """Stage 2 for everyone: group ids from delta-similar buckets of the window's prompts."""
    lengths = [r.input_len for r in window.requests]
    buckets = delta_buckets(lengths, delta, MAX_BATCH_TOKENS)
    groups = [0] * len(lengths)
    for b, members in enumerate(buckets):
        for i in members:
            groups[i] = b
    return groups, buckets


class FixedRouter:
    """Every request takes one mode. The SM stages (3-4) are the same as the online policy's,
    so comparing the two isolates what per-request routing adds."""

    def __init__(self, mode: str, sm_allocation: bool = True) -> None:
        self.route = MODES[mode]
        self.name = mode
        self.sm_allocation = sm_allocation

    def plan(self, window: Window, view: ClusterView) -> Plan:
        groups, _ = bucket_groups(window, view.cfg.delta)
        return Plan(
            [self.route] * len(window.requests),
            groups,
            site_plans(view, window, self.sm_allocation),
        )


def site_plans(view: ClusterView, window: Window, sm_allocation: bool) -> dict[str, SmPlan]:
    """Stages 3-4 for every site, or each site's dominant pair when switched off."""
    return {
        site: (
            allocate_sm(view, site, window) if sm_allocation else view.sites[site].default_plan()
        )
        for site in view.sites
    }


@dataclass(frozen=True)
class Estimate:
    ttft: float
    e2e: float
    prefill_end: float
    join: float
    tpot: float
    prefill: float = 0.0  # the prefill's own duration on its lane


def estimate(
    view: ClusterView,
    req: EdgeRequest,
    ready: float,
    route: Route,
    plans: dict[str, SmPlan],
    pad_to: int | None = None,
) -> Estimate:
    """Predicted TTFT and end-to-end latency of one request on one route, given the view's
    tentative reservations (nothing is booked)."""
    cfg = view.cfg
    wan = cfg.backhaul.wan_ms / 1e3
    air = cfg.wireless.air_ms / 1e3
    p, d = route
    ps, ds = view.sites[p], view.sites[d]
    at_p = ready + (wan if p == "cloud" else 0.0)
    start = max(at_p, view.lane_free[p])
    active_p = ps.pool.active(start) + view.extra_decodes[p]
    pad = pad_to or req.input_len
    end = start + ps.prefill_s([pad], pad, start, plans.get(p), active_p)
    first = end + (wan if p == "cloud" else 0.0) + air
    join = end
    if p != d:
        nbytes = ps.kv_per_token * req.input_len
        join = max(end, view.link_free) + view.link.duration(nbytes) + wan
    # a prefill on the decode site is in that site's duty when this sequence joins
    own = (end - start) / cfg.duty_horizon_s if p == d else 0.0
    tpot = ds.tpot_s(join, view.extra_decodes[d], view.extra_duty(d) + own, plans.get(d))
    last = join + (req.output_len - 1) * tpot + (wan if d == "cloud" else 0.0) + air
    return Estimate(first - req.arrival, last - req.arrival, end, join, tpot, end - start)


def commit(view: ClusterView, req: EdgeRequest, ready: float, route: Route, est: Estimate) -> None:
    """Book an estimated route in the view so later requests of the window see it."""
    p, d = route
    wan = view.cfg.backhaul.wan_ms / 1e3
    at_p = ready + (wan if p == "cloud" else 0.0)
    start = max(at_p, view.lane_free[p])
    view.reserve_prefill(p, at_p, est.prefill_end - start)
    if p != d:
        view.reserve_transfer(est.prefill_end, view.sites[p].kv_per_token * req.input_len)
    view.extra_decodes[d] += 1


def externality(
    view: ClusterView,
    route: Route,
    est: Estimate,
    plans: dict[str, SmPlan],
    output_len: int = 1,
    mean_input: int = 512,
) -> float:
    """Seconds of latency a request's choice adds to *other* requests, from live state.

    Four terms, each a recent rate over the duty horizon times this request's own work:

    * duty: sequences joining the prefill site's decode batch while this prefill is in the
      duty window pay the duty's TPOT penalty on every token (time slicing or the SM split);
    * queue: prefills queued behind it on the lane wait its duration;
    * lane: a sequence decoding on d stretches every prefill d runs meanwhile;
    * batch: sequences joining d while it decodes run a batch one sequence larger.

    Without it a greedy per-request choice overloads whichever site looks fastest to the
    request itself. The per-site rates are computed once per window (``_rates``), so a
    decision costs a few multiplications per mode."""
    p, d = route
    rp = _rates(view, p, plans, mean_input)
    rd = _rates(view, d, plans, mean_input)
    backlog = max(0.0, view.lane_free[p] - view.now)
    busy = output_len * est.tpot
    return est.prefill * (DUTY_WEIGHT * rp[0] + rp[1] * backlog) + busy * (rd[2] + rd[3])


def _rates(
    view: ClusterView, name: str, plans: dict[str, SmPlan], mean_input: int
) -> tuple[float, float, float, float]:
    """(duty cost per prefill second, queued prefills per second, lane cost per decode second,
    batch cost per decode second) of one site, memoised on the view for its window."""
    cache = view.__dict__.setdefault("_ext_rates", {})
    found = cache.get(name)
    if found is not None:
        return found
    site = view.sites[name]
    horizon = view.cfg.duty_horizon_s
    now = view.now
    plan = plans.get(name)
    joins = site.pool.recent_joins(now, horizon) / horizon
    mean_out = site.pool.tokens / max(1, len(site.pool.joins))
    penalty = site.tpot_s(now, 0, 1.0, plan) - site.tpot_s(now, 0, 0.0, plan)
    duty = joins * mean_out * max(0.0, penalty)
    starts = site.lane.recent_starts(now, horizon) / horizon
    active = site.pool.active(now)
    stretch = site.prefill_s([mean_input], mean_input, now, plan, active + 1) - site.prefill_s(
        [mean_input], mean_input, now, plan, active
    )
    grow = site.tpot_s(now, 1, 0.0, plan) - site.tpot_s(now, 0, 0.0, plan)
    found = (duty, starts, starts * max(0.0, stretch), joins * mean_out * max(0.0, grow))
    cache[name] = found
    return found


class OnlineRouter:
    """The paper's method: the four-stage loop, then per-request latency-aware routing."""

    def __init__(
        self,
        modes: tuple[str, ...] = ("cloud", "split", "mix", "disagg"),
        sm_allocation: bool = True,
        name: str = "online",
        externality: float = 1.0,
        admission: bool = False,
    ) -> None:
        self.routes = [MODES[m] for m in modes]
        self.externality = externality
        #: deadline-aware admission: refuse a request predicted to miss its deadline on every
        #: mode (it would not count toward SLO attainment and it delays everyone behind it)
        self.admission = admission
        self.mean_input = 512.0  # EWMA of prompt lengths seen (for the lane externality)
        self.sm_allocation = sm_allocation
        self.name = name

    def plan(self, window: Window, view: ClusterView) -> Plan:
        groups, buckets = bucket_groups(window, view.cfg.delta)
        plans = site_plans(view, window, self.sm_allocation)
        pad = {i: max(window.requests[j].input_len for j in b) for b in buckets for i in b}
        # Plan in the order the engine runs prefills (FIFO by readiness), deadlines breaking
        # ties: booking in pure earliest-deadline order made each estimate assume a lane
        # order that never happens, which cost 9-15% mean E2E on real Mooncake lengths.
        order = sorted(
            range(len(window.requests)),
            key=lambda i: (window.ready[i],
                           window.requests[i].arrival + window.requests[i].deadline),
        )
        routes: list[Route] = [self.routes[0]] * len(window.requests)
        dropped = set()
        for i in order:
            req, ready = window.requests[i], window.ready[i]
            self.mean_input = 0.97 * self.mean_input + 0.03 * req.input_len
            best, best_key = None, None
            for route in self.routes:
                est = estimate(view, req, ready, route, plans, pad[i])
                cost = est.e2e + self.externality * externality(
                    view, route, est, plans, req.output_len, int(self.mean_input)
                )
                key = (est.e2e > req.deadline, cost)
                if best_key is None or key < best_key:
                    best, best_key = (route, est), key
            assert best is not None and best_key is not None
            routes[i] = best[0]
            if self.admission and best_key[0]:
                dropped.add(i)
                continue
            commit(view, req, ready, best[0], best[1])
        return Plan(routes, groups, plans, frozenset(dropped))


class AdmissionRouter:
    """The same deadline-aware admission in front of any other router (so a baseline gets the
    rule the online router uses): after the router plans a window, each request in the order
    the engine runs prefills is estimated on the route it was given, given the admitted ones
    before it, and refused when that misses its deadline."""

    def __init__(self, inner: Router) -> None:
        self.inner = inner
        self.name = f"{inner.name}+admit"

    def plan(self, window: Window, view: ClusterView) -> Plan:
        plan = self.inner.plan(window, view)
        fresh = ClusterView(view.sites, view.link, view.cfg, view.now)
        pad: dict[tuple[int, str], int] = {}
        for k, (route, group) in enumerate(zip(plan.routes, plan.groups, strict=True)):
            key = (group, route[0])
            pad[key] = max(pad.get(key, 0), window.requests[k].input_len)
        order = sorted(range(len(window.requests)), key=lambda i: window.ready[i])
        dropped = set(plan.dropped)
        for i in order:
            if i in dropped:
                continue
            req, ready, route = window.requests[i], window.ready[i], plan.routes[i]
            est = estimate(fresh, req, ready, route, plan.sm,
                           pad[(plan.groups[i], route[0])])
            if est.e2e > req.deadline:
                dropped.add(i)
            else:
                commit(fresh, req, ready, route, est)
        return Plan(plan.routes, plan.groups, plan.sm, frozenset(dropped))


def allocate_sm(view: ClusterView, site: str, window: Window) -> SmPlan:
    """Stages 3-4: pick the (prefill tile, decode kernel, SM split) that minimises the predicted
    waiting cost of the prefill queue plus the decode slowdown of the active batch.

    Candidates are the time-sliced dominant pair (always launchable: the guarded fallback) and
    every point of every jointly-resident pair's frontier, whose split is the prefill share of
    warp slots. A plan that slows prefill stretches the whole booked backlog, which every
    queued request waits through; a plan that slows decode costs each active sequence the
    tokens it still owes. Re-chosen every window (dynamic adjustment)."""
    s = view.sites[site]
    now = view.now
    active = s.pool.active(now)
    lengths = [r.input_len for r in window.requests] or [256]
    pad = max(lengths)
    backlog = max(0.0, view.lane_free[site] - now)
    dominant = SmPlan(s.prefill_kernels[0].name, s.decode_kernels[0].name, False, 1.0)
    alone = s.prefill_s(lengths, pad, now, dominant, 0)
    waiting = 1 + len(lengths) + backlog / max(alone / len(lengths), 1e-6)
    candidates = [dominant, *_concurrent_plans(s)]
    best, best_cost = dominant, float("inf")
    for plan in candidates:
        prefill = s.prefill_s(lengths, pad, now, plan, active)
        stretch = prefill / alone
        tpot = s.tpot_s(now, 0, min(1.0, prefill / view.cfg.duty_horizon_s), plan)
        cost = (backlog + prefill) * stretch * waiting + active * DECODE_TOKENS_AHEAD * tpot
        if cost < best_cost:
            best, best_cost = plan, cost
    return best


def _concurrent_plans(site) -> list[SmPlan]:
    """Concurrent candidates of a site: for each distinct SM split on some jointly-resident
    pair's frontier, the pair with the best combined kernel efficiency (the others are
    dominated). Static per site, so computed once."""
    cached = getattr(site, "_plans_cache", None)
    if cached is not None:
        return cached
    best: dict[float, tuple[float, SmPlan]] = {}
    for pk, dk, points in site.feasible_pairs():
        for n_p, n_d, _ in points:
            share = round(n_p * pk.warps / (n_p * pk.warps + n_d * dk.warps), 2)
            score = pk.efficiency * dk.efficiency
            if share not in best or score > best[share][0]:
                best[share] = (score, SmPlan(pk.name, dk.name, True, share))
    cached = [plan for _, plan in sorted(best.values(), key=lambda v: v[1].prefill_share)]
    site._plans_cache = cached
    return cached
