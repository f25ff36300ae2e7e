"""Replay a request stream through a router given by name or object (the engine is
:mod:`schedlab.edge_llm.engine`; the routers' registry is :mod:`schedlab.edge_llm.routers`)."""

from __future__ import annotations

from schedlab.edge_llm.config import EdgeConfig
from schedlab.edge_llm.engine import COLUMNS, SimResult, run
from schedlab.edge_llm.policies import Router
from schedlab.edge_llm.routers import make_router
from schedlab.edge_llm.workloads import EdgeRequest

__all__ = ["COLUMNS", "SimResult", "simulate"]


def simulate(
    requests: list[EdgeRequest], router: Router | str, cfg: EdgeConfig | None = None
) -> SimResult:
    """Replay ``requests`` (sorted by arrival) through ``router`` on deployment ``cfg``."""
    return run(requests, make_router(router) if isinstance(router, str) else router, cfg)
