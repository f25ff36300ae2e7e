"""FairCache / VTC inside SGLang, through its scheduling-policy hook.

SGLang's scheduler (``python/sglang/srt/managers/scheduler.py``) builds a ``SchedulePolicy``
(``schedule_policy.py``) and, before every prefill batch, calls
``policy.calc_priority(waiting_queue, running_batch=...)``, which sorts the list of waiting
``Req`` objects in place; the ``PrefillAdder`` then admits from its head while the token budget
and KV memory last. ``FairPolicy.calc_priority`` does the same job with VTC's rule: it orders
the queue so that the tenant with the least service comes first, projecting the cost of every
request it places ahead (so one tenant's backlog cannot fill the batch while another has less
service). It learns what happened from the same public objects: a request that left the
waiting queue since the last call was admitted (charged ``len(origin_input_ids) -
len(prefix_indices)`` executed prefill tokens, its cached and computed blocks as
``(block_hash, computing tenant, cost)`` with hashes of its token pages), and every admitted
request's ``len(output_ids)`` growth is charged as decode (a request's last tokens at the next
call).

Tenant of a request: ``req.sampling_params.custom_params["tenant"]`` (the ``custom_params`` of
SGLang's sampling parameters), else ``req.lora_id``, else ``"default"``.

Install: ``python -m schedlab.faircache.sglang --model-path ... [sglang launch_server flags]``
replaces ``SchedulePolicy`` in SGLang's scheduler module with ``make_sglang_policy()`` (in the
launcher process and in the scheduler processes it spawns, which re-import this module) and
runs ``sglang.launch_server``. SGLang needs CUDA and is not installable here: ``FairPolicy`` is
tested against the CPU engine with SGLang-shaped ``Req`` objects; the launcher has not been run
inside SGLang.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.faircache.policies import VTC, AdmitUsage, make_scheduler
from schedlab.faircache.vllm import _View
from schedlab.llm.accounting import CostWeights
from schedlab.llm.requests import Request


def default_tenant(req: Any) -> str:
    params = getattr(req, "sampling_params", None)
    custom = getattr(params, "custom_params", None) or {}
    if isinstance(custom, dict) and "tenant" in custom:
        return str(custom["tenant"])
    lora = getattr(req, "lora_id", None)
    return str(lora) if lora else "default"


def page_hashes(tokens: list[int], page: int) -> tuple:
    out, parent = [], 0
    for i in range(len(tokens) // page):
        parent = hash((parent, tuple(tokens[i * page : (i + 1) * page])))
        out.append(parent)
    return tuple(out)


class FairPolicy:
    """SGLang's ``calc_priority`` hook with VTC / FairCache ordering and accounting."""

    def __init__(
        self,
        policy: str = "faircache",
        page_size: int = 16,
        max_tenants: int = 256,
        tenant_of: Callable[[Any], str] = default_tenant,
        weights: CostWeights | None = None,
        expected_output: int = 256,
    ) -> None:
        self.sched = make_scheduler(policy)
        if not isinstance(self.sched, VTC):
            raise ConfigError(
                f"'{policy}' is not a VTC-family scheduler (vtc, faircache)", field="policy"
            )
        self.sched.bind(_View(max_tenants, weights or CostWeights(), np.ones(max_tenants)))
        self.page, self.max_tenants, self.tenant_of = page_size, max_tenants, tenant_of
        self.expected_output = expected_output
        self.tenants: dict[str, int] = {}
        self._ours: dict[str, Request] = {}
        self._req: dict[str, Any] = {}
        self._waiting: set[str] = set()
        self._outputs: dict[str, int] = {}
        self._computer: dict[Any, int] = {}
        self._rid: dict[int, str] = {}  # our rid -> SGLang rid
        self._next = 0

    def _wrap(self, req: Any) -> Request:
        ours = self._ours.get(req.rid)
        if ours is None:
            name = self.tenant_of(req)
            t = self.tenants.get(name)
            if t is None:
                if len(self.tenants) >= self.max_tenants:
                    raise ConfigError(f"more than {self.max_tenants} tenants", field="max_tenants")
                t = self.tenants[name] = len(self.tenants)
            tokens = list(req.origin_input_ids)
            max_new = getattr(getattr(req, "sampling_params", None), "max_new_tokens", None)
            ours = Request(
                self._next, t, 0.0, len(tokens), int(max_new or 1), page_hashes(tokens, self.page)
            )
            self._next += 1
            self._ours[req.rid], self._req[req.rid] = ours, req
            self._rid[ours.rid] = req.rid
        return ours

    def calc_priority(
        self, waiting_queue: list, running_batch: Any = None, *args: Any, **kwargs: Any
    ) -> None:
        present = {req.rid for req in waiting_queue}
        # 1. requests that left the queue were admitted (or aborted: then they never ran)
        for rid in self._waiting - present:
            req, ours = self._req[rid], self._ours[rid]
            self.sched.remove(ours)
            if getattr(req, "finished", lambda: False)() and not getattr(req, "output_ids", None):
                continue
            self.sched.on_admit(ours, self._usage(req, ours))
            self._outputs[rid] = 0
        # 2. decode progress of every admitted request we hold (running or just finished)
        out = np.zeros(self.max_tenants)
        for rid, seen in list(self._outputs.items()):
            req, ours = self._req[rid], self._ours[rid]
            ids = getattr(req, "output_ids", None)
            n = 0 if ids is None else len(ids)
            out[ours.tenant] += n - seen
            self._outputs[rid] = n
            if getattr(req, "finished", lambda: False)():
                self.sched.on_finish(ours, 0.0)  # FairCache settles its memory prepayment
                self._forget(rid)
        if out.any():
            z = np.zeros(self.max_tenants)
            self.sched.on_iteration(out, z, z, z)
        # 3. arrivals
        for req in waiting_queue:
            if req.rid not in self._waiting:
                ours = self._wrap(req)
                self.sched.on_arrival(ours, 0.0)
        self._waiting = present
        # 4. VTC order with projected costs
        waiting_queue[:] = self.order(waiting_queue)

    def order(self, waiting_queue: list) -> list:
        sched = self.sched
        projected = sched.counters.copy()
        heads = {t: list(q) for t, q in enumerate(sched.queues) if q}
        order: list = []
        w = sched.view.weights
        while heads:
            t = min(heads, key=lambda k: (projected[k], k))
            ours = heads[t].pop(0)
            if not heads[t]:
                del heads[t]
            cost = w.w_in * ours.input_len + w.w_out * min(ours.output_len, self.expected_output)
            projected[t] += cost / sched.share[t]
            order.append(self._req[self._rid[ours.rid]])
        return order

    def _usage(self, req: Any, ours: Request) -> AdmitUsage:
        # SGLang's prefix_indices is a torch tensor once matched: `tensor or ()` would raise
        prefix = getattr(req, "prefix_indices", None)
        cached = 0 if prefix is None else len(prefix)
        n_hit = min(cached // self.page, len(ours.blocks))
        t = ours.tenant
        reused = [(h, self._computer.get(h, -1), float(self.page)) for h in ours.blocks[:n_hit]]
        computed = [(h, float(self.page)) for h in ours.blocks[n_hit:]]
        for h in ours.blocks[n_hit:]:
            self._computer.setdefault(h, t)
        return AdmitUsage(t, ours.input_len - cached, computed, reused)

    def _forget(self, rid: str) -> None:
        self._outputs.pop(rid, None)
        ours = self._ours.pop(rid, None)
        if ours is not None:
            self._rid.pop(ours.rid, None)
        self._req.pop(rid, None)


def make_sglang_policy() -> type:
    """A subclass of SGLang's ``SchedulePolicy`` whose ``calc_priority`` is ``FairPolicy``'s."""
    try:
        from sglang.srt.managers.schedule_policy import SchedulePolicy
    except ImportError:
        raise ImportError(
            "the SGLang hook needs SGLang (pip install sglang on a CUDA "
            "machine); FairPolicy works without it"
        ) from None

    class FairCacheSchedulePolicy(SchedulePolicy):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            page = getattr(getattr(self, "tree_cache", None), "page_size", 1) or 1
            self.fair = FairPolicy(
                os.environ.get("SCHEDLAB_FAIRCACHE_POLICY", "faircache"), page_size=page
            )

        def calc_priority(self, waiting_queue, running_batch=None, *args, **kwargs):
            return self.fair.calc_priority(waiting_queue, running_batch)

    return FairCacheSchedulePolicy


def install() -> None:
    """Point SGLang's scheduler module at the FairCache policy."""
    import sglang.srt.managers.scheduler as scheduler_module

    scheduler_module.SchedulePolicy = make_sglang_policy()


if __name__ in ("__main__", "__mp_main__"):  # the launcher and the processes it spawns
    install()

if __name__ == "__main__":
    from sglang.launch_server import run_server  # noqa: E402
    from sglang.srt.server_args import prepare_server_args  # noqa: E402

    run_server(prepare_server_args(sys.argv[1:]))
