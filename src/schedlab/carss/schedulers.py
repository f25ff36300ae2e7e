"""Every CARSS scheduler by CLI name: the paper's method, COSCO's baselines, the heuristics.

Why apart from ``policies``: CARSS (``surrogate``) and COSCO's baselines (``cosco``) build on
the base classes in ``policies`` (and import PyTorch), so the registry that names all of them
sits above all three; ``policies`` then imports neither and no import cycle remains.
"""

from __future__ import annotations

from collections.abc import Callable

from schedlab.carss.policies import (
    BestFit,
    CoSimScheduler,
    EarliestDeadline,
    LeastLoaded,
    PackSleep,
    RandomScheduler,
    RoundRobin,
    Scheduler,
)
from schedlab.core.registry import lookup


def _cosim(
    forecaster: str, label: str | None = None, horizon: int | None = None
) -> Callable[..., Scheduler]:
    def build(**kwargs: object) -> Scheduler:
        if horizon is not None:
            kwargs["horizon"] = horizon
        scheduler = CoSimScheduler(forecaster=forecaster, **kwargs)  # type: ignore[arg-type]
        scheduler.name = f"cosim-{label or forecaster}"
        return scheduler

    return build


def _cosco(kind: str, **fixed: object) -> Callable[..., Scheduler]:
    def build(**kwargs: object) -> Scheduler:
        from schedlab.carss import cosco

        scheduler = getattr(cosco, kind)(**kwargs, **fixed)
        if fixed:
            scheduler.name = f"{scheduler.name}-ll"
        return scheduler

    return build


def _learned(kind: str) -> Callable[..., Scheduler]:
    def build(**kwargs: object) -> Scheduler:
        from schedlab.carss import surrogate

        return getattr(surrogate, kind)(**kwargs)

    return build


SCHEDULERS: dict[str, Callable[..., Scheduler]] = {
    "carss": _learned("CARSS"),
    "cosim-adaptive": _cosim("adaptive"),
    "cosim-static": _cosim("static"),
    # COSCO's baselines (schedlab.carss.cosco)
    "gobi": _cosco("GOBI"),
    "gobi2": _cosco("GOBI2"),
    "gobi-ll": _cosco("GOBI", start="least-loaded"),
    "a3c": _cosco("A3C"),
    "ga": _cosco("GA"),
    "hgp": _cosco("HGP"),
    "pond": _cosco("POND"),
    "lr-mmt": _cosco("LRMMT"),
    "mad-mmt": _cosco("MADMMT"),
    "iqr-mmt": _cosco("IQRMMT"),
    "least-loaded": LeastLoaded,
    "edf": EarliestDeadline,
    "best-fit": BestFit,
    "round-robin": RoundRobin,
    "random": RandomScheduler,
    "pack-sleep": PackSleep,
    # the earlier waiting-tasks-only GOBI port (12 steps, no migrations), for comparison
    "gobi-lite": _learned("GOBI"),
}
#: forecast ablations of CARSS's co-simulation (not in the default comparison)
ABLATIONS: dict[str, Callable[..., Scheduler]] = {
    "cosim-none": _cosim("last-value", "none", horizon=1),
    "cosim-ets": _cosim("ets"),
    "cosim-mstl": _cosim("sf-mstl", "mstl"),
}
#: COSCO's baselines
COSCO_BASELINES = ("gobi", "gobi2", "a3c", "ga", "hgp", "pond", "lr-mmt", "mad-mmt", "iqr-mmt")
#: the baselines (the issue's list plus edf); cosim-adaptive is our ablation of CARSS
BASELINES = ("cosim-static", "gobi", "least-loaded", "edf", "best-fit", "round-robin", "random")
#: keyword arguments each kind of scheduler accepts from an experiment's configuration
COSIM_KEYS = ("horizon", "samples", "season", "seed", "candidates", "forecaster_kwargs", "actions")
COSCO_KEYS = ("seed", "slots", "offline", "task_source")


def make_scheduler(name: str, **kwargs: object) -> Scheduler:
    """Build a scheduler by CLI name; co-simulating ones take horizon/samples/season/seed/
    candidates/forecaster_kwargs, GOBI takes seed, heuristics ignore every keyword."""
    factory = lookup({**SCHEDULERS, **ABLATIONS}, "scheduler", name)
    if name == "carss" or name.startswith("cosim-"):
        return factory(**{k: v for k, v in kwargs.items() if k in COSIM_KEYS})
    if name in ("gobi-lite", "pond"):
        return factory(**{k: v for k, v in kwargs.items() if k == "seed"})
    if name in (*COSCO_BASELINES, "gobi-ll") and name not in ("lr-mmt", "mad-mmt", "iqr-mmt"):
        return factory(**{k: v for k, v in kwargs.items() if k in COSCO_KEYS})
    return factory()
