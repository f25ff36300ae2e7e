"""Deadline-aware admission (issue 48): refused requests count as SLO misses, never as served."""

from __future__ import annotations

import math

import pytest

from schedlab.core.errors import BadInputError
from schedlab.edge_llm import EdgeConfig, generate, simulate
from schedlab.edge_llm.engine import run
from schedlab.edge_llm.policies import FixedRouter, Plan
from schedlab.edge_llm.routers import make_router
from schedlab.edge_llm.workloads import mooncake

CFG = EdgeConfig(model="qwen3-8b")


def _saturated(n: int = 70):
    """The first ``n`` real Mooncake requests at their raw arrivals: ~12k-token prompts at
    3 req/s, far beyond one A800 + one A6000."""
    return mooncake(1.0, 0)[:n]


def test_admission_counts_refused_requests_as_misses_and_helps_under_overload():
    reqs = _saturated()
    plain = simulate(reqs, "online", CFG)
    admit = simulate(reqs, "online+admit", CFG)
    frame, s = admit.requests, admit.summary
    dropped = frame.filter(frame["mode"] == "dropped")
    assert s["dropped"] == dropped.height > 0
    # every request is in the frame once, refused ones with no latency and as misses
    assert frame.height == s["requests"] == plain.summary["requests"]
    assert sorted(frame["rid"]) == sorted(plain.requests["rid"])
    assert dropped["met"].sum() == 0
    assert all(math.isnan(v) for v in dropped["e2e"])
    # SLO over everyone (a refusal is a miss), not over the served ones
    assert s["slo"] == pytest.approx(frame["met"].sum() / frame.height)
    assert s["slo"] < frame.filter(frame["mode"] != "dropped")["met"].mean()
    # the served ones mostly meet their deadline: admission's prediction is the delay model's
    served = frame.filter(frame["mode"] != "dropped")
    assert served["met"].mean() >= 0.8
    # in overload, refusing the hopeless frees the queues for the rest
    assert s["slo"] > plain.summary["slo"]
    assert s["mean_e2e"] < plain.summary["mean_e2e"]


def test_admission_refuses_nothing_when_everyone_meets_the_deadline():
    reqs = generate(30, 0.5, 0)
    plain = simulate(reqs, "online", EdgeConfig())
    assert plain.summary["slo"] == 1.0
    for name in ("online+admit", "cloud+admit", "splitwise+admit"):
        s = simulate(reqs, name, EdgeConfig()).summary
        assert s["dropped"] == 0, name
    same = simulate(reqs, "online+admit", EdgeConfig()).summary
    assert same["mean_e2e"] == pytest.approx(plain.summary["mean_e2e"])


def test_every_router_has_an_admitted_variant_named_for_it():
    reqs = _saturated(30)
    for base in ("cloud", "splitwise", "online-paper"):
        router = make_router(f"{base}+admit")
        assert router.name == f"{base}+admit"
        s = simulate(reqs, router, CFG).summary
        assert s["policy"] == f"{base}+admit" and s["dropped"] > 0
        # a wrapped fixed router still serves only its own mode
        if base == "cloud":
            assert s["n_cloud"] == s["requests"] - s["dropped"]


class _DropAll(FixedRouter):
    def __init__(self, bad: bool = False) -> None:
        super().__init__("cloud")
        self.bad = bad

    def plan(self, window, view):
        plan = super().plan(window, view)
        n = len(window.requests)
        return Plan(plan.routes, plan.groups, plan.sm,
                    frozenset([n] if self.bad else range(n)))


def test_a_plan_dropping_outside_its_window_or_everyone_is_one_clear_error():
    reqs = generate(5, 1.0, 0)
    with pytest.raises(BadInputError, match="drops"):
        run(reqs, _DropAll(bad=True), EdgeConfig())
    with pytest.raises(BadInputError, match="every request was refused"):
        run(reqs, _DropAll(), EdgeConfig())
