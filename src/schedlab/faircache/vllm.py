"""FairCache / VTC inside the v1 engine of vLLM, through ``--scheduler-cls``.

``vllm serve MODEL --scheduler-cls schedlab.faircache.vllm.FairCacheVLLMScheduler``

vLLM's v1 ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``) keeps its waiting requests in a
``RequestQueue`` (``vllm/v1/core/sched/request_queue.py``: ``add_request``, ``pop_request``,
``peek_request``, ``prepend_request(s)``, ``remove_request(s)``, ``__len__``/``__iter__``) and
admits from its head while the token budget and KV blocks last. ``FairQueue`` implements that
interface over a schedlab ``Scheduler`` (``vtc`` or ``faircache``), so the head is always the
request of the tenant with the least service; ``FairCacheVLLMScheduler`` subclasses vLLM's
``Scheduler``, installs the queue and charges a popped request's uncached prefill at once
(``KVCacheManager.get_computed_blocks``, looked up when the request is peeked: vLLM's
``schedule()`` peeks, allocates the request's slots, which registers its own prompt blocks in
the prefix cache, and pops only then; so the next pop of the same ``schedule()`` sees the
charge) and settles every step in ``update_from_output`` from the ``SchedulerOutput``
(``num_scheduled_tokens``) and the requests' public fields
(``num_prompt_tokens``, ``num_computed_tokens``, ``num_cached_tokens``, ``block_hashes``).

The prefix ledger gets ``(block_hash, computing tenant, cost)``: the first ``num_cached_tokens //
block_size`` of a request's ``block_hashes`` are reused, the rest of its full prompt blocks are
computed by it. Tenant of a request: ``sampling_params.extra_args["tenant"]`` (OpenAI API:
``"vllm_xargs": {"tenant": "acme"}``), else the LoRA adapter name, else ``"default"``.
Configuration, read when vLLM builds the scheduler: ``SCHEDLAB_FAIRCACHE_POLICY`` (``faircache``
or ``vtc``; default ``faircache``), ``SCHEDLAB_FAIRCACHE_MAX_TENANTS`` (default 256),
``SCHEDLAB_FAIRCACHE_WEIGHTS`` (``acme=2,beta=1``: VTC weights by tenant name).

vLLM needs CUDA and is not installable on the CPU machines this package is tested on: the queue
and the charging logic are tested by driving ``FairQueue`` from the CPU engine
(``schedlab.llm.engine``) with vLLM-shaped request objects; the subclass itself has not been run
inside vLLM here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.faircache.policies import VTC, AdmitUsage, make_scheduler
from schedlab.llm.accounting import CostWeights
from schedlab.llm.requests import Request


def num_tokens(request: Any) -> int:
    """Tokens a (re-)admission of ``request`` computes before its next sample: vLLM's
    ``Request.num_tokens`` (prompt + tokens generated so far; after a preemption all of them
    are recomputed), else prompt + ``num_output_tokens``."""
    n = getattr(request, "num_tokens", None)
    if n is None:
        n = request.num_prompt_tokens + int(getattr(request, "num_output_tokens", 0) or 0)
    return int(n)


def default_tenant(request: Any) -> str:
    """``extra_args["tenant"]``, else the LoRA name, else ``"default"``."""
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) or {}
    if "tenant" in extra:
        return str(extra["tenant"])
    lora = getattr(request, "lora_request", None)
    if lora is not None and getattr(lora, "lora_name", None):
        return str(lora.lora_name)
    return "default"


class _View:
    def __init__(self, n: int, weights: CostWeights, shares: np.ndarray) -> None:
        self.n_tenants, self.weights, self.tenant_weights = n, weights, shares

    def cached_tokens(self, req: Request) -> int:
        return 0


class FairQueue:
    """vLLM's ``RequestQueue`` interface, ordered by a schedlab VTC-family scheduler."""

    def __init__(
        self,
        policy: str = "faircache",
        block_size: int = 16,
        max_tenants: int = 256,
        tenant_of: Callable[[Any], str] = default_tenant,
        weights: CostWeights | None = None,
        tenant_weights: dict[str, float] | None = None,
        cached_tokens: Callable[[Any], int] | None = None,
    ) -> None:
        self.sched = make_scheduler(policy)
        if not isinstance(self.sched, VTC):
            raise ConfigError(
                f"'{policy}' is not a VTC-family scheduler (vtc, faircache)", field="policy"
            )
        for name, value in (("max_tenants", max_tenants), ("block_size", block_size)):
            if value < 1:
                raise ConfigError(f"must be >= 1, got {value}", field=name)
        self.tenant_weights = dict(tenant_weights or {})
        shares = np.ones(max_tenants)
        self.sched.bind(_View(max_tenants, weights or CostWeights(), shares))
        self.shares = self.sched.share  # filled in as tenants are named
        self.block_size, self.max_tenants, self.tenant_of = block_size, max_tenants, tenant_of
        self.tenants: dict[str, int] = {}
        self._ours: dict[str, Request] = {}  # vLLM request id -> ours
        self._ext: dict[int, Any] = {}  # our rid -> vLLM request
        self._admitted: set[str] = set()
        self._computer: dict[Any, int] = {}  # block hash -> tenant that computed it
        self._peeked: Request | None = None
        self._next = 0
        self.cached_tokens = cached_tokens  # prefix-cache hit of a waiting request, if known
        self._provisional: dict[str, float] = {}  # charged at pop, settled in on_step
        self._peek_hit: dict[str, int] = {}  # prefix hit looked up at peek (before allocation)
        self._hit: dict[str, int] = {}  # prefix hit at the pop of a preempted request
        self._preempted: set[str] = set()  # admitted, preempted, not yet re-admitted

    @classmethod
    def from_env(cls, block_size: int) -> FairQueue:
        weights = {}
        for item in filter(None, os.environ.get("SCHEDLAB_FAIRCACHE_WEIGHTS", "").split(",")):
            name, _, value = item.partition("=")
            try:
                weights[name.strip()] = float(value)
            except ValueError:
                raise ConfigError(
                    f"'{item}' is not NAME=WEIGHT", field="SCHEDLAB_FAIRCACHE_WEIGHTS"
                ) from None
        try:
            max_tenants = int(os.environ.get("SCHEDLAB_FAIRCACHE_MAX_TENANTS", "256"))
        except ValueError:
            raise ConfigError(
                "must be an integer", field="SCHEDLAB_FAIRCACHE_MAX_TENANTS"
            ) from None
        return cls(
            os.environ.get("SCHEDLAB_FAIRCACHE_POLICY", "faircache"),
            block_size,
            max_tenants,
            tenant_weights=weights,
        )

    # --- mapping ------------------------------------------------------------------------------
    def _tenant(self, request: Any) -> int:
        name = self.tenant_of(request)
        t = self.tenants.get(name)
        if t is None:
            if len(self.tenants) >= self.max_tenants:
                raise ConfigError(
                    f"more than {self.max_tenants} tenants (raise SCHEDLAB_FAIRCACHE_MAX_TENANTS)",
                    field="max_tenants",
                )
            t = self.tenants[name] = len(self.tenants)
            w = self.tenant_weights.get(name, 1.0)
            if not w > 0:
                raise ConfigError(f"weight of '{name}' must be > 0", field="tenant_weights")
            self.shares[t] = w
        return t

    def _wrap(self, request: Any) -> Request:
        ours = self._ours.get(request.request_id)
        if ours is None:
            hashes = tuple(getattr(request, "block_hashes", ()) or ())
            max_tokens = getattr(getattr(request, "sampling_params", None), "max_tokens", 1)
            ours = Request(
                self._next,
                self._tenant(request),
                float(getattr(request, "arrival_time", 0.0) or 0.0),
                int(request.num_prompt_tokens),
                int(max_tokens or 1),
                hashes,
            )
            self._next += 1
            self._ours[request.request_id] = ours
            self._ext[ours.rid] = request
        return ours

    # --- vLLM's RequestQueue ------------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        ours = self._wrap(request)
        self.sched.on_arrival(ours, ours.arrival)

    def peek_request(self) -> Any:
        if self._peeked is None:
            self._peeked = self.sched.pick(0.0)
            if self._peeked is None:
                raise IndexError("peek from an empty queue")
        request = self._ext[self._peeked.rid]
        # vLLM's schedule() peeks, looks up the prefix cache, allocates slots (which registers
        # the request's own prompt blocks in the cache) and only then pops: the hit must be
        # read here, or the pop would see the request's own fresh blocks as cached
        if self.cached_tokens and request.request_id not in self._peek_hit:
            self._peek_hit[request.request_id] = self.cached_tokens(request)
        return request

    def pop_request(self) -> Any:
        if self._peeked is not None:
            ours, self._peeked = self._peeked, None
        else:
            ours = self.sched.pick(0.0)
            if ours is None:
                raise IndexError("pop from an empty queue")
        request = self._ext[ours.rid]
        # vLLM pops several requests per schedule() before any output comes back: charge the
        # prefill now (provisionally), so the next pop already sees this tenant's new counter
        if request.request_id not in self._admitted:
            cached = self._peek_hit.pop(request.request_id, None)
            if cached is None:
                cached = self.cached_tokens(request) if self.cached_tokens else 0
            cost = self.sched.w_in * max(num_tokens(request) - cached, 0)
            self._hit[request.request_id] = cached
            self._settle(request.request_id, ours.tenant)
            self._provisional[request.request_id] = cost
            self.sched._charge(cost, ours.tenant)
        return request

    def _settle(self, request_id: str, tenant: int) -> None:
        cost = self._provisional.pop(request_id, 0.0)
        if cost:
            self.sched._charge(-cost, tenant)

    def _restore_peek(self) -> None:
        if self._peeked is not None:
            self._peek_hit.pop(self._ext[self._peeked.rid].request_id, None)
            self.sched.unpick(self._peeked)
            self._peeked = None

    def prepend_request(self, request: Any) -> None:
        self._restore_peek()
        ours = self._wrap(request)
        self._settle(request.request_id, ours.tenant)  # popped but not scheduled
        if request.request_id in self._admitted:
            # preempted (vLLM frees its KV and resets num_computed_tokens): the recompute of
            # prompt + generated tokens is charged as prefill when it is scheduled again; the
            # generated tokens were charged as output once and are not again
            self._admitted.discard(request.request_id)
            self._preempted.add(request.request_id)
            self.sched.on_preempt(ours)
        elif self.sched.backlogged[ours.tenant]:
            self.sched.unpick(ours)  # back at the head of its tenant's queue
        else:
            self.sched.on_arrival(ours, ours.arrival)

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        for request in reversed(list(requests)):
            self.prepend_request(request)

    def remove_request(self, request: Any) -> None:
        ours = self._ours.get(request.request_id)
        if ours is None:
            return
        self._peek_hit.pop(request.request_id, None)
        if self._peeked is not None and self._peeked.rid == ours.rid:
            self._peeked = None
        else:
            self.sched.remove(ours)
        self._settle(request.request_id, ours.tenant)

    def remove_requests(self, requests: Iterable[Any]) -> None:
        for request in requests:
            self.remove_request(request)

    def __len__(self) -> int:
        return int(self.sched.queued().sum()) + (self._peeked is not None)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Any]:
        if self._peeked is not None:
            yield self._ext[self._peeked.rid]
        for queue in self.sched.queues:
            for ours in queue:
                yield self._ext[ours.rid]

    # --- charging, once per engine step -------------------------------------------------------
    def on_step(
        self,
        num_scheduled_tokens: dict[str, int],
        requests: dict[str, Any],
        kv_byte_s: dict[str, float] | None = None,
    ) -> None:
        """Charge one step. Call after ``schedule()`` advanced ``num_computed_tokens`` (as
        ``update_from_output`` sees it): a request scheduled for the first time is admitted
        (its whole uncached prompt charged, with its block hashes; after a preemption, the
        prompt and the tokens it had generated, all recomputed), and a request whose computed
        tokens reach its known tokens (``num_tokens``: a decode, or the last chunk of a
        prefill) generated one token; a chunk short of that end generated none."""
        out = np.zeros(self.max_tenants)
        kv = np.zeros(self.max_tenants)
        for rid in num_scheduled_tokens:
            request = requests.get(rid)
            if request is None:
                continue
            ours = self._wrap(request)
            t = ours.tenant
            if rid not in self._admitted:
                self._admitted.add(rid)
                self._settle(rid, t)
                self.sched.on_admit(ours, self._usage(request, ours))
            if request.num_computed_tokens >= num_tokens(request):
                out[t] += 1
            if kv_byte_s:
                kv[t] += kv_byte_s.get(rid, 0.0)
        self.sched.on_iteration(out, kv, np.zeros(self.max_tenants), np.zeros(self.max_tenants))

    def _usage(self, request: Any, ours: Request) -> AdmitUsage:
        bs, t = self.block_size, ours.tenant
        rid = request.request_id
        hit = self._hit.pop(rid, None)
        if rid in self._preempted and hit is not None:
            # vLLM sets num_cached_tokens at the first scheduling only: a re-admission's hit
            # is the one looked up when it was popped
            cached = hit
        else:
            cached = int(getattr(request, "num_cached_tokens", 0) or 0)
        cached = max(cached, 0)
        generated = num_tokens(request) - request.num_prompt_tokens
        self._preempted.discard(rid)
        hashes = ours.blocks[: request.num_prompt_tokens // bs]
        n_hit = min(cached // bs, len(hashes))
        reused = [(h, self._computer.get(h, -1), float(bs)) for h in hashes[:n_hit]]
        computed = [(h, float(bs)) for h in hashes[n_hit:]]
        for h in hashes[n_hit:]:
            self._computer.setdefault(h, t)
        return AdmitUsage(t, num_tokens(request) - cached, computed, reused, generated=generated)

    def on_finished(self, request_id: str) -> None:
        ours = self._ours.pop(request_id, None)
        if ours is not None:
            self._ext.pop(ours.rid, None)
            if request_id in self._admitted:
                self.sched.on_finish(ours, 0.0)  # FairCache settles its memory prepayment
        self._admitted.discard(request_id)
        self._preempted.discard(request_id)
        self._hit.pop(request_id, None)

    def counters(self) -> dict[str, float]:
        return {name: float(self.sched.counters[t]) for name, t in self.tenants.items()}


_BUILT: dict[str, type] = {}


def _build_vllm_scheduler() -> type:
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except ImportError:
        raise ImportError(
            "FairCacheVLLMScheduler needs vLLM (pip install vllm on a CUDA "
            "machine); FairQueue works without it"
        ) from None

    class FairCacheVLLMScheduler(Scheduler):
        """vLLM's scheduler with its waiting queue ordered by FairCache (or VTC)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.waiting = FairQueue.from_env(self.block_size)
            # KVCacheManager.get_computed_blocks is vLLM's own prefix lookup (public method)
            self.waiting.cached_tokens = lambda r: self.kv_cache_manager.get_computed_blocks(r)[1]

        def update_from_output(self, scheduler_output, model_runner_output):
            self.waiting.on_step(scheduler_output.num_scheduled_tokens, self.requests)
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            for rid in list(self.waiting._ours):
                if rid not in self.requests:
                    self.waiting.on_finished(rid)
            return outputs

    return FairCacheVLLMScheduler


def __getattr__(name: str) -> Any:
    if name == "FairCacheVLLMScheduler":
        if name not in _BUILT:
            _BUILT[name] = _build_vllm_scheduler()
        return _BUILT[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
