"""Request schedulers: FairCache and every baseline, behind one ``Scheduler`` protocol.

* ``fcfs``      first come, first served (vLLM's default).
* ``vtc``       Virtual Token Counter, Sheng et al., "Fairness in Serving Large Language Models",
                OSDI'24, Algorithm 2: a counter per tenant charged w_in=1 per prefill token
                actually executed and w_out=2 per generated token; the backlogged tenant with the
                smallest counter goes next; a tenant that becomes backlogged has its counter
                lifted to max(own, min over backlogged) (or to the counter of the last tenant to
                leave when nobody is backlogged). With a prefix cache on, this is "VTC + radix
                cache": cached tokens cost nothing, which is the bias FairCache fixes.
* ``lpm``       longest prefix match (SGLang): the queued request (within a window) with the most
                cached tokens goes next.
* ``dlpm``      deficit round robin over tenants with prefix locality inside a tenant (after
                Cao et al., "Locality-aware Fair Scheduling in LLM Serving", 2025).
* ``faircache`` FairCache: VTC's counter discipline over the *unified* cost (compute + memory +
                I/O, see ``accounting``), with shared-prefix prefill cost split over every tenant
                that reuses it (the first computer is refunded as others arrive).

A real serving engine uses these the same way the simulator does: ``on_arrival`` when a request
comes in, ``pick`` to choose what to admit (``unpick`` if it does not fit), ``on_admit`` with
what the prefill used, ``on_iteration`` after every batch step, ``on_finish`` at completion.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.core.registry import lookup
from schedlab.llm.accounting import CostWeights, PrefixLedger, computed_cost
from schedlab.llm.plugins import AdmitUsage, EngineView, Scheduler
from schedlab.llm.radix import Node
from schedlab.llm.requests import Request

__all__ = ["SCHEDULERS", "AdmitUsage", "CostWeights", "DeficitLPM", "EngineView", "FCFS",
           "FairCacheScheduler", "LongestPrefixMatch", "Scheduler", "VTC", "make_scheduler"]


class _PerTenantQueues:
    """Per-tenant FIFO queues plus a backlogged mask (shared plumbing, not policy)."""

    def bind(self, view: EngineView) -> None:
        self.view = view
        n = view.n_tenants
        self.queues: list[deque[Request]] = [deque() for _ in range(n)]
        self.backlogged = np.zeros(n, dtype=bool)
        self.charged = np.zeros(n)  # everything charged (no lifts): for conservation checks

    def queued(self) -> np.ndarray:
        return np.fromiter((len(q) for q in self.queues), dtype=np.int64, count=len(self.queues))

    def _push(self, req: Request) -> None:
        self.queues[req.tenant].append(req)
        self.backlogged[req.tenant] = True

    def _pop(self, tenant: int) -> Request:
        queue = self.queues[tenant]
        req = queue.popleft()
        if not queue:
            self.backlogged[tenant] = False
        return req

    def unpick(self, req: Request) -> None:
        self.queues[req.tenant].appendleft(req)
        self.backlogged[req.tenant] = True

    def on_preempt(self, req: Request) -> None:
        self.unpick(req)

    def on_finish(self, req: Request, now: float) -> None:
        return None

    def forget(self, node: Node) -> None:
        return None

    def remove(self, req: Request) -> bool:
        """Drop a queued request (an abort); False when it is not queued."""
        queue = self.queues[req.tenant]
        try:
            queue.remove(req)
        except ValueError:
            return False
        if not queue:
            self.backlogged[req.tenant] = False
            if hasattr(self, "ring") and req.tenant in self.ring:
                self.ring.remove(req.tenant)
        return True


class FCFS:
    """First come, first served across all tenants."""

    name = "fcfs"

    def bind(self, view: EngineView) -> None:
        self.queue: deque[Request] = deque()
        self.counts = np.zeros(view.n_tenants, dtype=np.int64)

    def on_arrival(self, req: Request, now: float) -> None:
        self.queue.append(req)
        self.counts[req.tenant] += 1

    def pick(self, now: float) -> Request | None:
        if not self.queue:
            return None
        req = self.queue.popleft()
        self.counts[req.tenant] -= 1
        return req

    def unpick(self, req: Request) -> None:
        self.queue.appendleft(req)
        self.counts[req.tenant] += 1

    def on_preempt(self, req: Request) -> None:
        self.unpick(req)

    def on_admit(self, req: Request, usage: AdmitUsage) -> None:
        return None

    def on_iteration(self, out_tokens, kv_byte_s, host_byte_s, io_bytes) -> None:
        return None

    def on_finish(self, req: Request, now: float) -> None:
        return None

    def forget(self, node: Node) -> None:
        return None

    def queued(self) -> np.ndarray:
        return self.counts.copy()

    def remove(self, req: Request) -> bool:
        try:
            self.queue.remove(req)
        except ValueError:
            return False
        self.counts[req.tenant] -= 1
        return True


class LongestPrefixMatch(FCFS):
    """SGLang's cache-aware policy: most cached tokens first, scanning the first ``window``."""

    name = "lpm"

    def __init__(self, window: int = 64) -> None:
        self.window = window

    def pick(self, now: float) -> Request | None:
        if not self.queue:
            return None
        best, best_tokens = 0, -1
        for i in range(min(self.window, len(self.queue))):
            tokens = self.view_cached(self.queue[i])
            if tokens > best_tokens:
                best, best_tokens = i, tokens
        req = self.queue[best]
        del self.queue[best]
        self.counts[req.tenant] -= 1
        return req

    def bind(self, view: EngineView) -> None:
        super().bind(view)
        self.view_cached = view.cached_tokens


