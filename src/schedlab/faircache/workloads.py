"""FairCache's scenario workloads, built on ``schedlab.llm`` generators; all seeded.

Each function returns a ``Trace`` (and, where the experiment needs it, which tenants are which).
The shapes follow the paper's motivation: tenants that share prefixes, tenants whose requests
mostly hit the cache next to tenants whose requests never do, and reuse that goes cold.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.llm.generators import VTC_SCENARIOS, shared_prefix, vtc_scenario
from schedlab.llm.requests import BlockIds, Request, Trace


class _Mixer:
    """Builds a trace from per-tenant streams of prompts with chosen prefixes."""

    def __init__(self, block_tokens: int, seed: int) -> None:
        self.bt = block_tokens
        self.rng = np.random.default_rng(seed)
        self.ids = BlockIds(1)
        self.requests: list[Request] = []

    def prefix(self, tokens: int) -> tuple[int, ...]:
        return self.ids.fresh(tokens // self.bt)

    def add(
        self, tenant: int, time: float, prefix: tuple[int, ...], suffix_len: int, output_len: int
    ) -> None:
        inp = len(prefix) * self.bt + suffix_len
        blocks = prefix + self.ids.fresh(math.ceil(inp / self.bt) - len(prefix))
        self.requests.append(Request(len(self.requests), tenant, time, inp, output_len, blocks))

    def poisson(self, rate: float, start: float, end: float) -> np.ndarray:
        n = max(1, int(rate * (end - start) * 1.5) + 10)
        times = start + np.cumsum(self.rng.exponential(1.0 / rate, n))
        return times[times < end]

    def trace(self, name: str, tenants: int) -> Trace:
        return Trace(self.requests, self.bt, name, [f"t{i}" for i in range(tenants)])


def free_riding(
    order: list[int],
    prefix_len: int = 4096,
    suffix_len: int = 64,
    gap: float = 2.0,
    block_tokens: int = 16,
) -> Trace:
    """Tenants in ``order`` each send one request sharing a ``prefix_len``-token prefix."""
    if sorted(order) != list(range(len(order))):
        raise BadInputError("must be a permutation of 0..k-1", field="order")
    mix = _Mixer(block_tokens, 0)
    shared = mix.prefix(prefix_len)
    for slot, tenant in enumerate(order):
        mix.add(tenant, slot * gap, shared, suffix_len, 16)
    return mix.trace("free-riding", len(order))


def hit_bias(
    duration: float = 120.0,
    rate: float = 2.0,
    prompt_len: int = 2048,
    question_len: int = 64,
    output_len: int = 128,
    seed: int = 0,
    block_tokens: int = 16,
) -> Trace:
    """Tenant 0 reuses one long system prompt (high hit rate); tenant 1 never repeats a prompt.

    Both send ``prompt_len + question_len``-token prompts at ``rate`` req/s (Poisson).
    """
    mix = _Mixer(block_tokens, seed)
    system = mix.prefix(prompt_len)
    for t in mix.poisson(rate, 0, duration):
        mix.add(0, float(t), system, question_len, output_len)
    for t in mix.poisson(rate, 0, duration):
        mix.add(1, float(t), (), prompt_len + question_len, output_len)
    return mix.trace("hit-bias", 2)


def host_memory(
    duration: float = 120.0, seed: int = 0, block_tokens: int = 16, rate: float = 1.5
) -> Trace:
    """Four tenants with different reuse: two re-use a pool of long documents, two stream.

    t0 draws from 24 documents of 2048 tokens (large working set), t1 from 4 documents of 2048
    tokens (small working set), t2 and t3 send unique 2048-token prompts (no reuse).
    """
    mix = _Mixer(block_tokens, seed)
    pools = {0: [mix.prefix(2048) for _ in range(24)], 1: [mix.prefix(2048) for _ in range(4)]}
    for tenant in range(4):
        for t in mix.poisson(rate, 0, duration):
            if tenant in pools:
                doc = pools[tenant][int(mix.rng.integers(len(pools[tenant])))]
                mix.add(tenant, float(t), doc, 64, 32)
            else:
                mix.add(tenant, float(t), (), 2048 + 64, 32)
    return mix.trace("host-memory", 4)


def cold_data(
    duration: float = 120.0, seed: int = 0, block_tokens: int = 16, rate: float = 4.0
) -> Trace:
    """Reuse that goes cold: a hot document set in the first third is never used again.

    Phase 1 (first third): 8 documents reused heavily. Phases 2-3: 16 new documents reused at a
    moderate rate, interleaved with a scan of unique prompts (half the traffic).
    """
    mix = _Mixer(block_tokens, seed)
    old = [mix.prefix(1024) for _ in range(8)]
    new = [mix.prefix(1024) for _ in range(16)]
    third = duration / 3
    for t in mix.poisson(rate, 0, duration):
        tenant = int(mix.rng.integers(2))
        if t < third:
            mix.add(tenant, float(t), old[int(mix.rng.integers(len(old)))], 64, 32)
        elif mix.rng.random() < 0.5:
            mix.add(tenant, float(t), new[int(mix.rng.integers(len(new)))], 64, 32)
        else:
            mix.add(tenant, float(t), (), 1024 + 64, 32)
    return mix.trace("cold-data", 2)


def _shared(duration: float, seed: int, tenants: int, bt: int) -> Trace:
    return shared_prefix(
        groups=4 * tenants,
        prompts_per_group=max(1, int(duration * 8) // (4 * tenants)),
        system_len=1024,
        question_len=128,
        output_len=64,
        tenants=tenants,
        rate=8.0,
        seed=seed,
        block_tokens=bt,
    )


WORKLOADS: dict[str, Callable[[float, int, int, int], Trace]] = {
    **{
        name: (
            lambda d, s, n, bt, _name=name: vtc_scenario(_name, duration=d, seed=s, block_tokens=bt)
        )
        for name in VTC_SCENARIOS
    },
    "shared-prefix": _shared,
    "hit-bias": lambda d, s, n, bt: hit_bias(duration=d, seed=s, block_tokens=bt),
    "host-memory": lambda d, s, n, bt: host_memory(duration=d, seed=s, block_tokens=bt),
    "cold-data": lambda d, s, n, bt: cold_data(duration=d, seed=s, block_tokens=bt),
}


def make_workload(
    name: str, duration: float = 120.0, seed: int = 0, tenants: int = 4, block_tokens: int = 16
) -> Trace:
    """A named workload (the CLI's ``--workload``); ``tenants`` only shapes ``shared-prefix``."""
    if name not in WORKLOADS:
        raise UnknownNameError("workload", name, sorted(WORKLOADS))
    if not (math.isfinite(duration) and duration > 0):
        raise BadInputError(f"must be a finite number > 0, got {duration}", field="duration")
    if tenants < 1 or block_tokens < 1:
        raise BadInputError("tenants and block_tokens must be >= 1", field="tenants")
    trace = WORKLOADS[name](duration, seed, tenants, block_tokens)
    if not trace.requests:
        raise BadInputError(
            f"workload '{name}' has no requests in {duration:g} s; use a longer duration",
            field="duration",
        )
    return trace
