"""FairCache and its baselines on the shared real CPU engine (``schedlab.llm.engine``).

Why this module: the engine takes Scheduler and CacheManager objects (``schedlab.llm.plugins``)
and knows no policy by name; FairCache's CLI, experiments and users name them (``"vtc"``,
``"faircache"``, ``"lru"``), so the names are resolved here, in the system that owns them.
Needs torch and transformers (imported on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schedlab.faircache.managers import make_plugins

if TYPE_CHECKING:
    from schedlab.llm.accounting import CostWeights
    from schedlab.llm.engine.model import TinyLlama
    from schedlab.llm.engine.serving import EngineOptions, EngineResult
    from schedlab.llm.requests import Trace


def serve(
    trace: Trace,
    scheduler="faircache",
    manager="lru",
    options: EngineOptions | None = None,
    model: TinyLlama | None = None,
    weights: CostWeights | None = None,
) -> EngineResult:
    """Serve ``trace`` on the real engine; policies by CLI name or as objects."""
    from schedlab.llm.engine.serving import serve as engine_serve

    scheduler, manager = make_plugins(scheduler, manager)
    return engine_serve(trace, scheduler, manager, options, model, weights)