class VTC(_PerTenantQueues):
    """Virtual Token Counter (OSDI'24 Algorithm 2), compute-only prices."""

    name = "vtc"

    def bind(self, view: EngineView) -> None:
        super().bind(view)
        self.counters = np.zeros(view.n_tenants)
        self.share = _shares(view)
        self.w_in, self.w_out = view.weights.w_in, view.weights.w_out
        self.last_left = -1
        self._inf = np.full(view.n_tenants, np.inf)

    def on_arrival(self, req: Request, now: float) -> None:
        t = req.tenant
        if not self.backlogged[t]:
            if self.backlogged.any():
                floor = float(np.min(self.counters, where=self.backlogged, initial=np.inf))
            else:
                floor = self.counters[self.last_left] if self.last_left >= 0 else 0.0
            self.counters[t] = max(self.counters[t], floor)
        self._push(req)

    def pick(self, now: float) -> Request | None:
        if not self.backlogged.any():
            return None
        t = int(np.argmin(np.where(self.backlogged, self.counters, self._inf)))
        req = self._pop(t)
        if not self.backlogged[t]:
            self.last_left = t
        return req

    def _charge(self, delta: np.ndarray | float, tenant: int | None = None) -> None:
        # weighted VTC (as in VTC's artifact): a tenant's counter grows by cost / weight
        if tenant is None:
            self.counters += delta / self.share
            self.charged += delta
        else:
            self.counters[tenant] += delta / self.share[tenant]
            self.charged[tenant] += delta

    def on_admit(self, req: Request, usage: AdmitUsage) -> None:
        self._charge(self.w_in * usage.computed_tokens, req.tenant)

    def on_iteration(self, out_tokens, kv_byte_s, host_byte_s, io_bytes) -> None:
        self._charge(self.w_out * out_tokens)


