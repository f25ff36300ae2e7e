"""The serving engine: iteration-level continuous batching over a two-tier prefix cache.

Model (Orca/vLLM/SGLang style, one replica):

* Every iteration runs the prefills admitted in it (up to ``token_budget`` new prompt tokens;
  the first prefill of an iteration may exceed it) and one decode step of every running request,
  as one mixed batch whose time comes from ``schedlab.llm.CostModel.iteration_ms``.
* GPU KV memory is a pool of blocks. Admission reserves the request's uncached prompt blocks and
  its whole output (no preemption); cached prefix blocks are shared and pinned while in use.
  Unpinned cached blocks are evicted LRU when the pool is short and offered to the host tier.
* A prompt's cached prefix is matched in the radix tree: GPU-resident blocks are free, host-only
  blocks are copied over PCIe (their time is added to the iteration), the rest is prefilled.

The engine takes any ``Scheduler`` and ``CacheManager`` and never asks which one it has.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from schedlab.core.errors import ConfigError
from schedlab.llm.accounting import CostWeights, kv_memory_share
from schedlab.llm.costmodel import CostModel
from schedlab.llm.ledger import TenantLedger
from schedlab.llm.plugins import AdmitUsage, CacheManager, Scheduler
from schedlab.llm.radix import Node, PrefixCache
from schedlab.llm.requests import CONTEXT_POLICIES, Request, Trace, fit_context


@dataclass(frozen=True)
class EngineConfig:
    """Hardware and batching parameters; defaults are a Llama-3-8B replica on one A100-80G."""

    model: str = "llama-3-8b"
    gpu: str = "a100-80g"
    tp: int | None = None
    token_budget: int = 2048
    max_batch: int = 256
    kv_tokens: int | None = None  # GPU KV pool in tokens; None = what memory allows
    host_gb: float = 0.0
    prefix_cache: bool = True
    sample_every: float = 1.0  # seconds of simulated time between time-series samples
    # share of a GPU-second's value charged to its KV pool; None: derived from the hardware,
    # the KV pool's share of the GPUs' memory (kv_memory_share; 0.109 for Llama-3-8B with a
    # 40k-token pool on an A10G). 0.5 was our chosen default before issue 47
    hbm_share: float | None = None
    host_ratio: float = 0.1
    horizon: float = math.inf  # stop admitting new arrivals after this time
    context: str = "refuse"  # prompts + outputs beyond the model's context: refuse|truncate
    tenant_weights: tuple[float, ...] | None = None  # VTC-style shares by tenant index

    def __post_init__(self) -> None:
        if self.hbm_share is not None and not (
            math.isfinite(self.hbm_share) and self.hbm_share >= 0
        ):
            raise ConfigError(
                f"must be a finite number >= 0, got {self.hbm_share}", field="hbm_share"
            )
        if self.token_budget < 1 or self.max_batch < 1:
            raise ConfigError("token_budget and max_batch must be >= 1", field="token_budget")
        if not (math.isfinite(self.host_gb) and self.host_gb >= 0):
            raise ConfigError(f"must be a finite number >= 0, got {self.host_gb}", field="host_gb")
        if self.kv_tokens is not None and self.kv_tokens < 1:
            raise ConfigError("must be >= 1", field="kv_tokens")
        if self.context not in CONTEXT_POLICIES:
            raise ConfigError(
                f"unknown policy '{self.context}' ({', '.join(CONTEXT_POLICIES)})", field="context"
            )
        if self.tenant_weights is not None:
            for i, w in enumerate(self.tenant_weights):
                if (
                    isinstance(w, bool)
                    or not isinstance(w, int | float)
                    or not (math.isfinite(w) and w > 0)
                ):
                    raise ConfigError(
                        f"weight of tenant {i} must be a finite number > 0, got {w!r}",
                        field="tenant_weights",
                    )


@dataclass
class _Running:
    req: Request
    path: list[Node]
    private: int
    first_token: float = -1.0


@dataclass
class SimResult:
    """Per-tenant totals, per-request records and a time series of service and backlog."""

    tenants: pl.DataFrame
    requests: pl.DataFrame
    samples: pl.DataFrame
    summary: dict[str, Any]
    config: EngineConfig


class Engine:
    """One serving replica; ``run`` replays a trace through a scheduler and a cache manager."""

    def __init__(
        self,
        trace: Trace,
        scheduler: Scheduler,
        manager: CacheManager,
        config: EngineConfig | None = None,
    ) -> None:
        self.trace, self.scheduler, self.manager = trace, scheduler, manager
        self.config = config = config or EngineConfig()
        self.cost = CostModel.from_specs(config.model, config.gpu, config.tp)
        self.truncated = 0
        if self.cost.model.max_context:
            self.truncated = fit_context(
                trace, self.cost.model.max_context, self.cost.model.name, config.context
            )
        kv_tokens = config.kv_tokens or self.cost.kv_capacity_tokens()
        bt = trace.block_tokens
        self.block_bytes = bt * self.cost.kv_bytes_per_token
        self.gpu_blocks = kv_tokens // bt
        self.n_tenants = trace.n_tenants
        shares = config.tenant_weights
        if shares is not None and len(shares) != self.n_tenants:
            raise ConfigError(
                f"has {len(shares)} weights for {self.n_tenants} tenants", field="tenant_weights"
            )
        self.tenant_weights = (
            np.ones(self.n_tenants) if shares is None else np.asarray(shares, dtype=float)
        )
        hbm_share = config.hbm_share
        if hbm_share is None:
            hbm_share = kv_memory_share(self.cost, kv_tokens)
        self.hbm_share = hbm_share
        self.weights = CostWeights.from_cost_model(
            self.cost, kv_tokens, hbm_share, config.host_ratio
        )
        self.cache = PrefixCache(self.gpu_blocks, bt, self.block_bytes)
        host_blocks = int(config.host_gb * 1e9 // self.block_bytes)
        manager.bind(host_blocks, self.n_tenants, bt, self.cost.prefill_c / self.cost.prefill_b)
        self.host_blocks = host_blocks
        scheduler.bind(self)
        self.ledger = TenantLedger(self.n_tenants, self.weights)
        n = self.n_tenants
        self.running_count = np.zeros(n)
        self.ctx = np.zeros(n)
        self.host_owned = np.zeros(n)
        self.offload_now = np.zeros(n)
        self.private_used = 0
        self.host_used = 0
        self.now = 0.0

    # --- the EngineView a scheduler sees ------------------------------------------------------
    def cached_tokens(self, req: Request) -> int:
        if not self.config.prefix_cache:
            return 0
        path = self.cache.match(self.manager.namespace(req.tenant), req.blocks)
        return min(req.input_len, len(path) * self.trace.block_tokens)

    # --- GPU / host memory --------------------------------------------------------------------
    def free_blocks(self) -> int:
        return self.gpu_blocks - self.cache.gpu_used - self.private_used

    def _make_room(self, need: int) -> bool:
        if self.free_blocks() + self.cache.evictable_gpu() < need:
            return False
        while self.free_blocks() < need:
            node = self.cache.pop_gpu_lru()
            assert node is not None
            self._demote(node)
        return True

    def _demote(self, node: Node) -> None:
        """A block left the GPU: keep its host copy, offer it to the host tier, or drop it."""
        if node.host:
            return
        victims = self.manager.admit(node, self.now)
        if victims is None:
            self._drop(node)
            return
        node.host, node.howner = True, node.last_user
        self.host_used += 1
        self.host_owned[node.howner] += 1
        self.offload_now[node.howner] += self.block_bytes
        for victim in victims:
            victim.host = False
            self.host_used -= 1
            self.host_owned[victim.howner] -= 1
        for victim in victims:
            if victim.alive and not victim.gpu:
                self._drop(victim)

    def _drop(self, node: Node) -> None:
        for gone in self.cache.remove_subtree(node):
            if gone.host:
                gone.host = False
                self.host_used -= 1
                self.host_owned[gone.howner] -= 1
                self.manager.on_remove(gone)
            self.ledger.prefix.forget(gone)
            self.scheduler.forget(gone)

    # --- admission ----------------------------------------------------------------------------
    def _admit(self, req: Request) -> _Running | None:
        """Match, reserve and pin; None when the request does not fit even after evictions."""
        bt, t = self.trace.block_tokens, req.tenant
        cache_on = self.config.prefix_cache
        ns = self.manager.namespace(t)
        path = self.cache.match(ns, req.blocks) if cache_on else []
        for node in path:
            self.cache.pin(node)
        host_only = [node for node in path if not node.gpu]
        out_blocks = math.ceil((req.input_len + req.output_len) / bt) - len(req.blocks)
        new = len(req.blocks) - len(path)
        private = out_blocks + (0 if cache_on else new)
        if not self._make_room(len(host_only) + new + out_blocks):
            self.cache.unpin(path, self.now)
            return None
        for node in host_only:
            self.cache.load_to_gpu(node)
        created = self.cache.extend(ns, path, req.blocks, t, self.now) if cache_on else []
        for i, node in enumerate(created, start=len(path)):
            node.cost = min(bt, req.input_len - i * bt)
        self.private_used += private
        full = path + created
        for node in full:
            node.last_user = t
        if cache_on:
            self.manager.on_access(full, t, self.now)
        self._account_admit(req, path, created, host_only)
        return _Running(req, full, private)

    def _account_admit(
        self, req: Request, path: list[Node], created: list[Node], host_only: list[Node]
    ) -> None:
        t, lg = req.tenant, self.ledger
        hit = min(req.input_len, len(path) * self.trace.block_tokens)
        host_hit = min(len(host_only) * self.trace.block_tokens, hit)
        executed = req.input_len - hit
        load = len(host_only) * self.block_bytes
        usage = AdmitUsage(t, executed, created, path, load)
        self.scheduler.on_admit(req, usage)
        lg.attributed += lg.prefix.charge(t, created, path)
        lg.attributed[t] += executed - sum(n.cost for n in created)  # cache off: no blocks
        lg.executed[t] += executed
        lg.gpu_hit_tokens[t] += hit - host_hit
        lg.host_hit_tokens[t] += host_hit
        lg.miss_tokens[t] += executed
        lg.input_tokens[t] += req.input_len
        lg.load_bytes[t] += load
        lg.admitted[t] += 1
        self._batch_tokens += max(executed, 1)
        self._batch_squares += req.input_len**2 - hit**2
        self._batch_load += load
        self._batch_new_ctx += req.input_len
        self.running_count[t] += 1
        self.ctx[t] += req.input_len

    # --- the loop -----------------------------------------------------------------------------
    def _fill_batch(self, running: dict[int, _Running], finishing: list, it: int) -> list:
        """Admit while the scheduler has work, memory fits and the token budget lasts."""
        self._batch_tokens = self._batch_squares = self._batch_load = self._batch_new_ctx = 0
        admitted = []
        while len(running) < self.config.max_batch:
            req = self.scheduler.pick(self.now)
            if req is None:
                break
            if (
                admitted
                and self._batch_tokens + req.input_len - self.cached_tokens(req)
                > self.config.token_budget
            ):
                self.scheduler.unpick(req)
                break
            state = self._admit(req)
            if state is None:
                self.scheduler.unpick(req)
                if not running:
                    raise ConfigError(
                        f"request {req.rid} needs more KV than the GPU pool "
                        f"({self.gpu_blocks} blocks) holds",
                        field="kv_tokens",
                    )
                break
            running[req.rid] = state
            heapq.heappush(finishing, (it + req.output_len, req.rid))
            admitted.append(state)
        return admitted

    def _finish(self, state: _Running) -> None:
        req, t = state.req, state.req.tenant
        self.cache.unpin(state.path, self.now)
        self.private_used -= state.private
        self.running_count[t] -= 1
        self.ctx[t] -= req.input_len + req.output_len
        self.ledger.finished[t] += 1
        self.scheduler.on_finish(req, self.now)
        self._records.append(
            (req.rid, t, req.arrival, state.first_token, self.now, req.input_len, req.output_len)
        )

    def _step(self, admitted: list[_Running], running: dict[int, _Running]) -> float:
        """Run one iteration: time it, charge everyone, advance every running request."""
        new_ctx = self._batch_new_ctx
        decode_batch = len(running) - len(admitted)
        ctx_total = float(self.ctx.sum())
        dt = (
            self.cost.iteration_ms(
                self._batch_tokens, self._batch_squares, ctx_total - new_ctx, decode_batch
            )
            + self.cost.transfer_ms(self._batch_load)
        ) / 1000.0
        self.now += dt
        for state in admitted:
            state.first_token = self.now
        lg = self.ledger
        out = self.running_count.copy()
        kv = self.ctx * (self.cost.kv_bytes_per_token * dt)
        host = self.host_owned * (self.block_bytes * dt)
        io = self.offload_now
        self.scheduler.on_iteration(out, kv, host, io)
        lg.decode += out
        lg.kv_byte_s += kv
        lg.host_byte_s += host
        lg.offload_bytes += io
        self.offload_now = np.zeros(self.n_tenants)
        self.ctx += out
        return dt

    def _sample(self) -> None:
        lg = self.ledger
        self._samples.append(
            (
                self.now,
                lg.compute_service(),
                lg.unified_service(),
                self.scheduler.queued() > 0,
                self.host_used,
            )
        )

    def run(self) -> SimResult:
        """Replay the whole trace (arrivals after ``config.horizon`` are ignored)."""
        requests = [r for r in self.trace.requests if r.arrival <= self.config.horizon]
        running: dict[int, _Running] = {}
        finishing: list[tuple[int, int]] = []
        self._records: list[tuple] = []
        self._samples: list[tuple] = []
        nxt, it, next_sample, iterations = 0, 0, 0.0, 0
        while nxt < len(requests) or running or self.scheduler.queued().any():
            while nxt < len(requests) and requests[nxt].arrival <= self.now:
                self.scheduler.on_arrival(requests[nxt], self.now)
                nxt += 1
            admitted = self._fill_batch(running, finishing, it)
            if not running:
                if nxt >= len(requests):
                    break
                self.now = max(self.now, requests[nxt].arrival)
                continue
            self._step(admitted, running)
            it += 1
            iterations += 1
            while finishing and finishing[0][0] <= it:
                _, rid = heapq.heappop(finishing)
                self._finish(running.pop(rid))
            if self.now >= next_sample:
                self._sample()
                next_sample = self.now + self.config.sample_every
        self._sample()
        return self._result(iterations)

    def _result(self, iterations: int) -> SimResult:
        names = self.trace.tenant_names
        tenants = pl.DataFrame(self.ledger.as_rows(names))
        cols = ("rid", "tenant", "arrival", "first_token", "finish", "input_len", "output_len")
        reqs = pl.DataFrame(self._records, schema=list(cols), orient="row")
        reqs = reqs.with_columns(
            ttft=pl.col("first_token") - pl.col("arrival"),
            tpot=(pl.col("finish") - pl.col("first_token"))
            / pl.max_horizontal(pl.col("output_len") - 1, pl.lit(1)),
        )
        samples = _samples_frame(self._samples, names)
        done = reqs.height
        span = max(self.now, 1e-9)
        summary = dict(
            requests=done,
            iterations=iterations,
            sim_seconds=self.now,
            throughput_rps=done / span,
            tokens_per_s=float(reqs["output_len"].sum() or 0) / span,
            ttft_p50=_q(reqs, "ttft", 0.5),
            ttft_p99=_q(reqs, "ttft", 0.99),
            tpot_p50=_q(reqs, "tpot", 0.5),
            tpot_p99=_q(reqs, "tpot", 0.99),
            gpu_blocks=self.gpu_blocks,
            hbm_share=self.hbm_share,
            host_blocks=self.host_blocks,
            host_used=self.host_used,
            host_util=self.host_used / max(self.host_blocks, 1),
            weights=asdict(self.weights),
            truncated=self.truncated,
            tenant_weights=[float(w) for w in self.tenant_weights],
        )
        return SimResult(tenants, reqs, samples, summary, self.config)


def _q(frame: pl.DataFrame, column: str, q: float) -> float:
    if frame.height == 0:
        return float("nan")
    return float(frame[column].quantile(q, interpolation="linear"))


def _samples_frame(samples: list[tuple], names: list[str]) -> pl.DataFrame:
    rows = []
    for now, compute, unified, backlogged, host_used in samples:
        for t, name in enumerate(names):
            rows.append(
                (now, name, float(compute[t]), float(unified[t]), bool(backlogged[t]), host_used)
            )
    return pl.DataFrame(
        rows,
        schema=["time", "tenant", "compute_service", "unified_service", "backlogged", "host_used"],
        orient="row",
    )


def simulate(
    trace: Trace,
    scheduler: Scheduler | str = "faircache",
    manager: CacheManager | str = "lru",
    config: EngineConfig | None = None,
) -> SimResult:
    """Replay ``trace``; policies may be given by CLI name or as objects."""
    from schedlab.faircache.managers import make_plugins

    scheduler, manager = make_plugins(scheduler, manager)
    return Engine(trace, scheduler, manager, config).run()
