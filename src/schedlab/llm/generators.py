"""Seeded workload generators: VTC's scenarios and a generated-shared-prefix workload.

VTC scenarios follow Sheng et al., "Fairness in Serving Large Language Models" (OSDI'24, §5.2,
synthetic workloads); where the paper's exact numbers are not given here we say so:

* ``overload``: 2 tenants at 1.5 and 3 req/s, 256 input / 256 output tokens, Poisson arrivals
  (VTC's "constant overload" with 90 and 180 req/min).
* ``overload-multi``: 8 tenants at 0.5..4 req/s (ours: evenly spaced), 256/256.
* ``proportional``: 4 tenants at 0.25, 0.5, 0.75 and 1 × ``rate`` req/s, 256/256.
* ``on-off``: tenant 0 alternates 60 s on / 60 s off at 3 req/s, tenant 1 constant 3 req/s.
* ``short-long``: tenant 0 sends 64/64 requests, tenant 1 512/512, both at 3 req/s.
* ``distribution-shift``: 3 tenants whose rates rotate every ``duration``/3 seconds.
* ``increase``: a new tenant joins every ``duration``/4 seconds, each at 2 req/s.

``shared_prefix`` is SGLang's generated-shared-prefix benchmark: ``groups`` system prompts of
``system_len`` tokens, each followed by ``prompts_per_group`` questions of ``question_len``
tokens; group g belongs to tenant g mod ``tenants``; requests arrive in random order (Poisson).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.llm.requests import BlockIds, Request, Trace


def _poisson_times(rng: np.random.Generator, rate: float, start: float, end: float) -> np.ndarray:
    if rate <= 0 or end <= start:
        return np.empty(0)
    n = rng.poisson(rate * (end - start) * 1.2) + 16
    times = start + np.cumsum(rng.exponential(1.0 / rate, size=n))
    while times[-1] < end:  # rare: draw more
        more = times[-1] + np.cumsum(rng.exponential(1.0 / rate, size=n))
        times = np.concatenate([times, more])
    return times[times < end]


class _Builder:
    """Accumulates requests with fresh (unshared) prompts."""

    def __init__(self, block_tokens: int) -> None:
        self.block_tokens = block_tokens
        self.ids = BlockIds(1)
        self.requests: list[Request] = []

    def add(self, tenant: int, times: np.ndarray, inp: int, out: int) -> None:
        nblocks = math.ceil(inp / self.block_tokens)
        for t in times:
            self.requests.append(
                Request(len(self.requests), tenant, float(t), inp, out, self.ids.fresh(nblocks))
            )

    def trace(self, name: str, n_tenants: int) -> Trace:
        return Trace(self.requests, self.block_tokens, name, [f"t{i}" for i in range(n_tenants)])


def vtc_scenario(
    name: str, duration: float = 120.0, seed: int = 0, block_tokens: int = 16, rate: float = 3.0
) -> Trace:
    """One of VTC's synthetic scenarios (see the module docstring), seeded."""
    if name not in VTC_SCENARIOS:
        raise UnknownNameError("scenario", name, sorted(VTC_SCENARIOS))
    if duration <= 0:
        raise BadInputError("must be positive", field="duration")
    rng = np.random.default_rng(seed)
    builder = _Builder(block_tokens)
    n = VTC_SCENARIOS[name](builder, rng, duration, rate)
    return builder.trace(name, n)


def _overload(b: _Builder, rng: np.random.Generator, d: float, rate: float) -> int:
    for tenant, r in enumerate((rate / 2, rate)):
        b.add(tenant, _poisson_times(rng, r, 0, d), 256, 256)
    return 2


def _overload_multi(b: _Builder, rng: np.random.Generator, d: float, rate: float) -> int:
    for tenant, r in enumerate(np.linspace(0.5, 4.0, 8) * rate / 3.0):
        b.add(tenant, _poisson_times(rng, float(r), 0, d), 256, 256)
    return 8


def _proportional(b: _Builder, rng: np.random.Generator, d: float, rate: float) -> int:
    for tenant, share in enumerate((0.25, 0.5, 0.75, 1.0)):
        b.add(tenant, _poisson_times(rng, rate * share, 0, d), 256, 256)
    return 4


def _on_off(b: _Builder, rng: np.random.Generator, d: float, rate: float) -> int:
    for start in np.arange(0, d, 120.0):
        b.add(0, _poisson_times(rng, rate, start, min(start + 60.0, d)), 256, 256)
    b.add(1, _poisson_times(rng, rate, 0, d), 256, 256)
    return 2


def _short_long(b: _Builder, rng: np.random.Generator, d: float, rate: float) -> int:
    b.add(0, _poisson_times(rng, rate, 0, d), 64, 64)
    b.add(1, _poisson_times(rng, rate, 0, d), 512, 512)
    return 2


def _shift(b: _Builder, rng: np.random.Generator, d: float, rate: float) -> int:
    rates = np.array([0.5, 1.0, 2.0]) * rate
    phase = d / 3
    for p in range(3):
        for tenant in range(3):
            r = float(rates[(tenant + p) % 3])
            b.add(tenant, _poisson_times(rng, r, p * phase, (p + 1) * phase), 256, 256)
    return 3


def _increase(b: _Builder, rng: np.random.Generator, d: float, rate: float) -> int:
    for tenant in range(4):
        b.add(tenant, _poisson_times(rng, 2.0 * rate / 3.0, tenant * d / 4, d), 256, 256)
    return 4


VTC_SCENARIOS: dict[str, Callable[[_Builder, np.random.Generator, float, float], int]] = {
    "overload": _overload,
    "overload-multi": _overload_multi,
    "proportional": _proportional,
    "on-off": _on_off,
    "short-long": _short_long,
    "distribution-shift": _shift,
    "increase": _increase,
}


def shared_prefix(
    groups: int = 8,
    prompts_per_group: int = 32,
    system_len: int = 1024,
    question_len: int = 128,
    output_len: int = 64,
    tenants: int = 4,
    rate: float = 10.0,
    seed: int = 0,
    block_tokens: int = 16,
) -> Trace:
    """SGLang's generated-shared-prefix workload with groups mapped onto tenants (g mod N)."""
    for name, value in dict(
        groups=groups, prompts_per_group=prompts_per_group, tenants=tenants, output_len=output_len
    ).items():
        if value < 1:
            raise BadInputError("must be >= 1", field=name)
    if system_len < 0 or question_len < 0 or system_len + question_len < 1 or rate <= 0:
        raise BadInputError("lengths must be >= 0 (sum >= 1) and rate > 0", field="system_len")
    rng = np.random.default_rng(seed)
    ids = BlockIds(1)
    n = groups * prompts_per_group
    group_of = rng.permutation(np.repeat(np.arange(groups), prompts_per_group))
    times = np.cumsum(rng.exponential(1.0 / rate, size=n))
    prefix_blocks = system_len // block_tokens  # only whole blocks can be shared
    systems = [ids.fresh(prefix_blocks) for _ in range(groups)]
    tail = math.ceil((system_len + question_len) / block_tokens) - prefix_blocks
    requests = [
        Request(
            i,
            int(g) % tenants,
            float(times[i]),
            system_len + question_len,
            output_len,
            systems[g] + ids.fresh(tail),
        )
        for i, g in enumerate(group_of)
    ]
    return Trace(requests, block_tokens, "shared-prefix", [f"t{i}" for i in range(tenants)])
