"""Job Fusion Mechanism (JFM): the rates of a host job and its surfer sharing one GPU.

CouchSurfer (paper 06) co-locates a low-priority exploratory "surfer" with a long-running
deterministic "host" and schedules their kernels at fine grain so the host barely notices.
There is no GPU here, so this is an explicit *model*, built on measurements where we have
them:

* **Plain co-location** (two jobs, no priorities: Gandiva/Lucid packing, Alibaba GPU-share
  pods) runs at the speeds Lucid measured for 1,388 job pairs (:mod:`.interference`); a pair
  that was not measured runs at the fitted model's prediction plus a per-pair residual.
* **Priority streams** (JFM, AntMan-style opportunistic jobs): CUDA stream priorities pick
  which *pending* block runs next but never preempt a running one (CUDA C++ Programming Guide,
  "Stream Priorities"), and both kernels still share memory bandwidth. So a share
  ``priority_residual`` (beta) of the plain slowdown survives. The co-location data (Lucid's
  pairs) were measured *without* priorities, so the only value they support is beta = 1 (the
  default: no priority protection); ``benchmarks/couchsurfer/gpu_check.py`` measures beta on a
  GPU machine and :func:`fit_params` turns its output into beta. Likewise ``efficiency`` = 1:
  a surfer at duty ``d`` progresses at ``d`` times its *measured* co-located speed (the data
  hold no duty-cycling cost).
* **The guard** is a *controller* acting on the host's *measured* slowdown (``controller``):

  - ``"ucb"`` (default): the first duty cycle comes from a *pessimistic* prediction (the fitted
    speed minus ``prior_z`` residual standard deviations, the fit's held-out RMSE, and the
    prior beta); every control step (``control_period_s``, then doubling up to
    ``max_backoff`` periods once observed) it observes the host's slowdown (truth x (1 +
    noise)), estimates the gain ``slowdown / d`` from all observations so far and sets ``d``
    from an *upper confidence bound* on it: mean x (1 + ``obs_z`` x sd / sqrt(n)), sd the
    larger of the observations' spread and ``noise_prior``. Uncertainty backs the surfer off;
    evidence lets it speed up.
  - ``"once"``: the earlier controller — duty from the point prediction, one correction
    ``control_period_s`` later (kept for the side-by-side comparison).

  The simulator *accounts* with the truth (measured where available), so a host whose real
  interference is worse than believed is slowed past the guard until the controller learns it.
  Nothing clamps the accounted slowdown.

Rates (host, surfer) relative to running alone, with plain speeds ``s_h``, ``s_s``::

    equal / share : (s_h, s_s)
    priority      : d = 1
    jfm           : d = min(1, guard * (1 - margin) / (beta * (1 / s_h_pred - 1)))
                    host = 1 / (1 + beta * d * (1 / s_h - 1)), surfer = efficiency * d * s_s
    timeslice     : both (1 - overhead) / 2 (Gandiva's suspend/resume time-slicing)
    bubble        : host 1 / (1 + bubble_host_slowdown), filler bubble_efficiency x (1 - u_h)
                    (Hydro: the filler runs only in the host's idle GPU time)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schedlab.core.errors import ConfigError
from schedlab.couchsurfer.interference import DEFAULT_COEF, DEFAULT_RMSE, MIN_SPEED, predict_speed

#: co-location modes an engine can be asked for; a GPU with a single occupant is "exclusive"
MODES = ("jfm", "priority", "equal", "share", "timeslice", "bubble")
CONTROLLERS = ("ucb", "once")


@dataclass(frozen=True)
class FusionParams:
    """Parameters of the co-location model; every default is documented in the system's doc.

    guard: the largest host slowdown the user accepts (0.05 = host runs at >= 1/1.05 speed).
    priority_residual: share of the plain slowdown a high-priority host still suffers.
    efficiency: share of a surfer's duty-cycled time that turns into its own progress.
    guard_margin: the controller aims at guard * (1 - margin) to absorb prediction error.
    control_period_s: seconds after a pair forms at which JFM's controller observes the
        host's real slowdown and rescales the duty cycle (0: never; prediction only).
    measure_noise: relative error (std) of that observation (iteration-time jitter).
    timeslice_overhead: share of a time-sliced GPU lost to suspend/resume.
    gpu_memory_gib: memory of one GPU where the cluster does not say (homogeneous clusters).
    coef: coefficients of the fitted interference model (:mod:`.interference`).
    controller: ``"ucb"`` (pessimistic start, repeated upper-confidence corrections) or
        ``"once"`` (point prediction, one correction: the earlier controller).
    prior_z: standard deviations of the model residual the first duty cycle backs off by.
    residual_sd: that residual (speed units; the fit's held-out RMSE on Lucid's pairs).
    prior_beta: the beta the controller assumes before it observes (None: priority_residual).
    obs_z: width of the upper confidence bound on the observed gain.
    noise_prior: the least relative observation noise the controller assumes.
    max_backoff: the control interval doubles after each observation up to this many periods.
    bubble_host_slowdown: host slowdown when a job fills only its idle GPU time (Hydro's
        bubble interleaving; PipeFill measured 2 % for bubble filling).
    bubble_efficiency: share of the host's idle GPU time a bubble filler turns into progress.
    """

    guard: float = 0.05
    priority_residual: float = 1.0
    efficiency: float = 1.0
    guard_margin: float = 0.1
    control_period_s: float = 10.0
    measure_noise: float = 0.02
    timeslice_overhead: float = 0.03
    gpu_memory_gib: float = 32.0
    coef: tuple[float, ...] = DEFAULT_COEF
    controller: str = "ucb"
    prior_z: float = 1.28
    residual_sd: float = DEFAULT_RMSE
    prior_beta: float | None = None
    obs_z: float = 1.64
    noise_prior: float = 0.10
    max_backoff: int = 32
    bubble_host_slowdown: float = 0.02
    bubble_efficiency: float = 1.0

    def __post_init__(self) -> None:
        if not self.guard >= 0:
            raise ConfigError("must be non-negative (inf disables the guard)", field="guard")
        if not 0 <= self.priority_residual <= 1:
            raise ConfigError("must be in [0, 1]", field="priority_residual")
        if not 0 < self.efficiency <= 1:
            raise ConfigError("must be in (0, 1]", field="efficiency")
        for name in ("guard_margin", "timeslice_overhead"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError("must be in [0, 1)", field=name)
        for name in ("control_period_s", "measure_noise"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError("must be a finite non-negative number", field=name)
        if not (math.isfinite(self.gpu_memory_gib) and self.gpu_memory_gib > 0):
            raise ConfigError("must be a finite positive number", field="gpu_memory_gib")
        if len(self.coef) != len(DEFAULT_COEF) or not all(math.isfinite(c) for c in self.coef):
            raise ConfigError(f"needs {len(DEFAULT_COEF)} finite coefficients", field="coef")
        if self.controller not in CONTROLLERS:
            raise ConfigError(f"unknown controller '{self.controller}'; valid: "
                              f"{', '.join(CONTROLLERS)}", field="controller")
        for name in ("prior_z", "residual_sd", "obs_z", "noise_prior", "bubble_host_slowdown"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError("must be a finite non-negative number", field=name)
        if self.prior_beta is not None and not 0 <= self.prior_beta <= 1:
            raise ConfigError("must be in [0, 1]", field="prior_beta")
        if self.max_backoff < 1:
            raise ConfigError("must be at least 1", field="max_backoff")
        if not 0 < self.bubble_efficiency <= 1:
            raise ConfigError("must be in (0, 1]", field="bubble_efficiency")


def duty_cycle(host_util: float, surfer_util: float, params: FusionParams) -> float:
    """The surfer's duty cycle JFM's controller picks from the *predicted* interference."""
    if not math.isfinite(params.guard):
        return 1.0
    predicted = predict_speed(host_util, surfer_util, params.coef)
    slow = params.priority_residual * (1.0 / predicted - 1.0)
    if slow <= 0:
        return 1.0
    return max(0.0, min(1.0, params.guard * (1.0 - params.guard_margin) / slow))


def prior_duty(host_util: float, surfer_util: float, params: FusionParams) -> float:
    """The first duty cycle of the ``ucb`` controller: from a *pessimistic* prediction (the
    fitted speed minus ``prior_z`` residual sds, the prior beta), before any observation."""
    if not math.isfinite(params.guard):
        return 1.0
    if params.controller == "once":
        return duty_cycle(host_util, surfer_util, params)
    predicted = predict_speed(host_util, surfer_util, params.coef)
    pessimistic = max(MIN_SPEED, predicted - params.prior_z * params.residual_sd)
    beta = params.priority_residual if params.prior_beta is None else params.prior_beta
    slow = beta * (1.0 / pessimistic - 1.0)
    if slow <= 0:
        return 1.0
    return max(0.0, min(1.0, params.guard * (1.0 - params.guard_margin) / slow))


def pair_rates(host_util: float, surfer_util: float, mode: str, params: FusionParams,
               truth: tuple[float, float] | None = None,
               duty: float | None = None) -> tuple[float, float]:
    """(host rate, surfer rate) relative to running alone, for two jobs on one GPU.

    ``truth`` is the pair's plain co-location speeds (measured or drawn by
    :class:`.interference.PairTruth`); without it the prediction stands in for the truth.
    ``duty`` overrides JFM's predicted duty cycle (the engine's controller sets it).
    """
    if truth is None:
        truth = (predict_speed(host_util, surfer_util, params.coef),
                 predict_speed(surfer_util, host_util, params.coef))
    s_h, s_s = truth
    if mode in ("equal", "share"):
        return s_h, s_s
    if mode == "timeslice":
        half = 0.5 * (1.0 - params.timeslice_overhead)
        return half, half
    if mode == "bubble":
        # Hydro's interleaving: the filler runs only in the host's idle GPU time
        idle = max(0.0, 1.0 - host_util)
        return (1.0 / (1.0 + params.bubble_host_slowdown),
                min(1.0, params.bubble_efficiency * idle))
    if mode in ("jfm", "priority"):
        if mode == "priority":
            d = 1.0
        else:
            d = duty_cycle(host_util, surfer_util, params) if duty is None else duty
        host = 1.0 / (1.0 + params.priority_residual * d * max(0.0, 1.0 / s_h - 1.0))
        return host, min(1.0, params.efficiency * d * s_s)
    raise ConfigError(f"unknown co-location mode '{mode}'; valid: {', '.join(MODES)}",
                      field="mode")


def host_slowdown(host_util: float, surfer_util: float, mode: str, params: FusionParams,
                  truth: tuple[float, float] | None = None) -> float:
    """Fractional slowdown of the host (0.03 = 3 % longer iterations)."""
    rate, _ = pair_rates(host_util, surfer_util, mode, params, truth)
    return 1.0 / rate - 1.0


def fits_memory(host_mem: float, surfer_mem: float, capacity: float) -> bool:
    """A host and a surfer share one GPU only if both working sets fit (no host swapping)."""
    return host_mem + surfer_mem <= capacity + 1e-9


def fit_params(samples: list[dict[str, float]], base: FusionParams | None = None) -> FusionParams:
    """Calibrate ``priority_residual`` from measured pairs (least squares through 0).

    Each sample holds ``equal_slowdown`` (host slowdown when both run at the same priority)
    and ``priority_slowdown`` (host on a high-priority stream, surfer at full duty), as
    ``benchmarks/couchsurfer/gpu_check.py`` writes them.
    """
    import dataclasses

    base = base or FusionParams()
    if len(samples) < 1:
        raise ConfigError("needs at least one measured pair", field="samples")
    try:
        eq = [float(s["equal_slowdown"]) for s in samples]
        pr = [float(s["priority_slowdown"]) for s in samples]
    except KeyError as exc:
        raise ConfigError("each sample needs equal_slowdown and priority_slowdown",
                          field=str(exc).strip("'")) from None
    den = sum(e * e for e in eq)
    if den <= 0:
        raise ConfigError("the pairs show no plain-sharing slowdown to scale",
                          field="equal_slowdown")
    beta = min(1.0, max(0.0, sum(p * e for p, e in zip(pr, eq, strict=True)) / den))
    return dataclasses.replace(base, priority_residual=beta)
