"""GPU check (run by hand on a CUDA machine, < 5 minutes): train past a device budget.

SynergyScale (11-synergyscale.md) on a real GPU: a GPT whose fp32 model states are several
times the device budget we set is trained with the CUDA-stream executor under ``synergyscale``
and under ``zero-offload`` (synchronous), and the step times are compared. Usage::

    python -m schedlab.synergyscale.gpu_check --budget 2GiB --steps 4 --out gpu-check.json

DeepSpeed is reported if it imports (it is not required).
"""

from __future__ import annotations

import argparse
import json
import time


def main(argv: list[str] | None = None) -> dict:
    import torch

    from schedlab.core.io import write_text
    from schedlab.synergyscale.cli import parse_size
    from schedlab.synergyscale.hardware import measure_local
    from schedlab.synergyscale.model import GPTConfig
    from schedlab.synergyscale.plan import problem_for
    from schedlab.synergyscale.training import train
    from schedlab.synergyscale.workloads import synthetic_batches

    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", default="2GiB")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--out", default="gpu-check.json")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this check needs a GPU")
    cfg = GPTConfig(vocab=8192, d_model=args.d_model, n_layer=args.layers,
                    n_head=args.d_model // 64, seq=512, batch=8)
    budget = parse_size(args.budget, "budget")
    hw = measure_local(device_bytes=budget, host_bytes=64 * 2**30)
    states = problem_for(cfg, hw).params * 16
    batches = synthetic_batches(cfg, args.steps, 0)
    result: dict = dict(gpu=torch.cuda.get_device_name(), device_budget=budget,
                        model_state_bytes=states, params=states // 16)
    for policy in ("synergyscale", "zero-offload"):
        start = time.perf_counter()
        report = train(cfg, batches, policy, budget, 64 * 2**30, executor="cuda",
                       device="cuda", cpu_threads=8, warmup=False)
        result[policy] = dict(report.summary(), wall_s=time.perf_counter() - start,
                              losses=report.losses)
        print(policy, json.dumps(result[policy]), flush=True)
    result["speedup"] = (result["zero-offload"]["median_step_s"]
                         / result["synergyscale"]["median_step_s"])
    try:
        import deepspeed  # noqa: F401

        result["deepspeed"] = "importable (comparison not run by this script)"
    except Exception as exc:  # any import failure just means no DeepSpeed comparison
        result["deepspeed"] = f"not available: {type(exc).__name__}"
    write_text(args.out, json.dumps(result, indent=2, default=str))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, dict)}))
    return result


if __name__ == "__main__":
    main()
