"""Every router by its CLI name: the paper's online policy (four modes; ``online-paper``: the
paper's three), its ablation, each fixed mode, and
the disaggregation baselines (DistServe's placement search, Splitwise)."""

from __future__ import annotations

from collections.abc import Callable

from schedlab.core.registry import lookup
from schedlab.edge_llm.placement import DistServeRouter, SplitwiseRouter
from schedlab.edge_llm.policies import FixedRouter, OnlineRouter, Router

ROUTERS: dict[str, Callable[[], Router]] = {
    "online": OnlineRouter,
    "online-nosm": lambda: OnlineRouter(sm_allocation=False, name="online-nosm"),
    # the paper's router exactly: its three modes (no edge-prefill/cloud-decode direction)
    "online-paper": lambda: OnlineRouter(modes=("cloud", "split", "mix"), name="online-paper"),
    "cloud": lambda: FixedRouter("cloud"),
    "split": lambda: FixedRouter("split"),
    "mix": lambda: FixedRouter("mix"),
    "disagg": lambda: FixedRouter("disagg"),
    "distserve": DistServeRouter,
    "splitwise": SplitwiseRouter,
}


def make_router(name: str) -> Router:
    return lookup(ROUTERS, "policy", name)()
