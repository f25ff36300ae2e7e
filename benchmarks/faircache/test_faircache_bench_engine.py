"""The real CPU engine (``schedlab.llm.engine``): scheduler + cache-manager share of step time
(issue 25 target: <= 2%), measured by the engine itself (CPU time inside plug-in calls over
all busy time), for the tiny test model and a 4-layer, 256-wide one; shared-prefix workload
with a host tier so the cache manager works too."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from schedlab.faircache.real_engine import serve  # noqa: E402
from schedlab.llm.engine import EngineOptions, TinyLlama  # noqa: E402
from schedlab.llm.requests import BlockIds, Request, Trace  # noqa: E402

MODELS = {
    "tiny-2x64": TinyLlama(),
    "small-4x256": TinyLlama(
        layers=4, hidden=256, intermediate=512, heads=8, kv_heads=4, vocab=512
    ),
}


def _trace(n=96, tenants=4):
    ids = BlockIds(1)
    systems = [ids.fresh(4) for _ in range(tenants)]
    reqs = [
        Request(i, i % tenants, i * 0.002, 128, 32, systems[i % tenants] + ids.fresh(4))
        for i in range(n)
    ]
    return Trace(reqs, 16, "bench", [f"t{i}" for i in range(tenants)])


MODES = {
    "default": dict(gpu_blocks=160),
    # vLLM-style: 256-token step budget with prefill chunks, KV allocated as written and
    # preemption by recompute in a pool too small for 16 running requests' outputs
    "chunked+preempt": dict(gpu_blocks=96, chunked_prefill=True, token_budget=256, preemption=True),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("sched", ["vtc", "faircache"])
def test_faircache_bench_engine_scheduler_share(benchmark, sched, model, mode):
    trace = _trace()
    opts = EngineOptions(host_blocks=128, max_batch=16, **MODES[mode])
    res = benchmark.pedantic(
        serve, args=(trace, sched, "faircache", opts, MODELS[model]), rounds=1, iterations=1
    )
    share = res.summary["scheduler_share"]
    benchmark.extra_info.update(
        scheduler_share=share,
        steps=res.summary["steps"],
        preemptions=res.summary["preemptions"],
        step_ms=1e3 * res.summary["busy_s"] / res.summary["steps"],
    )
    print(
        f"\n{sched} {model} {mode}: scheduler share {share:.4f}, "
        f"preemptions {res.summary['preemptions']}, "
        f"step {1e3 * res.summary['busy_s'] / res.summary['steps']:.2f} ms"
    )
    assert res.summary["requests"] == len(trace)
