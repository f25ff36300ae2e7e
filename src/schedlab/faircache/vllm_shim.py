"""vLLM's scheduler loop, as far as ``FairQueue`` sees it, over schedlab's CPU engine.

Where vLLM is not installed this is the embedded stand-in: requests shaped like vLLM 0.32's
(``prefill_stats``, ``num_computed_tokens``, ``num_tokens``), driven peek / pop / prepend /
``update_from_output`` the way ``vllm.v1.core.sched.scheduler.Scheduler`` does, while the
engine (``schedlab.llm.engine``) decides what fits and computes the tokens. Its ledger is the
yardstick the queue's counters are compared with.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from schedlab.faircache.vllm import FairQueue
from schedlab.llm.accounting import CostWeights
from schedlab.llm.requests import Request


class VLLMShim:
    """Drives FairQueue the way vLLM's Scheduler does: peek, pop, prepend, update_from_output."""

    name = "vllm-shim"

    def __init__(self, policy: str, weights: CostWeights | None = None) -> None:
        self.policy, self.weights = policy, weights or CostWeights()

    def bind(self, view) -> None:
        self.n = view.n_tenants
        self.q = FairQueue(
            self.policy,
            block_size=16,
            max_tenants=self.n,
            weights=self.weights,
            tenant_of=lambda r: r.sampling_params.extra_args["tenant"],
            cached_tokens=lambda r: view.cached_tokens(r.req),
        )
        self.ext: dict[int, SimpleNamespace] = {}
        self.running: dict[str, SimpleNamespace] = {}
        self.scheduled: dict[str, int] = {}

    def on_arrival(self, req: Request, now: float) -> None:
        ext = SimpleNamespace(
            request_id=f"r{req.rid}",
            num_prompt_tokens=req.input_len,
            num_tokens=req.input_len,  # vLLM: prompt + generated so far
            num_computed_tokens=0,
            prefill_stats=SimpleNamespace(num_cached_tokens=0),  # vLLM 0.32's field
            scheduled_once=False,
            block_hashes=[],
            arrival_time=now,
            req=req,
            sampling_params=SimpleNamespace(
                extra_args={"tenant": f"t{req.tenant}"}, max_tokens=req.output_len
            ),
        )
        self.ext[req.rid] = ext
        self.q.add_request(ext)

    def pick(self, now: float):
        if not self.q:
            return None
        self.q.peek_request()
        return self.q.pop_request().req

    def unpick(self, req: Request) -> None:
        self.q.prepend_request(self.ext[req.rid])

    def on_admit(self, req: Request, usage) -> None:
        ext = self.ext[req.rid]
        if not ext.scheduled_once:  # vLLM sets prefill_stats at the first scheduling only
            ext.prefill_stats.num_cached_tokens = ext.num_tokens - usage.computed_tokens
            ext.scheduled_once = True
        ext.num_computed_tokens = ext.num_tokens  # schedule() advanced it over the prefill
        ext.block_hashes = [b[0] for b in usage.reused] + [b[0] for b in usage.computed]
        self.running[ext.request_id] = ext
        self.scheduled[ext.request_id] = usage.computed_tokens

    def on_iteration(self, out, kv, host, io) -> None:
        for rid, ext in self.running.items():
            if rid not in self.scheduled:
                ext.num_computed_tokens += 1  # a decode step: schedule() advanced it by one
        steps = {rid: self.scheduled.get(rid, 1) for rid in self.running}
        self.q.on_step(steps, self.running)
        self.scheduled.clear()
        for ext in self.running.values():  # update_from_output appends the sampled token
            ext.num_tokens += 1

    def on_preempt(self, req: Request) -> None:
        # vLLM's _preempt_request: KV freed, num_computed_tokens = 0, prepended to waiting
        ext = self.ext[req.rid]
        del self.running[ext.request_id]
        ext.num_computed_tokens = 0
        self.q.prepend_request(ext)

    def on_finish(self, req: Request, now: float) -> None:
        rid = self.ext.pop(req.rid).request_id
        del self.running[rid]
        self.q.on_finished(rid)

    def forget(self, block) -> None:
        return None

    def queued(self) -> np.ndarray:
        counts = np.zeros(self.n, dtype=np.int64)
        for ext in self.q:
            counts[ext.req.tenant] += 1
        return counts
