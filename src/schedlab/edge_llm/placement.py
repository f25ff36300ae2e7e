"""The strongest disaggregation baselines: DistServe's placement search and Splitwise's split.

* **DistServe** (Zhong et al., OSDI'24) chooses a *placement* — which GPUs run prefill
  instances, which run decode instances, and how requests are dispatched among them — by
  simulating candidate placements on a sample of the workload and keeping the one with the best
  SLO attainment (its goodput objective), then re-plans when the workload shifts. With one GPU
  per site (tensor/pipeline parallelism degenerate to 1) the candidates are: one colocated
  instance on either GPU, prefill on one GPU and decode on the other (both directions), and two
  colocated replicas behind a shortest-queue dispatcher. Its simulator here is the project's
  own engine (:func:`schedlab.edge_llm.engine.run`), replayed on the last ``sample`` arrivals
  every ``every`` arrivals; until the first ``first`` arrivals are in, an M/D/1 model
  (DistServe's analytical queueing model) ranks every placement.
* **Splitwise** (Patel et al., ISCA'24) runs the prompt phase on the prompt pool (the
  high-compute GPU: the cloud's) and the token phase on the token pool (the edge's), shipping
  the KV cache; its cluster scheduler moves a phase to the other machine's mixed pool when the
  own pool's queue is too long. "Too long" is read as "the delay model predicts the request
  would miss its TTFT (prompt pool) or TPOT (token pool) target there". Which GPU is the prompt
  machine is Splitwise's provisioning choice, made by simulating both on the first sample.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from schedlab.edge_llm.engine import run
from schedlab.edge_llm.policies import (
    MODES,
    Plan,
    Route,
    Window,
    bucket_groups,
    commit,
    estimate,
    site_plans,
)
from schedlab.edge_llm.sites import ClusterView
from schedlab.edge_llm.workloads import EdgeRequest


@dataclass(frozen=True)
class Placement:
    """Instances and dispatch: one route for every request, or replicas (shortest queue)."""

    name: str
    routes: tuple[Route, ...]


PLACEMENTS: tuple[Placement, ...] = (
    Placement("colocated on the cloud GPU", (MODES["cloud"],)),
    Placement("colocated on the edge GPU", (MODES["mix"],)),
    Placement("prefill cloud, decode edge", (MODES["split"],)),
    Placement("prefill edge, decode cloud", (MODES["disagg"],)),
    Placement("two colocated replicas", (MODES["cloud"], MODES["mix"])),
)


class PlacementRouter:
    """Serves one placement; replicas take each request on the instance whose prefill queue
    frees first (DistServe's dispatcher sends to the shortest queue)."""

    def __init__(self, placement: Placement) -> None:
        self.placement = placement
        self.name = placement.name

    def plan(self, window: Window, view: ClusterView) -> Plan:
        groups, buckets = bucket_groups(window, view.cfg.delta)
        plans = site_plans(view, window, True)
        routes = list(self.placement.routes[:1]) * len(window.requests)
        if len(self.placement.routes) > 1:
            pad = {i: max(window.requests[j].input_len for j in b) for b in buckets for i in b}
            wan = view.cfg.backhaul.wan_ms / 1e3
            for i in sorted(range(len(routes)), key=lambda k: window.ready[k]):
                req, ready = window.requests[i], window.ready[i]
                route = min(self.placement.routes, key=lambda r: max(
                    ready + (wan if r[0] == "cloud" else 0.0), view.lane_free[r[0]]))
                commit(view, req, ready, route, estimate(view, req, ready, route, plans, pad[i]))
                routes[i] = route
        return Plan(routes, groups, plans)


class DistServeRouter:
    """DistServe: simulator-guided placement search on the recent workload, re-planned."""

    name = "distserve"

    def __init__(self, sample: int = 300, every: int = 200, first: int = 20,
                 placements: tuple[Placement, ...] = PLACEMENTS) -> None:
        self.placements = placements
        self.seen: deque[EdgeRequest] = deque(maxlen=sample)
        self.every, self.first = every, first
        self.since = 0
        self.current: PlacementRouter | None = None
        self.searches = 0

    def plan(self, window: Window, view: ClusterView) -> Plan:
        self.seen.extend(window.requests)
        self.since += len(window.requests)
        due = self.since >= self.every or (self.current is None and len(self.seen) >= self.first)
        if due:
            self.current = PlacementRouter(self.search(view))
            self.since = 0
        router = self.current or PlacementRouter(
            _md1_choice(list(self.seen), view, self.placements))
        return router.plan(window, view)

    def search(self, view: ClusterView) -> Placement:
        """Replay the sample (arrivals rebased to 0) under every placement; best SLO
        attainment wins, then the lower mean end-to-end latency."""
        t0 = self.seen[0].arrival
        sample = [replace(r, arrival=r.arrival - t0) for r in self.seen]
        self.searches += 1

        def score(p: Placement) -> tuple[float, float]:
            summary = run(sample, PlacementRouter(p), view.cfg).summary
            return (-summary["slo"], summary["mean_e2e"])

        return min(self.placements, key=score)


def _md1_choice(seen: list[EdgeRequest], view: ClusterView,
                placements: tuple[Placement, ...]) -> Placement:
    """Before any sample: the placement whose first route has the lowest M/D/1 prefill wait
    plus service, KV shipping and decode time at the observed rate and mean prompt (replicas
    split the rate)."""
    if not seen:
        return placements[0]
    span = max(view.now - seen[0].arrival, view.cfg.window_ms / 1e3)
    rate = len(seen) / span
    mean_len = max(1, int(sum(r.input_len for r in seen) / len(seen)))

    def cost(placement: Placement) -> float:
        total = 0.0
        for p, d in placement.routes:
            site = view.sites[p]
            service = site.prefill_s([mean_len], mean_len, view.now, decodes=0)
            rho = rate / len(placement.routes) * service
            if rho >= 1.0:
                return float("inf")
            wait = rho * service / (2.0 * (1.0 - rho))
            kv = (view.link.duration(site.kv_per_token * mean_len) if p != d else 0.0)
            wan = view.cfg.backhaul.wan_ms / 1e3 if "cloud" in (p, d) else 0.0
            total += wait + service + kv + wan + 128 * view.sites[d].tpot_s(view.now)
        return total / len(placement.routes)

    return min(placements, key=cost)


class SplitwiseRouter:
    """Splitwise: prompt pool on the cloud GPU, token pool on the edge GPU, KV over the
    backhaul; a phase overflows to the other machine (the mixed pool) when its own pool would
    miss the request's TTFT or TPOT target and the other does better."""

    name = "splitwise"

    def __init__(self, first: int = 20) -> None:
        self.provision = DistServeRouter(sample=first, every=10**9, first=first,
                                         placements=PLACEMENTS[2:4])

    def plan(self, window: Window, view: ClusterView) -> Plan:
        self.provision.seen.extend(window.requests)
        if self.provision.current is None and len(self.provision.seen) >= self.provision.first:
            self.provision.current = PlacementRouter(self.provision.search(view))
        chosen = self.provision.current
        prompt, token = chosen.placement.routes[0] if chosen else MODES["split"]
        groups, buckets = bucket_groups(window, view.cfg.delta)
        plans = site_plans(view, window, True)
        pad = {i: max(window.requests[j].input_len for j in b) for b in buckets for i in b}
        routes: list[Route] = [(prompt, token)] * len(window.requests)
        for i in sorted(range(len(routes)), key=lambda k: window.ready[k]):
            req, ready = window.requests[i], window.ready[i]
            route = (prompt, token)
            est = estimate(view, req, ready, route, plans, pad[i])
            if est.ttft > req.ttft_slo:  # prompt pool overloaded: prompt on the token machine
                alt = estimate(view, req, ready, (token, token), plans, pad[i])
                if alt.ttft < est.ttft:
                    route, est = (token, token), alt
            if est.tpot > req.tpot_slo:  # token pool overloaded: tokens on the prompt machine
                other = (route[0], prompt)
                alt = estimate(view, req, ready, other, plans, pad[i])
                if alt.e2e < est.e2e:
                    route, est = other, alt
            commit(view, req, ready, route, est)
            routes[i] = route
        return Plan(routes, groups, plans)
