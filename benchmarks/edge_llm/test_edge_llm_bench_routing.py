"""Speed targets of issues 8/26: one routing decision < 50 us; a 10,000-request replay < 20 s.

The decision is what the online router does per request: predicted E2E on each of the four
modes (cloud, split, mix, disagg) from the live queues, plus each mode's externality on the
other requests, then the argmin."""

import pytest

from schedlab.edge_llm import EdgeConfig, generate, make_router, simulate
from schedlab.edge_llm.delay import Link
from schedlab.edge_llm.policies import MODES, Window, estimate, externality
from schedlab.edge_llm.sites import ClusterView, make_sites


@pytest.fixture(scope="module")
def setting():
    cfg = EdgeConfig().validate()
    sites = make_sites(cfg)
    reqs = generate(400, 2.0, 0)
    simulate(reqs[:200], "online", cfg)  # warm caches (kernel pairs, frontiers)
    return cfg, sites, reqs


def test_route_decision_one_request(benchmark, setting):
    """Stage-4 routing of one request: predicted E2E + externality on each of the four
    modes, argmin."""
    cfg, sites, reqs = setting
    view = ClusterView(sites, Link(10, 2), cfg, 1.0)
    plans = {k: s.default_plan() for k, s in sites.items()}
    req = reqs[0]

    def cost(route):
        est = estimate(view, req, 1.01, route, plans)
        return est.e2e + externality(view, route, est, plans, req.output_len, 512)

    def decide():
        return min(MODES.values(), key=cost)

    benchmark(decide)


def test_window_plan_one_request(benchmark, setting):
    """The whole four-stage loop for a one-request window (admission, bucketing, tile and SM
    allocation on both GPUs, routing)."""
    cfg, sites, reqs = setting
    router = make_router("online")
    window = Window(1.0, reqs[:1], [1.01])
    benchmark(lambda: router.plan(window, ClusterView(sites, Link(10, 2), cfg, 1.0)))


@pytest.mark.parametrize("policy", ["online", "cloud", "distserve"])
def test_replay_10k_requests(benchmark, policy):
    reqs = generate(10_000, 2.0, 0)
    benchmark.pedantic(lambda: simulate(reqs, policy, EdgeConfig()), rounds=1, iterations=1)