class FairCacheScheduler(VTC):
    """FairCache: VTC's discipline over the unified cost with shared-prefix cost splitting.

    ``prepay_memory`` (default on): a request's running-KV memory is held from admission to its
    end, so charging it only as it accrues (in arrears) lets a tenant's counter lag what it
    has already committed, and every in-flight request widens the service difference (with
    the default prices, 2-7x VTC's with the cache off). FairCache therefore charges, at
    admission, the memory the request is expected to cost (the mean KV charge per generated
    token so far × its output length) and settles as it accrues: actual charges first use up
    the tenant's prepaid balance, and a balance left when the tenant has nothing running is
    refunded. Totals are unchanged; only the timing of the memory charge moves.
    """

    name = "faircache"

    def __init__(self, prepay_memory: bool = True, step_time=None) -> None:
        self.prepay_memory = prepay_memory
        #: ``step_time`` (a ``StepFit`` or ``(c0, c_tok, c_seq)`` seconds of one forward of
        #: ``tokens`` over ``seqs``): compute priced by modelled engine time instead of VTC's
        #: w_in/w_out -- each tenant's forward of a step costs ``(c0 + c_tok·T + c_seq·S) /
        #: c_tok`` token units (one unit = a marginal prefill token, so w_in stays 1). For an
        #: engine that runs one forward per tenant per step without chunked prefill (the CPU
        #: engine's default): T and S are rebuilt from ``on_admit`` (new sequences and their
        #: executed prefill) and ``on_iteration`` (one output token per running sequence)
        self.step_time = None
        if step_time is not None:
            coef = getattr(step_time, "coefficients", step_time)
            c0, c_tok, c_seq = (float(c) for c in coef)
            if not (c_tok > 0 and c0 >= 0 and c_seq >= 0):
                raise BadInputError("needs c_tok > 0 and c0, c_seq >= 0", field="step_time")
            self.step_time = (c0, c_tok, c_seq)

    def bind(self, view: EngineView) -> None:
        super().bind(view)
        self.weights = view.weights
        self.ledger = PrefixLedger(view.n_tenants)
        self.prepaid = np.zeros(view.n_tenants)
        self.in_flight = np.zeros(view.n_tenants, dtype=np.int64)
        self._kv_total = self._out_total = 0.0
        self._new_seqs = np.zeros(view.n_tenants)  # admitted since the last step
        self._new_tokens = np.zeros(view.n_tenants)  # their executed prefill tokens

    def on_admit(self, req: Request, usage: AdmitUsage) -> None:
        delta = self.ledger.charge(req.tenant, usage.computed, usage.reused)
        # prefill not represented by cached blocks (cache off, or an engine without a tree)
        delta[req.tenant] += usage.computed_tokens - computed_cost(usage.computed)
        delta *= self.w_in
        delta[req.tenant] += self.weights.p_io * usage.load_bytes
        self._charge(delta)
        t = req.tenant
        self.in_flight[t] += 1
        self._new_seqs[t] += 1
        self._new_tokens[t] += usage.computed_tokens
        if self.prepay_memory and self._out_total > 0:
            remaining = max(req.output_len - usage.generated, 0)
            est = self._kv_total / self._out_total * remaining
            self.counters[t] += est / self.share[t]
            self.prepaid[t] += est

    def on_iteration(self, out_tokens, kv_byte_s, host_byte_s, io_bytes) -> None:
        w = self.weights
        kv = w.p_kv * kv_byte_s
        self._kv_total += float(np.sum(kv))
        self._out_total += float(np.sum(out_tokens))
        used = np.minimum(kv, self.prepaid)
        self.prepaid -= used
        compute = self._compute_units(out_tokens)
        self._charge(compute + kv + w.p_host * host_byte_s + w.p_io * io_bytes)
        self.counters -= used / self.share  # that part was charged at admission

    def _compute_units(self, out_tokens) -> np.ndarray:
        """This step's compute charge per tenant: VTC's w_out per output token, or (with a step
        time) each tenant's modelled forward time in marginal prefill tokens, less the w_in per
        executed prefill token its new sequences were charged at admission."""
        out = np.asarray(out_tokens, dtype=float)
        if self.step_time is None:
            return self.w_out * out
        c0, c_tok, c_seq = self.step_time
        seqs = np.maximum(out, self._new_seqs)
        tokens = np.maximum(out - self._new_seqs, 0.0) + self._new_tokens
        units = np.where(seqs > 0, (c0 + c_tok * tokens + c_seq * seqs) / c_tok, 0.0)
        units = np.maximum(units - self.w_in * self._new_tokens, 0.0)
        self._new_seqs[:] = 0.0
        self._new_tokens[:] = 0.0
        return units

    def on_finish(self, req: Request, now: float) -> None:
        t = req.tenant
        self.in_flight[t] -= 1
        if self.in_flight[t] <= 0 and self.prepaid[t] > 0:
            self.counters[t] -= self.prepaid[t] / self.share[t]
            self.prepaid[t] = 0.0

    def on_preempt(self, req: Request) -> None:
        # it holds no KV until re-admitted (which prepays its remaining output again)
        self.on_finish(req, 0.0)
        self.unpick(req)

    def forget(self, block: Node | Hashable) -> None:
        self.ledger.forget(block)


