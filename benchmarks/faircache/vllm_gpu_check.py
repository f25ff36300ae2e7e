"""GPU check (prepared, not run here: needs CUDA and vLLM): FairCache's scheduler inside vLLM.

    pip install vllm   # on the GPU machine
    SCHEDLAB_FAIRCACHE_POLICY=vtc python benchmarks/faircache/vllm_gpu_check.py MODEL_DIR

Submits a flood from tenant "heavy" and a few requests from tenant "light" at once, with
``--scheduler-cls schedlab.faircache.vllm.FairCacheVLLMScheduler`` and with vLLM's default
FCFS scheduler, and prints per tenant: tokens generated and the mean finishing position of
its requests. Expected: under VTC/FairCache the light tenant's requests finish early (not
behind the whole flood); under FCFS they finish spread through the flood.
"""

from __future__ import annotations

import sys


def run(model: str, scheduler_cls: str | None) -> dict:
    from vllm import LLM, SamplingParams

    kwargs = dict(model=model, max_num_seqs=8, enable_prefix_caching=True)
    if scheduler_cls:
        kwargs["scheduler_cls"] = scheduler_cls
    llm = LLM(**kwargs)
    prompts, params = [], []
    for i in range(48):
        tenant = "light" if i % 12 == 11 else "heavy"
        prompts.append(f"Request {i} from {tenant}: write a long story about the sea.")
        params.append(
            SamplingParams(max_tokens=128, ignore_eos=True, extra_args={"tenant": tenant})
        )
    outputs = llm.generate(prompts, params)  # returned in finishing order is not guaranteed:
    # without finish times every request would sort as 0.0 and both runs would look the same
    if any(getattr(o.metrics, "finished_time", None) is None for o in outputs):
        raise SystemExit(
            "vLLM returned no RequestOutput.metrics.finished_time: cannot order the requests "
            "by finish (this check needs them; untested against this vLLM version)"
        )
    order = sorted(outputs, key=lambda o: o.metrics.finished_time)
    report: dict = {}
    for pos, out in enumerate(order):
        tenant = "light" if "from light" in out.prompt else "heavy"
        row = report.setdefault(tenant, dict(tokens=0, positions=[]))
        row["tokens"] += len(out.outputs[0].token_ids)
        row["positions"].append(pos)
    return report


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    for cls in (None, "schedlab.faircache.vllm.FairCacheVLLMScheduler"):
        report = run(sys.argv[1], cls)
        for tenant, row in report.items():
            mean = sum(row["positions"]) / len(row["positions"])
            print(
                f"{cls or 'fcfs'}: {tenant}: {row['tokens']} tokens, mean finishing "
                f"position {mean:.1f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
