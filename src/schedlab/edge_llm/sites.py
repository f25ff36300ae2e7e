"""GPU sites (cloud, edge) with their SM plans, and the forecast view routers plan against.

Paper: "Latency-aware LLM inference scheduling across device, edge and cloud"
(../shared/papers/04-edge_llm.md). A site is one GPU running both phases. How the phases share
it is an :class:`SmPlan`: a prefill kernel (its tile), a decode kernel and, when the pair passes
the joint-residency bound, a concurrent split of the SMs; otherwise the hardware serialises
them and decode iterations wait behind planning chunks (time slicing). The physics lives here,
so the simulator never needs to know which router produced a plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from schedlab.edge_llm.config import EdgeConfig
from schedlab.edge_llm.delay import DecodePool, GpuTiming, Lane, Link
from schedlab.edge_llm.hopper import get_kernel, kernels
from schedlab.llm.costmodel import CostModel
from schedlab.llm.occupancy import KernelDesc, frontier, gpu_arch, jointly_resident

SITES = ("cloud", "edge")
#: mean context per request used to size the decode batch by KV memory
KV_SIZING_TOKENS = 1536


@dataclass(frozen=True)
class SmPlan:
    """How a GPU's SMs are shared between prefill and decode."""

    prefill_kernel: str
    decode_kernel: str
    concurrent: bool = False
    prefill_share: float = 1.0  # of the SMs, while a decode batch is active

    def __post_init__(self) -> None:
        if not 0.0 < self.prefill_share <= 1.0:
            raise ValueError(f"prefill_share {self.prefill_share} not in (0, 1]")


class Site:
    """One GPU: timing model, prefill lane, decode pool and the SM plan in force."""

    def __init__(self, name: str, gpu: str, cfg: EdgeConfig, budget: float) -> None:
        self.name = name
        self.gpu = gpu
        self.arch, self.sms = gpu_arch(gpu)
        cost = CostModel.from_specs(cfg.model, gpu)
        self.timing = GpuTiming(cost, budget, cfg.chunk_tokens, cfg.decode_saturation)
        self.kv_per_token = cost.kv_bytes_per_token
        self.lane = Lane()
        self.pool = DecodePool(cost.kv_capacity_tokens() // KV_SIZING_TOKENS)
        self.horizon = cfg.duty_horizon_s
        self.prefill_kernels = kernels(self.arch.name, "prefill", "gemm")
        self.decode_kernels = kernels(self.arch.name, "decode", "gemm")
        self._effective: dict[SmPlan, tuple[KernelDesc, KernelDesc, bool, float]] = {}
        self.plan = self.default_plan()
        self.fallbacks = 0

    def default_plan(self) -> SmPlan:
        """The dominant pair (each phase's most efficient kernel), asking for concurrency."""
        return SmPlan(self.prefill_kernels[0].name, self.decode_kernels[0].name, True, 0.5)

    def set_plan(self, plan: SmPlan) -> None:
        """Apply a plan; a concurrent plan whose pair cannot co-reside falls back (guard)."""
        pk, dk = get_kernel(plan.prefill_kernel), get_kernel(plan.decode_kernel)
        if plan.concurrent and not jointly_resident(pk, dk, self.arch):
            plan = SmPlan(plan.prefill_kernel, plan.decode_kernel, False, 1.0)
            self.fallbacks += 1
        self.plan = plan

    def effective(self, plan: SmPlan | None = None) -> tuple[KernelDesc, KernelDesc, bool, float]:
        """(prefill kernel, decode kernel, runs concurrently, prefill share) of a plan, after
        the hardware's say on co-residency; memoised because routers ask it per request."""
        plan = plan or self.plan
        found = self._effective.get(plan)
        if found is None:
            pk, dk = get_kernel(plan.prefill_kernel), get_kernel(plan.decode_kernel)
            conc = plan.concurrent and jointly_resident(pk, dk, self.arch)
            found = (pk, dk, conc, plan.prefill_share if conc else 1.0)
            self._effective[plan] = found
        return found

    def prefill_s(
        self,
        lengths: list[int],
        pad_to: int,
        at: float,
        plan: SmPlan | None = None,
        decodes: int | None = None,
    ) -> float:
        """Duration of a padded prefill batch starting at ``at`` under the plan."""
        pk, dk, conc, share = self.effective(plan)
        active = self.pool.active(at) if decodes is None else decodes
        base = self.timing.prefill_s(lengths, pad_to, pk.tile_m, pk.efficiency)
        if active == 0:
            return base
        if conc:
            return base / share
        # time slicing: one decode iteration runs between consecutive planning chunks
        chunks = max(1, -(-len(lengths) * pad_to // self.timing.chunk))
        ctx = active * self.pool.mean_context()
        return base + chunks * self.timing.decode_iter_s(active, ctx) / dk.efficiency

    def tpot_s(
        self, at: float, extra_active: int = 0, extra_duty: float = 0.0, plan: SmPlan | None = None
    ) -> float:
        """Time per output token for a sequence joining the decode batch at ``at``."""
        pk, dk, conc, share = self.effective(plan)
        active = self.pool.active(at) + extra_active + 1
        ctx = active * max(self.pool.mean_context(), 1.0)
        duty = min(1.0, self.lane.duty(at, self.horizon) + extra_duty)
        full = self.timing.decode_iter_s(active, ctx) / dk.efficiency
        if conc:
            shared = self.timing.decode_iter_s(active, ctx, 1.0 - share) / dk.efficiency
            return (1.0 - duty) * full + duty * shared
        return full + duty * self.timing.chunk_s(pk.tile_m, pk.efficiency)

    def feasible_pairs(self) -> list[tuple[KernelDesc, KernelDesc, list[tuple[int, int, str]]]]:
        """Every (prefill, decode) kernel pair that passes joint residency, with its frontier."""
        pairs = []
        for pk in self.prefill_kernels:
            for dk in self.decode_kernels:
                points = frontier(pk, dk, self.arch)
                if points:
                    pairs.append((pk, dk, points))
        return pairs


def make_sites(cfg: EdgeConfig) -> dict[str, Site]:
    return {
        "cloud": Site("cloud", cfg.cloud_gpu, cfg, cfg.cloud_sm_budget),
        "edge": Site("edge", cfg.edge_gpu, cfg, cfg.edge_sm_budget),
    }


class ClusterView:
    """What a router may look at: the sites, the backhaul, the clock, and a scratch pad of
    tentative reservations so a router can plan a whole window before anything runs."""

    def __init__(self, sites: dict[str, Site], link: Link, cfg: EdgeConfig, now: float) -> None:
        self.sites = sites
        self.link = link
        self.cfg = cfg
        self.now = now
        self.lane_free = {k: s.lane.free_at for k, s in sites.items()}
        self.link_free = link.free_at
        self.extra_decodes = dict.fromkeys(sites, 0)
        self.extra_busy = dict.fromkeys(sites, 0.0)

    def reserve_prefill(self, site: str, ready: float, duration: float) -> float:
        """Book ``duration`` on a site's prefill lane from ``ready``; returns the end time."""
        end = max(ready, self.lane_free[site]) + duration
        self.lane_free[site] = end
        self.extra_busy[site] += duration
        return end

    def reserve_transfer(self, ready: float, nbytes: float) -> float:
        end = max(ready, self.link_free) + self.link.duration(nbytes)
        self.link_free = end
        return end

    def extra_duty(self, site: str) -> float:
        return min(1.0, self.extra_busy[site] / self.cfg.duty_horizon_s)
