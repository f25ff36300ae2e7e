"""A real continuous-batching serving loop: a transformers Llama over paged KV blocks.

What is real: the model (``model.PagedLlama``: Hugging Face ``LlamaForCausalLM`` weights,
random-initialised), the K/V tensors in a paged block pool with a block table per request,
block-hash prefix caching shared across tenants (chained hashes of token blocks, a tree over
them for longest-prefix matching, LRU eviction of unpinned blocks), a host tier that offloads
evicted blocks and reloads them on a hit (tensor copies into a separately allocated store), and
every time figure, which is *measured* CPU time (``time.process_time``) of this process.

The scheduler and the host-tier cache manager are plug-ins through the same protocols the
simulator uses (``schedlab.llm.plugins.Scheduler`` and ``CacheManager``; FairCache, VTC, FCFS and
the cache managers are implemented in ``schedlab.faircache``, which this engine never imports;
``schedlab.faircache.real_engine.serve`` resolves them by CLI name): the loop
calls ``on_arrival``/``pick``/``unpick``/``on_admit``/``on_iteration``/``on_finish`` and
``admit``/``on_access``/``on_remove`` and never asks which policy it has. The prefix ledger is
fed ``(block_hash, computing tenant, cost)`` triples.

Per-tenant time is measured, not modelled: each step runs one forward per tenant present in the
batch (the tenant's prefills and decodes packed together), and the CPU time of that call is the
tenant's. The engine clock (``step_time=None``) is the sum of measured busy time (plus idle
gaps to the next arrival), so a trace's arrival times are read in engine CPU-seconds, which
keeps runs comparable on a loaded machine; with ``step_time`` (fitted by ``fit_step_time``)
the clock is that fitted model instead, which makes every scheduling decision reproducible
(the per-tenant CPU time is still measured).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator

from schedlab.core.errors import BadInputError, ConfigError
from schedlab.llm.accounting import CostWeights
from schedlab.llm.engine.kv import BlockPool, HostStore
from schedlab.llm.engine.model import PagedLlama, SeqInput, TinyLlama
from schedlab.llm.ledger import TenantLedger
from schedlab.llm.plugins import AdmitUsage, CacheManager, Scheduler
from schedlab.llm.radix import Node, PrefixCache
from schedlab.llm.requests import Request, Trace


class EngineOptions(BaseModel):
    """Memory, batching and pricing of one real engine replica."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_tokens: int = Field(16, ge=1)
    gpu_blocks: int = Field(256, ge=1)  # the device KV pool, in blocks
    host_blocks: int = Field(0, ge=0)  # the host tier, in blocks
    prefix_cache: bool = True
    # new prompt tokens per step (the first prefill of a step is exempt); with
    # ``chunked_prefill`` every token a step computes (1 per decode + prefill chunks)
    token_budget: int = Field(512, ge=1)
    max_batch: int = Field(32, ge=1)
    # vLLM-style chunked prefill: running requests first (decodes, then unfinished prefills),
    # then new ones, each prefill cut to what is left of ``token_budget``
    chunked_prefill: bool = False
    # vLLM-style preemption by recompute: KV blocks are allocated as positions are written
    # (prompt at admission, one block at a time while decoding) instead of reserving the whole
    # output at admission; when none is left the most recently admitted running request is
    # preempted (its blocks freed, it goes back to the head of its tenant's queue and later
    # recomputes prompt + already-generated tokens)
    preemption: bool = False
    sample_every: float = Field(0.05, gt=0)  # engine seconds between time-series samples
    hbm_share: float = Field(0.5, ge=0)
    host_ratio: float = Field(0.1, ge=0)
    horizon: float = math.inf  # arrivals after this engine time are ignored
    stop_at: float = math.inf  # end the run at this engine time (unfinished work is left)
    threads: int | None = Field(1, ge=1)  # torch intra-op threads (None: leave as is)
    tenant_weights: tuple[float, ...] | None = None
    # engine clock: None = measured busy time; (c0, c_token, c_seq) = a fitted model of this
    # machine's forward time (``fit_step_time``), so scheduling decisions are reproducible
    # while per-tenant CPU time is still measured
    step_time: tuple[float, float, float] | None = None

    @field_validator("tenant_weights")
    @classmethod
    def _weights(cls, v):
        if v is not None and not all(math.isfinite(w) and w > 0 for w in v):
            raise ValueError("every weight must be a finite number > 0")
        return v


