"""Job Fusion Mechanism (JFM): the slowdown of a host job and its surfer sharing one GPU.

CouchSurfer (paper 06, see docs/systems/couchsurfer.md) co-locates a low-priority exploratory
"surfer" with a long-running deterministic "host" and schedules their kernels at fine grain so
the host barely notices. We have no GPU here, so this module is an explicit *model* of that
mechanism; the real two-loop measurement that calibrates it lives in :mod:`.gpucheck`.

Why the model has this shape (sources of every mechanism, numbers in :class:`FusionParams`):

* CUDA stream priorities only choose which *pending* thread block is dispatched next; a running
  block is never preempted (CUDA C++ Programming Guide, "Stream Priorities"). So a high-priority
  host kernel can still wait for the *residual* of a low-priority surfer kernel. JFM bounds that
  residual by slicing surfer work into short kernels (``slice_ms``) and the host's exposure by a
  duty cycle on the host's idle gaps.
* A training job leaves the GPU idle between kernels (data loading, host-side work,
  communication); AntMan (OSDI'20) and TGS (NSDI'23) fill exactly these gaps with opportunistic
  jobs and report "little impact" on production jobs, which is what the priority mode yields
  for small ``slice_ms``.
* Plain co-location without priorities (Gandiva-style packing) lets each job's kernels queue
  behind the other's, so both slow down in proportion to the other's busy share; when the two
  demands exceed the GPU the sum of busy shares is capped at 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schedlab.core.errors import ConfigError

#: co-location modes an engine can be asked for; a GPU with a single occupant is "exclusive"
MODES = ("jfm", "priority", "equal")


@dataclass(frozen=True)
class FusionParams:
    """Parameters of the co-location model; every default is documented in the system's doc.

    guard: the largest host slowdown the user accepts (0.05 = host runs at >= 1/1.05 speed).
    slice_ms: longest surfer kernel JFM lets through (mean residual a host waits is half).
    gap_ms: mean length of a host's idle gap between kernel bursts.
    bandwidth: extra host slowdown per unit of surfer occupancy per unit of host busy share
        (HBM/L2 contention while both kernels are resident).
    efficiency: share of the idle time a surfer gets that turns into its own progress
        (the rest is lost to context switches and slicing).
    equal_contention: in plain packing, share of the other job's busy time that blocks you.
    gpu_memory_gib: memory of one GPU (a host plus a surfer must fit; no swapping modelled).
    """

    guard: float = 0.05
    slice_ms: float = 1.0
    gap_ms: float = 5.0
    bandwidth: float = 0.10
    efficiency: float = 0.90
    equal_contention: float = 0.8
    gpu_memory_gib: float = 32.0

    def __post_init__(self) -> None:
        for name in ("slice_ms", "bandwidth"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ConfigError("must be a finite non-negative number", field=name)
        for name in ("gap_ms", "gpu_memory_gib"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ConfigError("must be a finite positive number", field=name)
        if not self.guard >= 0:
            raise ConfigError("must be non-negative (inf disables the guard)", field="guard")
        for name in ("efficiency", "equal_contention"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError("must be in (0, 1]", field=name)

    @property
    def blocking(self) -> float:
        """Host slowdown per unit of surfer occupancy from non-preemptible residual kernels."""
        return (self.slice_ms / 2.0) / self.gap_ms


def host_sensitivity(host_util: float, params: FusionParams) -> float:
    """kappa: host slowdown caused per unit of GPU time the surfer occupies."""
    return params.blocking + params.bandwidth * host_util


def surfer_occupancy(host_util: float, surfer_util: float, params: FusionParams,
                     guarded: bool = True) -> float:
    """GPU share the surfer may occupy: its demand, the host's idle share, and the guard."""
    idle = max(0.0, 1.0 - host_util)
    occupancy = min(surfer_util, idle)
    if guarded and math.isfinite(params.guard):
        kappa = host_sensitivity(host_util, params)
        if kappa > 0:
            occupancy = min(occupancy, params.guard / kappa)
    return max(0.0, occupancy)


def pair_rates(host_util: float, surfer_util: float, mode: str,
               params: FusionParams) -> tuple[float, float]:
    """(host rate, surfer rate) relative to running alone, for two jobs on one GPU.

    ``jfm``: priority streams + sliced surfer kernels + duty cycle chosen so the host's slowdown
    stays within ``params.guard``. ``priority``: the same without the guard (duty cycle 1).
    ``equal``: plain packing, no priorities (the Gandiva-style baseline).
    """
    if mode in ("jfm", "priority"):
        occupancy = surfer_occupancy(host_util, surfer_util, params, guarded=mode == "jfm")
        host_slowdown = host_sensitivity(host_util, params) * occupancy
        surfer_rate = params.efficiency * occupancy / surfer_util if surfer_util > 0 else 1.0
        return 1.0 / (1.0 + host_slowdown), min(1.0, surfer_rate)
    if mode == "equal":
        c = params.equal_contention
        cap = 1.0 / max(1.0, host_util + surfer_util)
        return min(1.0 / (1.0 + c * surfer_util), cap), min(1.0 / (1.0 + c * host_util), cap)
    raise ConfigError(f"unknown co-location mode '{mode}'; valid: {', '.join(MODES)}",
                      field="mode")


def host_slowdown(host_util: float, surfer_util: float, mode: str, params: FusionParams) -> float:
    """Predicted fractional slowdown of the host (0.03 = 3 % longer iterations)."""
    rate, _ = pair_rates(host_util, surfer_util, mode, params)
    return 1.0 / rate - 1.0


def fits_memory(host_mem: float, surfer_mem: float, params: FusionParams) -> bool:
    """A host and a surfer share one GPU only if both working sets fit (no host swapping)."""
    return host_mem + surfer_mem <= params.gpu_memory_gib + 1e-9


def fit_params(samples: list[dict[str, float]], base: FusionParams | None = None) -> FusionParams:
    """Calibrate ``slice_ms`` and ``bandwidth`` from measured co-location pairs (least squares).

    Each sample holds ``host_util``, ``occupancy`` (surfer's GPU share while co-located) and
    ``host_slowdown`` as measured, e.g. by :func:`schedlab.couchsurfer.gpucheck.measure_pair`.
    The model says slowdown = occupancy * (slice/(2 gap) + bandwidth * host_util), linear in
    the two unknowns, so an ordinary least-squares fit with a non-negativity clip suffices.
    """
    import numpy as np

    base = base or FusionParams()
    if len(samples) < 2:
        raise ConfigError("needs at least two measured pairs", field="samples")
    try:
        occ = np.array([s["occupancy"] for s in samples], dtype=float)
        util = np.array([s["host_util"] for s in samples], dtype=float)
        slow = np.array([s["host_slowdown"] for s in samples], dtype=float)
    except KeyError as exc:
        raise ConfigError("each sample needs host_util, occupancy, host_slowdown",
                          field=str(exc)) from exc
    design = np.column_stack([occ, occ * util])
    (a, b), *_ = np.linalg.lstsq(design, slow, rcond=None)
    slice_ms = max(0.0, float(a)) * 2.0 * base.gap_ms
    return FusionParams(guard=base.guard, slice_ms=slice_ms, gap_ms=base.gap_ms,
                        bandwidth=max(0.0, float(b)), efficiency=base.efficiency,
                        equal_contention=base.equal_contention,
                        gpu_memory_gib=base.gpu_memory_gib)