class DeficitLPM(_PerTenantQueues):
    """Deficit round robin over tenants; inside a tenant, the longest cached prefix first.

    A tenant's deficit grows by ``quantum`` token units per round and shrinks by w_in per
    executed prefill token and w_out per generated token; like classic DRR the deficit is reset
    when the tenant's queue empties.
    """

    name = "dlpm"

    def __init__(self, quantum: float = 2048.0, window: int = 16) -> None:
        self.quantum, self.window = quantum, window

    def bind(self, view: EngineView) -> None:
        super().bind(view)
        self.deficit = np.zeros(view.n_tenants)
        self.share = _shares(view)
        self.ring: deque[int] = deque()
        self.w_in, self.w_out = view.weights.w_in, view.weights.w_out

    def on_arrival(self, req: Request, now: float) -> None:
        if not self.backlogged[req.tenant]:
            self.deficit[req.tenant] = 0.0
            self.ring.append(req.tenant)
        self._push(req)

    def _next_tenant(self) -> int:
        for _ in range(len(self.ring)):
            if self.deficit[self.ring[0]] > 0:
                return self.ring[0]
            self.deficit[self.ring[0]] += self.quantum * self.share[self.ring[0]]
            self.ring.rotate(-1)
        members = np.fromiter(self.ring, dtype=np.int64)
        if not (self.deficit[members] > 0).any():  # everyone deep in debt: add whole rounds
            quanta = self.quantum * self.share[members]
            rounds = math.ceil(float(np.min((-self.deficit[members] + 1e-9) / quanta)))
            self.deficit[members] += rounds * quanta
        while self.deficit[self.ring[0]] <= 0:
            self.ring.rotate(-1)
        return self.ring[0]

    def pick(self, now: float) -> Request | None:
        if not self.ring:
            return None
        t = self._next_tenant()
        queue = self.queues[t]
        scan = min(self.window, len(queue))
        best = max(range(scan), key=lambda i: (self.view.cached_tokens(queue[i]), -i))
        req = queue[best]
        del queue[best]
        if not queue:
            self.backlogged[t] = False
            self.ring.remove(t)
            self.deficit[t] = 0.0
        return req

    def unpick(self, req: Request) -> None:
        if not self.backlogged[req.tenant]:
            self.ring.appendleft(req.tenant)
        super().unpick(req)

    def on_admit(self, req: Request, usage: AdmitUsage) -> None:
        cost = self.w_in * usage.computed_tokens
        self.charged[req.tenant] += cost
        if self.backlogged[req.tenant]:
            self.deficit[req.tenant] -= cost

    def on_iteration(self, out_tokens, kv_byte_s, host_byte_s, io_bytes) -> None:
        cost = self.w_out * out_tokens
        self.charged += cost
        self.deficit -= np.where(self.backlogged, cost, 0.0)


def _shares(view: EngineView) -> np.ndarray:
    """The engine's per-tenant weights (all 1 when it has none)."""
    shares = getattr(view, "tenant_weights", None)
    if shares is None:
        return np.ones(view.n_tenants)
    shares = np.asarray(shares, dtype=float)
    if shares.shape != (view.n_tenants,) or not (np.isfinite(shares) & (shares > 0)).all():
        raise BadInputError(f"needs {view.n_tenants} finite weights > 0", field="tenant_weights")
    return shares


SCHEDULERS: dict[str, Callable[[], Scheduler]] = {
    "fcfs": FCFS,
    "vtc": VTC,
    "lpm": LongestPrefixMatch,
    "dlpm": DeficitLPM,
    "faircache": FairCacheScheduler,
}


def make_scheduler(name: str) -> Scheduler:
    return lookup(SCHEDULERS, "scheduler", name)()
