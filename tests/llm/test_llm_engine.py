"""The real CPU engine: paged attention equals the model's own forward, cached and host-reloaded
K/V give the same tokens as recomputation, the ledger is fed block hashes, plug-ins work."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedlab.core.errors import BadInputError, ConfigError  # noqa: E402
from schedlab.faircache.managers import make_manager  # noqa: E402
from schedlab.faircache.policies import make_scheduler  # noqa: E402
from schedlab.faircache.real_engine import serve  # noqa: E402
from schedlab.llm.engine import EngineOptions, PagedLlama, SeqInput, TinyLlama  # noqa: E402
from schedlab.llm.engine.kv import BlockPool, HostStore  # noqa: E402
from schedlab.llm.requests import BlockIds, Request, Trace  # noqa: E402


def _shared_trace(n_tenants=3, per=4, prefix_blocks=3, inp=60, out=6, gap=0.0005):
    ids = BlockIds(1)
    shared = ids.fresh(prefix_blocks)
    reqs = []
    for i in range(n_tenants * per):
        own = ids.fresh(4)
        reqs.append(Request(i, i % n_tenants, i * gap, inp, out, shared + own))
    return Trace(reqs, 16, "shared", [f"t{i}" for i in range(n_tenants)])


def test_paged_forward_matches_the_models_own_forward():
    # the logits are ~0.1 in size: dropping RoPE's rotation moves them by 2e-3, the causal
    # mask by 0.1, a wrong block table by a whole other sequence; float error is ~1e-7
    spec = TinyLlama()
    model = PagedLlama(spec)
    pool = BlockPool(spec.layers, 8, 8, spec.kv_heads, spec.head_dim)
    gen = torch.Generator().manual_seed(1)
    toks = torch.randint(0, spec.vocab, (21,), generator=gen).tolist()
    with torch.inference_mode():
        ref = model.hf(torch.tensor([toks])).logits[0]
    table = [5, 2, 7]
    a = model.forward(pool.k, pool.v, 8, [SeqInput(toks[:13], 0, table[:2])])
    other = torch.randint(0, spec.vocab, (4,), generator=gen).tolist()
    b = model.forward(pool.k, pool.v, 8, [SeqInput(other, 0, [0]), SeqInput(toks[13:], 13, table)])
    assert ref[12].abs().mean() > 0.01  # not vanishing logits
    assert torch.allclose(a[0], ref[12], rtol=0, atol=1e-5)
    assert torch.allclose(b[1], ref[20], rtol=0, atol=1e-5)
    # the other sequence of the batch is right too (its own forward from position 0)
    with torch.inference_mode():
        ref_other = model.hf(torch.tensor([other])).logits[0]
    assert torch.allclose(b[0], ref_other[-1], rtol=0, atol=1e-5)


def test_host_store_copies_are_real():
    pool = BlockPool(2, 4, 4, 2, 8)
    host = HostStore(2, 2, 4, 2, 8)
    pool.k[:, 1].normal_()
    slot = host.offload(pool, 1)
    saved = pool.k[:, 1].clone()
    pool.k[:, 1].zero_()
    assert host.k.data_ptr() != pool.k.data_ptr()
    host.reload(pool, slot, 3)
    assert torch.equal(pool.k[:, 3], saved)


def test_cache_and_host_tier_give_the_same_tokens_as_recomputation():
    first = _shared_trace(n_tenants=3, per=2, inp=100).requests
    # the same six prompts again: by then a 14-block pool has evicted them to the host tier
    again = [
        Request(6 + r.rid, r.tenant, 0.01 + r.arrival, r.input_len, r.output_len, r.blocks)
        for r in first
    ]
    trace = Trace(first + again, 16, "repeat", ["t0", "t1", "t2"])
    off = serve(trace, "fcfs", "lru", EngineOptions(prefix_cache=False, gpu_blocks=64))
    on = serve(trace, "fcfs", "lru", EngineOptions(gpu_blocks=14, host_blocks=64, max_batch=1))
    assert off.outputs == on.outputs
    t = on.tenants
    assert t["host_hit_tokens"].sum() > 0  # reloads happened
    assert t["gpu_hit_tokens"].sum() + t["host_hit_tokens"].sum() > 0
    assert off.tenants["executed"].sum() > t["executed"].sum()


def test_shared_prefix_is_split_over_tenants_by_block_hash():
    trace = _shared_trace(per=2)
    res = serve(trace, "faircache", "lru", EngineOptions(gpu_blocks=128))
    t = res.tenants
    # the 3-block shared prefix (48 tokens) is computed once; every tenant pays a third of it
    assert t["attributed"].sum() == pytest.approx(t["executed"].sum())
    assert np.ptp(t["attributed"].to_numpy()) < 1e-9
    assert (t["cpu_s"] > 0).all() and t["cpu_share"].sum() == pytest.approx(1.0)
    assert res.summary["requests"] == len(trace.requests)


def test_vtc_plugin_serves_an_overloaded_light_tenant_first():
    # tenant 0 floods the engine; tenant 1 arrives later with few requests: VTC serves it
    # ahead of tenant 0's backlog, FCFS does not
    reqs = [Request(i, 0, 0.0, 24, 8, ()) for i in range(24)]
    reqs += [Request(100 + i, 1, 0.001, 24, 8, ()) for i in range(3)]
    trace = Trace(reqs, 16, "flood", ["t0", "t1"])
    opts = EngineOptions(max_batch=2, gpu_blocks=32)
    ttft = {}
    for name in ("vtc", "fcfs"):
        res = serve(trace, name, "lru", opts)
        ttft[name] = res.requests.filter(res.requests["tenant"] == 1)["ttft"].max()
    assert ttft["vtc"] < 0.5 * ttft["fcfs"]


def test_isolated_manager_uses_per_tenant_namespaces():
    trace = _shared_trace(per=2)
    res = serve(
        trace,
        make_scheduler("vtc"),
        make_manager("isolated"),
        EngineOptions(gpu_blocks=128, host_blocks=16),
    )
    shared = serve(trace, "vtc", "lru", EngineOptions(gpu_blocks=128, host_blocks=16))
    assert res.tenants["executed"].sum() > shared.tenants["executed"].sum()


def test_bad_input_is_one_line():
    trace = Trace([Request(0, 0, 0.0, 5000, 8, ())], 16, "long", ["t0"])
    with pytest.raises(BadInputError, match="context"):
        serve(trace, "vtc", "lru")
    trace = Trace([Request(0, 0, 0.0, 200, 8, ())], 16, "big", ["t0"])
    with pytest.raises(ConfigError, match="gpu_blocks"):
        serve(trace, "vtc", "lru", EngineOptions(gpu_blocks=4))
    with pytest.raises(ValueError, match="block_tokens"):
        EngineOptions(block_tokens=0)
    with pytest.raises(ConfigError, match="must be even"):
        TinyLlama(hidden=5, heads=1, kv_heads=1)  # odd head dimension: RoPE cannot rotate it


def _long_outputs_trace():
    ids = BlockIds(1)
    shared = ids.fresh(3)
    reqs = [Request(i, i % 3, 0.0, 60 + 7 * (i % 4), 24, shared + ids.fresh(5)) for i in range(9)]
    return Trace(reqs, 16, "long-outputs", ["t0", "t1", "t2"])


def test_chunked_prefill_keeps_the_step_budget_and_the_tokens():
    trace = _long_outputs_trace()
    whole = serve(trace, "vtc", "lru", EngineOptions(gpu_blocks=128))
    chunked = serve(
        trace, "vtc", "lru", EngineOptions(gpu_blocks=128, chunked_prefill=True, token_budget=40)
    )
    # prompts of 60-81 tokens cut into chunks: no step computes more than the budget (the
    # unchunked engine runs a whole prompt in one step), and the greedy tokens are the same
    assert chunked.summary["max_step_tokens"] <= 40 < whole.summary["max_step_tokens"]
    assert chunked.outputs == whole.outputs
    assert chunked.summary["steps"] > whole.summary["steps"]
    assert chunked.tenants["decode"].to_list() == whole.tenants["decode"].to_list()


@pytest.mark.parametrize("chunked", [False, True])
def test_preemption_by_recompute_gives_the_same_tokens(chunked):
    trace = _long_outputs_trace()
    base = serve(trace, "fcfs", "lru", EngineOptions(gpu_blocks=128, prefix_cache=False))
    opts = EngineOptions(gpu_blocks=20, preemption=True, chunked_prefill=chunked, token_budget=48)
    res = serve(trace, "faircache", "lru", opts)
    t = res.tenants
    # 9 requests of 5-6 blocks each in a 20-block pool: running requests run out of blocks
    # while decoding and the most recent ones are preempted, then recompute their prompt and
    # generated tokens from scratch (or from the prefix cache)
    assert res.summary["preemptions"] > 0 and t["preemptions"].sum() == res.summary["preemptions"]
    assert t["recomputed_tokens"].sum() > 0
    assert res.outputs == base.outputs
    # every output token is produced (and counted) once; recomputes are extra prefill
    assert t["decode"].sum() == sum(r.output_len for r in trace.requests)
    assert res.summary["requests"] == len(trace.requests)
    with pytest.raises(ConfigError, match="more than the pool"):
        serve(trace, "vtc", "lru", EngineOptions(gpu_blocks=4, preemption=True))


def _logits_by_position(trace, opts, monkeypatch):
    """Serve ``trace`` recording every forward's last-position logits, keyed by (last token,
    its position): the same key in two runs is the same prefix of the same request."""
    seen, forward = {}, PagedLlama.forward

    def recording(self, k_pool, v_pool, bt, seqs):
        out = forward(self, k_pool, v_pool, bt, seqs)
        for s, row in zip(seqs, out, strict=True):
            seen[(s.tokens[-1], s.start + len(s.tokens))] = row.clone()
        return out

    with monkeypatch.context() as m:
        m.setattr(PagedLlama, "forward", recording)
        res = serve(trace, "fcfs", "lru", opts)
    return res, seen


@pytest.mark.parametrize(
    "opts",
    [
        {},  # tenant 1's group runs before tenant 0's, which writes the shared prefix this step
        dict(chunked_prefill=True, token_budget=48),  # the creator writes it steps later
        dict(chunked_prefill=True, token_budget=24, preemption=True, gpu_blocks=9),
    ],
    ids=["same-step", "chunked", "chunked+preempt"],
)
def test_a_cache_hit_never_reads_a_block_before_its_creator_writes_it(opts, monkeypatch):
    # t1 decodes first, then t0 and t1 each admit a request on the same 3-4 block prefix: t0
    # creates the blocks, t1 matches them. Reading them before t0's forward has written them
    # (t1's forward runs first in a step; a chunked prefill writes them over several steps; a
    # preempted creator never does) gives other logits than computing without the cache.
    ids = BlockIds(1)
    prefix = ids.fresh(4 if not opts else 3)
    if not opts or "preemption" not in opts:
        reqs = [Request(0, 1, 0.0, 20, 4, ids.fresh(2))]
        reqs += [Request(1 + i, i, 1e-4, 80, 6, prefix + ids.fresh(1)) for i in range(2)]
    else:  # two 31-token decodes outgrow a 9-block pool while a 64-token prefill is chunked
        reqs = [Request(i, i % 2, 0.0, 31, 20, ids.fresh(1)) for i in range(2)]
        reqs += [Request(10 + i, i % 2, 1e-4, 64, 4, prefix + ids.fresh(1)) for i in range(2)]
    trace = Trace(reqs, 16, "unwritten", ["t0", "t1"])
    on, cached = _logits_by_position(trace, EngineOptions(**opts), monkeypatch)
    plain = {k: v for k, v in opts.items() if k not in ("preemption", "gpu_blocks")}
    _, fresh = _logits_by_position(trace, EngineOptions(prefix_cache=False, **plain), monkeypatch)
    assert on.tenants["gpu_hit_tokens"][1] >= 48  # t1 still reuses the prefix (after waiting)
    common = cached.keys() & fresh.keys()
    assert len(common) >= sum(r.output_len for r in reqs) - 2
    assert max(float((cached[k] - fresh[k]).abs().max()) for k in common) < 1e-5
    if "preemption" in opts:
        assert on.summary["preemptions"] > 0


class _Fifo:
    """The smallest Scheduler (schedlab.llm.plugins): one queue, no accounting of its own."""

    name = "fifo"

    def bind(self, view) -> None:
        self.n, self.queue = view.n_tenants, []

    def on_arrival(self, req, now) -> None:
        self.queue.append(req)

    def pick(self, now):
        return self.queue.pop(0) if self.queue else None

    def unpick(self, req) -> None:
        self.queue.insert(0, req)

    on_preempt = unpick

    def on_admit(self, req, usage) -> None: ...

    def on_iteration(self, out_tokens, kv_byte_s, host_byte_s, io_bytes) -> None: ...

    def on_finish(self, req, now) -> None: ...

    def forget(self, block) -> None: ...

    def queued(self):
        counts = np.zeros(self.n, dtype=np.int64)
        for req in self.queue:
            counts[req.tenant] += 1
        return counts

    def remove(self, req) -> bool:
        return False


class _NoHostTier:
    """The smallest CacheManager: keeps nothing on the host."""

    name = "none"

    def bind(self, capacity_blocks, n_tenants, block_tokens, attn_ratio) -> None:
        self.n = n_tenants

    def namespace(self, tenant) -> int:
        return 0

    def on_access(self, path, tenant, now) -> None: ...

    def admit(self, node, now):
        return None

    def on_remove(self, node) -> None: ...

    def usage(self):
        return np.zeros(self.n, dtype=np.int64)


def test_the_engine_takes_any_plug_ins_through_the_llm_protocols():
    """The shared engine needs no system: plug-ins written here serve the trace, and give the
    tokens FairCache's FCFS gives (same order, same model)."""
    from schedlab.llm.engine import serve as engine_serve

    trace = _shared_trace(n_tenants=2, per=2, inp=40, out=4)
    opts = EngineOptions(gpu_blocks=64)
    ours = engine_serve(trace, _Fifo(), _NoHostTier(), opts)
    theirs = serve(trace, "fcfs", "lru", opts)
    assert ours.outputs == theirs.outputs and len(ours.outputs) == 4
    assert ours.tenants["finished"].sum() == 4
    with pytest.raises(ConfigError, match="not the name 'fcfs'"):
        engine_serve(trace, "fcfs", _NoHostTier(), opts)  # names are FairCache's to resolve
