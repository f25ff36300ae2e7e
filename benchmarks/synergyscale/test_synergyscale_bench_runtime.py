"""Speeds of SynergyScale's hot paths: planning at 114B, one offloaded step, NVMe tier I/O."""

from __future__ import annotations

import pytest

from schedlab.synergyscale import (
    BUILTIN_MODELS,
    NAMED_HARDWARE,
    make_policy,
    measure_local,
    problem_for,
    synthetic_batches,
)
from schedlab.synergyscale.costmodel import estimate
from schedlab.synergyscale.runtime import OffloadTrainer
from schedlab.synergyscale.tiers import NvmeStore, aligned_host_buffer
from schedlab.synergyscale.training import torch_threads
from schedlab.synergyscale.workloads import gpt_family


def test_bench_plan_114b_a100(benchmark) -> None:
    """Auto-tuning (16 simulated candidates) for a 114B model on A100-80GB."""
    problem = problem_for(gpt_family(83), NAMED_HARDWARE["a100-80g"])
    plan = benchmark(lambda: make_policy("synergyscale").plan(problem))
    assert estimate(problem, plan).params > 110e9


@pytest.mark.parametrize("policy", ["synergyscale", "zero-offload", "zero-infinity"])
def test_bench_offloaded_step_gpt_small(benchmark, tmp_path, policy: str) -> None:
    """One real training iteration of gpt-small with the device budget at 35 % of its states."""
    from dataclasses import replace

    cfg = BUILTIN_MODELS["gpt-small"]
    hw = measure_local(tmp_path)
    states = problem_for(cfg, hw).params * 16
    hw = replace(hw, device_bytes=int(0.35 * states), host_bytes=4 * states)
    problem = problem_for(cfg, hw)
    plan = make_policy(policy).plan(problem)
    tokens, targets = synthetic_batches(cfg, 1, 0)[0]
    with torch_threads(1):
        trainer = OffloadTrainer(cfg, plan, problem, 0, tmp_path)
        benchmark.pedantic(lambda: trainer.step(tokens, targets), rounds=5, warmup_rounds=1)
        trainer.close()


def test_bench_nvme_roundtrip_16mib(benchmark, tmp_path) -> None:
    store = NvmeStore(tmp_path)
    buffer = aligned_host_buffer(4 * 2**20)

    def roundtrip() -> None:
        store.write("chunk", buffer)
        store.read("chunk", buffer)

    benchmark.pedantic(roundtrip, rounds=5, warmup_rounds=1)
    store.cleanup()


@pytest.mark.parametrize("tier", ["host", "nvme"])
@pytest.mark.parametrize("schedule", ["overlap", "offload-only"])
def test_bench_initialize_step_nanogpt(benchmark, tmp_path, tier: str, schedule: str) -> None:
    """One step of synergyscale.initialize on the nanoGPT-style 3.70M model (35 % budget)."""
    import torch

    from schedlab.synergyscale import initialize
    from schedlab.synergyscale.nanogpt import NanoGPT

    model = NanoGPT(dict(tie_weights=False))
    x = torch.randint(0, 1024, (4, 64))
    with torch_threads(1):
        engine = initialize(model, torch.optim.Adam(model.parameters(), lr=1e-3),
                            dict(device_budget=0.35, tier=tier, nvme_dir=tmp_path,
                                 schedule=schedule))

        def step() -> None:
            engine.backward(engine(x, x)[1])
            engine.step()
            engine.synchronize()

        benchmark.pedantic(step, rounds=5, warmup_rounds=1)
        engine.close()


@pytest.mark.parametrize("released", [False, True], ids=["plain", "released"])
def test_bench_parameter_access_tracer_per_op(benchmark, released: bool) -> None:
    """Cost of an op on a *released* parameter, which goes through ``access.Released``'s
    ``__torch_function__`` (issue 46), against the same op on a plain one: 1,000 small ops.
    Ops on activations and on fetched parameters never pay it (the earlier TorchFunctionMode
    made every op of the step pay ~3.6 us)."""
    import torch

    from schedlab.synergyscale.access import OWNERS, Access, Released

    p = torch.nn.Parameter(torch.ones(4))
    if released:
        p.__class__ = Released
        OWNERS[id(p)] = Access({}, lambda slot: False, lambda slot: None, lambda: True)

    def ops():
        with torch.no_grad():
            for _ in range(500):
                torch.add(p, p)
                p.mul(2)

    try:
        with torch_threads(1):
            benchmark(ops)
    finally:
        OWNERS.pop(id(p), None)
