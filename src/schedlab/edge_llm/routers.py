"""Every router by its CLI name: the paper's online policy (four modes; ``online-paper``: the
paper's three), its ablation, each fixed mode, and
the disaggregation baselines (DistServe's placement search, Splitwise)."""

from __future__ import annotations

from collections.abc import Callable

from schedlab.core.registry import lookup
from schedlab.edge_llm.placement import DistServeRouter, SplitwiseRouter
from schedlab.edge_llm.policies import AdmissionRouter, FixedRouter, OnlineRouter, Router

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
#: a router name with this suffix gets deadline-aware admission (refuse a request predicted to
#: miss its deadline): the online routers apply it inside their loop, every other router through
#: the same rule in front of it (:class:`~schedlab.edge_llm.policies.AdmissionRouter`)
ADMIT = "+admit"


def make_router(name: str) -> Router:
    base = name.removesuffix(ADMIT)
    router = lookup(ROUTERS, "policy", base)()
    if base == name:
        return router
    if isinstance(router, OnlineRouter):
        router.admission, router.name = True, name
        return router
    return AdmissionRouter(router)