@dataclass
class _Seq:
    req: Request
    tokens: list[int]
    path: list[Node]  # pinned cached blocks (matched + created)
    private: list[int]  # physical blocks owned by this request alone
    table: list[int]
    pos: int  # tokens whose K/V are in the pool
    generated: int = 0
    first_token: float = -1.0
    chunk: int = 0  # tokens this step computes (set by _plan)
    # cache blocks this request created whose K/V it has not written yet: (node, end position)
    unready: list = field(default_factory=list)


@dataclass
class EngineResult:
    """Per-tenant totals (measured CPU time included), per-request records, time series."""

    tenants: pl.DataFrame
    requests: pl.DataFrame
    samples: pl.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)
    outputs: dict[int, list[int]] = field(default_factory=dict)  # generated tokens per rid


def request_tokens(req: Request, block_tokens: int, vocab: int) -> list[int]:
    """Deterministic token ids for a trace request: equal block ids give equal tokens."""
    out: list[int] = []
    for b in req.blocks:
        rng = np.random.default_rng([int(b) & 0x7FFFFFFFFFFFFFFF, 7])
        out.extend(rng.integers(0, vocab, block_tokens).tolist())
        if len(out) >= req.input_len:
            break
    if len(out) < req.input_len:
        rng = np.random.default_rng([req.rid, 11])
        out.extend(rng.integers(0, vocab, req.input_len - len(out)).tolist())
    return out[: req.input_len]


def block_hashes(tokens: list[int], block_tokens: int, namespace: int, n: int) -> tuple:
    """Chained hashes of the first ``n`` full blocks (vLLM-style: parent hash + block tokens)."""
    out, parent = [], hash(("ns", namespace))
    for i in range(n):
        parent = hash((parent, tuple(tokens[i * block_tokens : (i + 1) * block_tokens])))
        out.append(parent)
    return tuple(out)


class RealEngine:
    """One replica: ``run`` serves a trace with any Scheduler and CacheManager plug-ins."""

    def __init__(
        self,
        trace: Trace,
        scheduler: Scheduler,
        manager: CacheManager,
        options: EngineOptions | None = None,
        model: TinyLlama | None = None,
        weights: CostWeights | None = None,
    ) -> None:
        for field_name, plugin in (("scheduler", scheduler), ("manager", manager)):
            if isinstance(plugin, str):
                raise ConfigError(f"takes a plug-in object, not the name {plugin!r} (names: "
                                  "schedlab.faircache.real_engine.serve)", field=field_name)
        self.opt = opt = options or EngineOptions()
        self.spec = spec = model or TinyLlama()
        if opt.threads is not None:
            torch.set_num_threads(opt.threads)
        self.trace, self.scheduler, self.manager = trace, scheduler, manager
        self.n_tenants = n = trace.n_tenants
        if opt.tenant_weights is not None and len(opt.tenant_weights) != n:
            raise ConfigError(
                f"has {len(opt.tenant_weights)} weights for {n} tenants", field="tenant_weights"
            )
        self.tenant_weights = np.asarray(opt.tenant_weights or (1.0,) * n, dtype=float)
        for req in trace.requests:
            if req.input_len < 1 or req.output_len < 1:
                raise BadInputError(
                    f"request {req.rid} needs input and output >= 1 token", field="input_length"
                )
            if req.input_len + req.output_len > spec.max_context:
                raise BadInputError(
                    f"request {req.rid}: input_length {req.input_len} + output_length "
                    f"{req.output_len} exceeds the model's {spec.max_context}-token context",
                    field="input_length",
                )
        bt = opt.block_tokens
        if opt.preemption:
            for req in trace.requests:
                need = math.ceil((req.input_len + req.output_len) / bt)
                if need > opt.gpu_blocks:
                    raise ConfigError(
                        f"request {req.rid} needs {need} KV blocks at its end, more than the "
                        f"pool ({opt.gpu_blocks}) holds",
                        field="gpu_blocks",
                    )
        self.model = PagedLlama(spec)
        self.pool = BlockPool(spec.layers, opt.gpu_blocks, bt, spec.kv_heads, spec.head_dim)
        self.host = HostStore(spec.layers, opt.host_blocks, bt, spec.kv_heads, spec.head_dim)
        self.block_bytes = self.pool.block_bytes
        self.kv_bytes_per_token = self.block_bytes / bt
        self.cache = PrefixCache(opt.gpu_blocks, bt, self.block_bytes)
        self.gpu_of: dict[int, int] = {}  # node uid -> physical device block
        self.host_of: dict[int, int] = {}  # node uid -> host store block
        self.weights = weights or self._measured_weights()
        self.sched_s = 0.0
        t0 = time.process_time()
        manager.bind(opt.host_blocks, n, bt, 0.0)
        scheduler.bind(self)
        self.sched_s += time.process_time() - t0
        self.ledger = TenantLedger(n, self.weights)
        self.cpu_s = np.zeros(n)  # measured forward + copy time per tenant
        self.host_owned = np.zeros(n)
        self.offload_now = np.zeros(n)
        self.host_used = 0
        self.now = 0.0
        self._tokens: dict[int, list[int]] = {}
        self.outputs: dict[int, list[int]] = {}  # generated token ids per request
        self._hashes: dict[int, tuple] = {}
        self._preempted: dict[int, _Seq] = {}  # rid -> its state when preempted (recompute)
        # cache node uid -> the running request that created it and has not yet written its
        # K/V (a chunked prefill short of it, or a prefill of this very step)
        self._unready: dict[int, _Seq] = {}
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.recomputed = np.zeros(n)  # already-generated tokens prefilled again

    # --- prices from measured hardware --------------------------------------------------------
    def _measured_weights(self) -> CostWeights:
        """One CPU-second is worth the prompt tokens it prefills (measured); KV memory and
        host copies are priced from it as in the simulator (``CostWeights.from_cost_model``)."""
        bt, spec, opt = self.opt.block_tokens, self.spec, self.opt
        n_tok = min(128, spec.max_context)
        blocks = math.ceil(n_tok / bt)
        scratch = BlockPool(spec.layers, blocks, bt, spec.kv_heads, spec.head_dim)
        seq = SeqInput(list(range(n_tok)), 0, list(range(blocks)))
        self.model.forward(scratch.k, scratch.v, bt, [seq])  # warm-up
        t0 = time.process_time()
        for _ in range(3):
            self.model.forward(scratch.k, scratch.v, bt, [seq])
        tokens_per_s = 3 * n_tok / max(time.process_time() - t0, 1e-9)
        store = HostStore(spec.layers, blocks, bt, spec.kv_heads, spec.head_dim)
        t0 = time.process_time()
        for b in range(blocks):
            store.offload(scratch, b)
        copy_bps = blocks * self.block_bytes / max(time.process_time() - t0, 1e-9)
        kv_bytes = opt.gpu_blocks * self.block_bytes
        p_kv = opt.hbm_share * tokens_per_s / kv_bytes
        self.measured = dict(prefill_tokens_per_s=tokens_per_s, copy_bytes_per_s=copy_bps)
        return CostWeights(p_kv=p_kv, p_host=opt.host_ratio * p_kv, p_io=tokens_per_s / copy_bps)

    # --- the EngineView a scheduler sees ------------------------------------------------------
    def _prep(self, req: Request) -> None:
        bt = self.opt.block_tokens
        tokens = request_tokens(req, self.trace.block_tokens, self.spec.vocab)
        self._tokens[req.rid] = tokens
        ns = self.manager.namespace(req.tenant)
        self._hashes[req.rid] = block_hashes(tokens, bt, ns, (req.input_len - 1) // bt)

    def pending_tokens(self, req: Request) -> int:
        """Tokens an admission of ``req`` must hold: its prompt, or after a preemption its
        prompt plus the tokens it had generated (all recomputed)."""
        prev = self._preempted.get(req.rid)
        return len(prev.tokens) if prev is not None else req.input_len

    def cached_tokens(self, req: Request) -> int:
        if not self.opt.prefix_cache:
            return 0
        if req.rid not in self._hashes:
            self._prep(req)
        ns = self.manager.namespace(req.tenant)
        return len(self.cache.match(ns, self._hashes[req.rid])) * self.opt.block_tokens

    # --- device / host memory -----------------------------------------------------------------
    def _timed(self, fn, *args):
        t0 = time.process_time()
        out = fn(*args)
        self.sched_s += time.process_time() - t0
        return out

    def _make_room(self, need) -> bool:
        """Evict until ``need()`` blocks are free (it may shrink as matched host blocks are
        copied back while their host slots are reclaimed)."""
        if self.pool.n_free() + self.cache.evictable_gpu() < need():
            return False
        while self.pool.n_free() < need():
            node = self.cache.pop_gpu_lru()
            if node is None:
                return False
            self._demote(node)
        return True

    def _demote(self, node: Node) -> None:
        """A cached block leaves the device: offload it if the manager keeps it, else drop."""
        if node.host:
            self.pool.give(self.gpu_of.pop(node.uid))
            return
        victims = self._timed(self.manager.admit, node, self.now)
        if victims is None:
            self.cache.gpu_used += 1  # _drop frees the device block it still holds
            node.gpu = True
            self._drop(node)
            return
        t0 = time.process_time()
        for victim in victims:
            if victim.pins > 0 and victim.uid not in self.gpu_of and self.pool.n_free():
                # a block the admission in progress has matched: copy it back before its
                # host slot goes (it then lives on the device, pinned)
                blk = self.pool.take()
                self.host.reload(self.pool, self.host_of[victim.uid], blk)
                self.gpu_of[victim.uid] = blk
                self.cache.load_to_gpu(victim)
            victim.host = False
            self.host.give(self.host_of.pop(victim.uid))
            self.host_used -= 1
            self.host_owned[victim.howner] -= 1
        self.host_of[node.uid] = self.host.offload(self.pool, self.gpu_of[node.uid])
        dt = time.process_time() - t0
        self.pool.give(self.gpu_of.pop(node.uid))
        node.host, node.howner = True, node.last_user
        self.cpu_s[node.howner] += dt
        self._step_extra += dt
        self.host_used += 1
        self.host_owned[node.howner] += 1
        self.offload_now[node.howner] += self.block_bytes
        for victim in victims:
            if victim.alive and victim.uid not in self.gpu_of:
                self._drop(victim)

    def _drop(self, node: Node) -> None:
        for gone in self.cache.remove_subtree(node):
            if gone.uid in self.gpu_of:
                self.pool.give(self.gpu_of.pop(gone.uid))
            if gone.uid in self.host_of:
                gone.host = False
                self.host.give(self.host_of.pop(gone.uid))
                self.host_used -= 1
                self.host_owned[gone.howner] -= 1
                self._timed(self.manager.on_remove, gone)
            self.ledger.prefix.forget(gone.key)
            self._timed(self.scheduler.forget, gone.key)

    # --- admission ----------------------------------------------------------------------------
    def _admit(self, req: Request) -> _Seq | None:
        bt, t, opt = self.opt.block_tokens, req.tenant, self.opt
        if req.rid not in self._hashes:
            self._prep(req)
        prev = self._preempted.get(req.rid)
        tokens = prev.tokens if prev is not None else self._tokens[req.rid]
        hashes = self._hashes[req.rid]
        ns = self.manager.namespace(t)
        path = self.cache.match(ns, hashes) if opt.prefix_cache else []
        if not self._usable(path, t):
            return None
        for node in path:
            self.cache.pin(node)
        if opt.preemption:  # blocks for what the prefill writes; decode blocks come later
            total = math.ceil(len(tokens) / bt)
        else:  # the whole output reserved now
            total = math.ceil((req.input_len + req.output_len) / bt)
        shared = len(hashes) if opt.prefix_cache else 0
        new_shared = shared - len(path)
        private = total - shared

        def need() -> int:
            return sum(n.uid not in self.gpu_of for n in path) + new_shared + private

        if not self._make_room(need):
            self.cache.unpin(path, self.now)
            return None
        if any(
            not n.alive or (n.uid not in self.gpu_of and n.uid not in self.host_of) for n in path
        ):  # the host tier dropped a matched block while making room
            self.cache.unpin(path, self.now)
            return None
        host_only = [node for node in path if node.uid not in self.gpu_of]
        t0 = time.process_time()
        for node in host_only:
            blk = self.pool.take()
            self.host.reload(self.pool, self.host_of[node.uid], blk)
            self.gpu_of[node.uid] = blk
            self.cache.load_to_gpu(node)
        load_dt = time.process_time() - t0
        self.cpu_s[t] += load_dt
        self._step_extra += load_dt
        created = self.cache.extend(ns, path, hashes, t, self.now) if opt.prefix_cache else []
        for node in created:
            node.cost = bt
            self.gpu_of[node.uid] = self.pool.take()
        own = [self.pool.take() for _ in range(private)]
        full = path + created
        unready = [(node, (len(path) + i + 1) * bt) for i, node in enumerate(created)]
        for node in full:
            node.last_user = t
        if opt.prefix_cache:
            self._timed(self.manager.on_access, full, t, self.now)
        table = [self.gpu_of[node.uid] for node in full] + own
        hit = len(path) * bt
        executed = len(tokens) - hit  # a recompute prefills its generated tokens too
        load = len(host_only) * self.block_bytes
        usage = AdmitUsage(
            t,
            executed,
            [(n.key, n.cost) for n in created],
            [(n.key, n.computer, n.cost) for n in path],
            load,
            generated=prev.generated if prev is not None else 0,
        )
        self._timed(self.scheduler.on_admit, req, usage)
        lg = self.ledger
        lg.attributed += lg.prefix.charge(t, usage.computed, usage.reused)
        lg.attributed[t] += executed - bt * len(created)
        lg.executed[t] += executed
        lg.gpu_hit_tokens[t] += hit - len(host_only) * bt
        lg.host_hit_tokens[t] += len(host_only) * bt
        lg.miss_tokens[t] += executed
        lg.load_bytes[t] += load
        if prev is None:
            lg.input_tokens[t] += req.input_len
            lg.admitted[t] += 1
            seq = _Seq(req, list(tokens), full, own, table, hit)
        else:
            del self._preempted[req.rid]
            self.recomputed[t] += prev.generated
            seq = _Seq(req, tokens, full, own, table, hit, prev.generated, prev.first_token)
        seq.unready = unready
        for node, _ in unready:
            self._unready[node.uid] = seq
        return seq

    def _usable(self, path: list[Node], tenant: int) -> bool:
        """Whether every matched block's K/V is written before this request reads it: a block
        whose creator has not written it yet is usable only in the creator's own step, by a
        forward that runs no earlier than the creator's (the creator's tenant, or a tenant whose
        group comes later in the step) -- never under chunked prefill, where the creator may
        write it steps later. Otherwise the request waits (vLLM and SGLang cache a block only
        once it is computed)."""
        creators = [self._unready[n.uid] for n in path if n.uid in self._unready]
        if not creators:
            return True
        if self.opt.chunked_prefill:
            return False
        order = {}
        for seq in self._running.values():
            order.setdefault(seq.req.tenant, len(order))
        mine = order.get(tenant, len(order))
        return all(order[c.req.tenant] <= mine for c in creators)

    def _written(self, seqs) -> None:
        """Mark the cache blocks whose K/V the step just wrote as ready for other requests."""
        for seq in seqs:
            while seq.unready and seq.unready[0][1] <= seq.pos:
                self._unready.pop(seq.unready.pop(0)[0].uid, None)

    def _plan(self, running: dict[int, _Seq]) -> int:
        """Chunked prefill: give every running request its tokens for this step in admission
        order (a decode 1, an unfinished prefill what is left of the budget); return the rest."""
        left = self.opt.token_budget
        for seq in running.values():
            remaining = len(seq.tokens) - seq.pos
            seq.chunk = max(0, min(remaining, left)) if remaining > 1 else 1
            left -= seq.chunk
        return left

    def _fill(self, running: dict[int, _Seq]) -> list[_Seq]:
        chunked = self.opt.chunked_prefill
        admitted, budget = [], 0
        left = self._plan(running) if chunked else 0
        while len(running) < self.opt.max_batch:
            if chunked and left <= 0:
                break
            req = self._timed(self.scheduler.pick, self.now)
            if req is None:
                break
            new = self.pending_tokens(req) - self.cached_tokens(req)
            if not chunked and admitted and budget + new > self.opt.token_budget:
                self._timed(self.scheduler.unpick, req)
                break
            seq = self._admit(req)
            if seq is None:
                self._timed(self.scheduler.unpick, req)
                if not running:
                    raise ConfigError(
                        f"request {req.rid} needs more KV blocks than the pool "
                        f"({self.opt.gpu_blocks}) holds",
                        field="gpu_blocks",
                    )
                break
            budget += new
            if chunked:
                seq.chunk = min(len(seq.tokens) - seq.pos, left)
                left -= seq.chunk
            running[req.rid] = seq
            admitted.append(seq)
        return admitted

    def _grow(self, running: dict[int, _Seq]) -> None:
        """Preemption mode: give every decoding request the block its next position needs,
        preempting (by recompute) the most recently admitted running request when the pool
        is out of blocks -- vLLM's rule; a request that must preempt itself waits."""
        bt = self.opt.block_tokens
        for rid in list(running):
            seq = running.get(rid)
            if seq is None:  # preempted by an earlier request of this loop
                continue
            while len(seq.table) * bt < len(seq.tokens):
                if self._make_room(lambda: 1):
                    blk = self.pool.take()
                    seq.private.append(blk)
                    seq.table.append(blk)
                    continue
                victim = running.pop(next(reversed(running)))
                self._preempt(victim)
                if victim is seq:
                    break

    def _preempt(self, seq: _Seq) -> None:
        """Free a running request's blocks and queue it again (recompute on re-admission)."""
        t = seq.req.tenant
        self.cache.unpin(seq.path, self.now)
        if seq.unready:  # blocks it created but never wrote (a chunked prefill cut short)
            for node, _ in seq.unready:
                self._unready.pop(node.uid, None)
            first = seq.unready[0][0]
            if first.alive and first.pins == 0:
                self._drop(first)
            seq.unready = []
        for blk in seq.private:
            self.pool.give(blk)
        seq.private, seq.path, seq.table, seq.pos, seq.chunk = [], [], [], 0, 0
        self._preempted[seq.req.rid] = seq
        self.preemptions[t] += 1
        self._timed(self.scheduler.on_preempt, seq.req)

    # --- one step -----------------------------------------------------------------------------
    def _step(self, running: dict[int, _Seq]) -> list[_Seq]:
        """One forward per tenant in the batch (timed), sample greedily, charge, advance."""
        bt = self.opt.block_tokens
        groups: dict[int, list[_Seq]] = {}
        for seq in running.values():
            groups.setdefault(seq.req.tenant, []).append(seq)
        busy = self._step_extra
        modelled = 0.0
        self._step_tokens = 0
        out = np.zeros(self.n_tenants)
        ctx = np.zeros(self.n_tenants)
        chunked = self.opt.chunked_prefill
        for t, seqs in groups.items():
            members = seqs
            if chunked:
                seqs = [s for s in seqs if s.chunk > 0]
                if not seqs:
                    continue
                inputs = [SeqInput(s.tokens[s.pos : s.pos + s.chunk], s.pos, s.table) for s in seqs]
            else:
                inputs = [SeqInput(s.tokens[s.pos :], s.pos, s.table) for s in seqs]
            t0 = time.process_time()
            self._step_tokens += sum(len(i.tokens) for i in inputs)
            logits = self.model.forward(self.pool.k, self.pool.v, bt, inputs)
            nxt = logits.argmax(-1).tolist()
            dt = time.process_time() - t0
            self.cpu_s[t] += dt
            busy += dt
            if self.opt.step_time is not None:
                c0, c_tok, c_seq = self.opt.step_time
                n_tok = sum(len(i.tokens) for i in inputs)
                modelled += c0 + c_tok * n_tok + c_seq * len(inputs)
            for s, inp, tok in zip(seqs, inputs, nxt, strict=True):
                s.pos += len(inp.tokens)
                if s.pos < len(s.tokens):  # a prefill chunk short of the prompt's end
                    continue
                s.tokens.append(tok)
                s.generated += 1
                out[t] += 1
            ctx[t] = sum(s.pos for s in members)
        s0 = self.sched_s
        clock = busy if self.opt.step_time is None else modelled
        kv = ctx * self.kv_bytes_per_token * clock
        host = self.host_owned * self.block_bytes * clock
        self._timed(self.scheduler.on_iteration, out, kv, host, self.offload_now)
        lg = self.ledger
        lg.decode += out
        lg.kv_byte_s += kv
        lg.host_byte_s += host
        lg.offload_bytes += self.offload_now
        self.offload_now = np.zeros(self.n_tenants)
        if self.opt.step_time is None:
            self.now += busy + (self.sched_s - s0) + self._sched_pending
        else:
            self.now += modelled
        self.busy_s += busy
        self.max_step_tokens = max(self.max_step_tokens, self._step_tokens)
        self._written(running.values())
        self._step_extra = self._sched_pending = 0.0
        done = [s for s in running.values() if s.generated >= s.req.output_len]
        for s in running.values():
            if s.first_token < 0 and s.generated > 0:
                s.first_token = self.now
        return done

    def _finish(self, seq: _Seq) -> None:
        req, t = seq.req, seq.req.tenant
        self.cache.unpin(seq.path, self.now)
        for blk in seq.private:
            self.pool.give(blk)
        self.ledger.finished[t] += 1
        self._timed(self.scheduler.on_finish, req, self.now)
        self._records.append(
            (req.rid, t, req.arrival, seq.first_token, self.now, req.input_len, req.output_len)
        )
        self.outputs[req.rid] = seq.tokens[req.input_len :]
        del self._tokens[req.rid], self._hashes[req.rid]

    def _sample(self) -> None:
        lg = self.ledger
        self._samples.append(
            (
                self.now,
                lg.compute_service(),
                lg.unified_service(),
                self.cpu_s.copy(),
                self.scheduler.queued() > 0,
                self.host_used,
            )
        )

    def run(self) -> EngineResult:
        reqs = sorted(
            (r for r in self.trace.requests if r.arrival <= self.opt.horizon),
            key=lambda r: (r.arrival, r.rid),
        )
        running: dict[int, _Seq] = {}
        self._running = running
        self._records, self._samples = [], []
        self._step_extra = self._sched_pending = 0.0
        self.busy_s, steps, nxt, next_sample = 0.0, 0, 0, 0.0
        self.max_step_tokens = 0
        while nxt < len(reqs) or running or self.scheduler.queued().any():
            s0 = self.sched_s
            while nxt < len(reqs) and reqs[nxt].arrival <= self.now:
                self._timed(self.scheduler.on_arrival, reqs[nxt], self.now)
                nxt += 1
            if self.opt.preemption:
                self._grow(running)
            self._fill(running)
            self._sched_pending += self.sched_s - s0
            if not running:
                if nxt >= len(reqs):
                    break
                self.now = max(self.now, reqs[nxt].arrival)
                continue
            for seq in self._step(running):
                self._finish(running.pop(seq.req.rid))
            steps += 1
            if self.now >= self.opt.stop_at:
                break
            if self.now >= next_sample:
                self._sample()
                next_sample = self.now + self.opt.sample_every
        self._sample()
        return self._result(steps)

    def _result(self, steps: int) -> EngineResult:
        names = self.trace.tenant_names
        cols = ("rid", "tenant", "arrival", "first_token", "finish", "input_len", "output_len")
        reqs = pl.DataFrame(self._records, schema=list(cols), orient="row").with_columns(
            ttft=pl.col("first_token") - pl.col("arrival"),
            tpot=(pl.col("finish") - pl.col("first_token"))
            / pl.max_horizontal(pl.col("output_len") - 1, pl.lit(1)),
        )
        rows = self.ledger.as_rows(names)
        total_cpu = float(self.cpu_s.sum()) or 1.0
        for t, row in enumerate(rows):
            mine = reqs.filter(pl.col("tenant") == t)
            row.update(
                cpu_s=float(self.cpu_s[t]),
                cpu_share=float(self.cpu_s[t]) / total_cpu,
                tokens_served=float(self.ledger.decode[t]),
                preemptions=int(self.preemptions[t]),
                recomputed_tokens=float(self.recomputed[t]),
                weight=float(self.tenant_weights[t]),
                **{
                    f"{m}_p{int(q * 100)}": _q(mine, m, q)
                    for m in ("ttft", "tpot")
                    for q in (0.5, 0.99)
                },
            )
        samples = []
        for now, comp, uni, cpu, back, host_used in self._samples:
            for t, name in enumerate(names):
                samples.append(
                    (
                        now,
                        name,
                        float(comp[t]),
                        float(uni[t]),
                        float(cpu[t]),
                        bool(back[t]),
                        host_used,
                    )
                )
        samples = pl.DataFrame(
            samples,
            orient="row",
            schema=[
                "time",
                "tenant",
                "compute_service",
                "unified_service",
                "cpu_s",
                "backlogged",
                "host_used",
            ],
        )
        wall = self.busy_s + self.sched_s
        summary = dict(
            requests=reqs.height,
            steps=steps,
            engine_seconds=self.now,
            busy_s=self.busy_s,
            scheduler_s=self.sched_s,
            scheduler_share=self.sched_s / max(wall, 1e-12),
            tokens_per_s=float(self.ledger.decode.sum()) / max(self.now, 1e-12),
            host_used=self.host_used,
            preemptions=int(self.preemptions.sum()),
            max_step_tokens=self.max_step_tokens,
            chunked_prefill=self.opt.chunked_prefill,
            weights=self.weights.__dict__ if hasattr(self.weights, "__dict__") else {},
            measured=getattr(self, "measured", {}),
        )
        return EngineResult(pl.DataFrame(rows), reqs, samples, summary, self.outputs)


def fit_step_time(
    model: TinyLlama, block_tokens: int = 16, repeats: int = 3, threads: int | None = 1
) -> tuple[float, float, float]:
    """Least-squares fit of one forward's CPU time as c0 + c_token·tokens + c_seq·sequences,
    from timed prefills (16-256 tokens) and decode batches (1-32 sequences) of ``model``."""
    if threads is not None:
        torch.set_num_threads(threads)
    paged = PagedLlama(model)
    blocks = 64
    pool = BlockPool(model.layers, blocks, block_tokens, model.kv_heads, model.head_dim)
    rows, times = [], []
    shapes = [(n, 1) for n in (16, 64, 128, 256)] + [(1, b) for b in (1, 4, 16, 32)]
    for n_tok, n_seq in shapes * repeats:
        need = math.ceil(max(n_tok, 65) / block_tokens)
        seqs = [
            SeqInput(list(range(n_tok)), 0 if n_tok > 1 else 64, list(range(need)))
            for _ in range(n_seq)
        ]
        paged.forward(pool.k, pool.v, block_tokens, seqs)  # warm
        t0 = time.process_time()
        paged.forward(pool.k, pool.v, block_tokens, seqs)
        times.append(time.process_time() - t0)
        rows.append((1.0, n_tok * n_seq, n_seq))
    coef, *_ = np.linalg.lstsq(np.asarray(rows), np.asarray(times), rcond=None)
    return tuple(float(max(c, 0.0)) for c in coef)


def _q(frame: pl.DataFrame, column: str, q: float) -> float:
    if frame.height == 0:
        return float("nan")
    return float(frame[column].quantile(q, interpolation="linear"))


def serve(
    trace: Trace,
    scheduler: Scheduler,
    manager: CacheManager,
    options: EngineOptions | None = None,
    model: TinyLlama | None = None,
    weights: CostWeights | None = None,
) -> EngineResult:
    """Serve ``trace`` on the real engine with these plug-ins (objects; by CLI name through
    ``schedlab.faircache.real_engine.serve``)."""
    return RealEngine(trace, scheduler, manager, options, model, weights).run()


__all__ = [
    "EngineOptions",
    "EngineResult",
    "RealEngine",
    "block_hashes",
    "request_tokens",
    "serve",
    "fit_step_time",
]
