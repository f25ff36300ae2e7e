"""Headline experiments of SynergyScale (paper: ../shared/papers/11-synergyscale.md).

* ``memory_wall`` - largest trainable model per policy on A100-80GB, H100 and H200 (analytic,
  with the documented server assumptions), against the paper's 114.41B and 29.5x.
* ``throughput`` - iteration time, TFLOP/s, device idle fraction and bytes moved per tier:
  analytic at A100 scale over model sizes, and measured on this CPU with the real runtime.
* ``correctness`` - offloaded training (host and NVMe tiers, device budget enforced) gives
  bit-identical losses and parameters to in-memory PyTorch training; no-offload fails.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from schedlab.core import Claim, Figure, Result, register  # noqa: E402
from schedlab.core.errors import SchedlabError  # noqa: E402
from schedlab.synergyscale.hardware import NAMED_HARDWARE, measure_local  # noqa: E402
from schedlab.synergyscale.model import BUILTIN_MODELS, GPTConfig  # noqa: E402
from schedlab.synergyscale.plan import problem_for  # noqa: E402
from schedlab.synergyscale.policies import POLICIES  # noqa: E402
from schedlab.synergyscale.scaling import largest_model, trainable  # noqa: E402
from schedlab.synergyscale.training import train, train_reference  # noqa: E402
from schedlab.synergyscale.workloads import synthetic_batches  # noqa: E402

PAPER_MAX_PARAMS = 114.41e9
PAPER_SIZE_RATIO = 29.5
PAPER_SPEEDUP = 4.5
MIN_TOKENS_PER_S = 1000


def _ratio_at_throughput(seed: int) -> float:
    """Largest SynergyScale model at >= MIN_TOKENS_PER_S over the largest of any baseline."""
    hw = NAMED_HARDWARE["a100-80g"]
    sizes = {}
    for policy in POLICIES:
        _, est = largest_model(hw, policy, batch=4 + seed % 2 * 4,
                               min_tokens_per_s=MIN_TOKENS_PER_S)
        sizes[policy] = float(est.params) if est else 0.0
    prior = max(v for k, v in sizes.items() if k != "synergyscale")
    return sizes["synergyscale"] / max(prior, 1.0)


@register("synergyscale", quick=dict(gpus=("a100-80g",)),
          full=dict(gpus=("a100-80g", "h100", "h200")))
def memory_wall(gpus: tuple[str, ...], seed: int) -> Result:
    """Largest trainable model per policy on named GPUs (analytic, documented servers)."""
    rows = []
    for gpu in gpus:
        hw = NAMED_HARDWARE[gpu]
        for policy in POLICIES:
            layers, est = largest_model(hw, policy, batch=4 + seed % 2 * 4)
            rows.append(dict(gpu=gpu, policy=policy, layers=layers,
                             max_params=float(est.params) if est else 0.0,
                             iteration_s=est.iteration_s if est else None,
                             tflops=est.tflops if est else None,
                             device_bytes=hw.device_bytes))
    frame = pl.DataFrame(rows)
    a100 = {r["policy"]: r["max_params"] for r in rows if r["gpu"] == "a100-80g"}
    ratio = a100["synergyscale"] / max(a100["no-offload"], 1.0)
    prior = max(a100["zero-offload"], a100["no-offload"], 1.0)
    claims = [
        Claim("plans >= 114.41B parameters on one A100-80GB (512 GiB DRAM, one 3.84 TB NVMe; "
              "a capacity bound set by the assumed SSD, not a throughput)",
              "max params on a100-80g", a100["synergyscale"], PAPER_MAX_PARAMS, ">=",
              "114.41B"),
        Claim("models 29.5x larger than without offloading (A100-80GB)",
              "max params ratio vs no-offload", ratio, PAPER_SIZE_RATIO, ">=", "29.5x",
              baseline="no offloading", our_figure=a100["synergyscale"],
              figure_metric="max parameters on A100-80GB",
              peer_figure=a100["no-offload"]),
        Claim("29.5x larger than host-only offloading (ZeRO-Offload-like, same server)",
              "max params ratio vs zero-offload", a100["synergyscale"] / prior,
              PAPER_SIZE_RATIO, ">=", "29.5x over prior approaches",
              baseline="ZeRO-Offload-like", our_figure=a100["synergyscale"],
              figure_metric="max parameters on A100-80GB",
              peer_figure=a100["zero-offload"]),
        Claim("29.5x larger than a ZeRO-Infinity-like planner (same server, same NVMe)",
              "max params ratio vs zero-infinity",
              a100["synergyscale"] / max(a100["zero-infinity"], 1.0), PAPER_SIZE_RATIO, ">=",
              "29.5x over prior approaches", baseline="ZeRO-Infinity-like",
              figure_metric="max parameters on A100-80GB",
              our_figure=a100["synergyscale"], peer_figure=a100["zero-infinity"]),
        Claim(f"29.5x larger than the best prior approach at >= {MIN_TOKENS_PER_S:,} tokens/s "
              "(A100 model; largest model at a minimum throughput)",
              "max params ratio at a minimum throughput", _ratio_at_throughput(seed),
              PAPER_SIZE_RATIO, ">=", "29.5x over prior approaches",
              baseline="best prior approach"),
    ]
    return Result(frame, claims=claims, figures=[_size_figure(frame)], data="generated")


def _size_figure(frame: pl.DataFrame) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    gpus = frame["gpu"].unique(maintain_order=True).to_list()
    for i, policy in enumerate(POLICIES):
        sub = frame.filter(pl.col("policy") == policy)
        ax.bar([g + i * 0.2 for g in range(len(gpus))], (sub["max_params"] / 1e9).to_list(),
               width=0.2, label=policy)
    ax.set_xticks([g + 0.3 for g in range(len(gpus))], gpus)
    ax.set_ylabel("largest model (B params)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    return Figure.from_matplotlib(fig, "max_model_size", "largest trainable model per policy")


@register("synergyscale", quick=dict(layers=(16, 32, 40), cpu_model="gpt-small", cpu_steps=5),
          full=dict(layers=(16, 24, 32, 40, 52, 66, 83), cpu_model="gpt-medium", cpu_steps=8))
def throughput(layers: tuple[int, ...], cpu_model: str, cpu_steps: int, seed: int) -> Result:
    """Iteration time vs offload-only: analytic on A100-80GB and measured on this CPU."""
    hw = NAMED_HARDWARE["a100-80g"]
    rows = []
    for n in layers:
        for policy in POLICIES:
            est = trainable(n, hw, policy, batch=8 + 4 * seed, seq=2048)
            if est is not None:
                rows.append(dict(setting="a100-80g (model)", layers=n, **est.row()))
    rows += _measured_cpu(BUILTIN_MODELS[cpu_model], cpu_steps, seed)
    frame = pl.DataFrame(rows)
    speedups = _speedups(frame.filter(pl.col("setting") == "a100-80g (model)"))
    cpu = _speedups(frame.filter(pl.col("setting") == "cpu (measured)"))
    idle = frame.filter(pl.col("setting") == "a100-80g (model)").group_by("policy").agg(
        pl.col("device_idle").mean())
    idle_of = dict(zip(idle["policy"], idle["device_idle"], strict=True))
    claims = [
        Claim("up to 4.5x the throughput of offloading-only (A100 model)",
              "max speedup vs zero-offload", max(speedups, default=float("nan")),
              PAPER_SPEEDUP, ">=", "4.5x", baseline="ZeRO-Offload-like"),
        Claim("sanity check (holds by construction: the tuner searches a superset of the "
              "baseline, judged by the same model): never slower than offloading-only",
              "min speedup vs zero-offload", min(speedups, default=float("nan")), 1.0, ">=",
              "higher throughput", kind="sanity"),
        Claim("faster than offloading-only on this CPU (real runtime, 2 cores)",
              "measured speedup vs zero-offload", cpu[0] if cpu else float("nan"), 1.0, ">",
              "up to 4.5x", baseline="ZeRO-Offload-like"),
        Claim("overlap keeps the device busier than offloading-only (A100 model)",
              "idle fraction: zero-offload minus synergyscale",
              idle_of.get("zero-offload", 0.0) - idle_of.get("synergyscale", 0.0), 0.0, ">",
              "multi-stream overlap", baseline="ZeRO-Offload-like",
              our_figure=idle_of.get("synergyscale", float("nan")),
              figure_metric="device idle fraction",
              peer_figure=idle_of.get("zero-offload", float("nan")), lower_is_better=True),
    ]
    return Result(frame, claims=claims, figures=[_speed_figure(frame)], data="generated")


def _speedups(frame: pl.DataFrame) -> list[float]:
    out = []
    for n in frame["layers"].unique().sort().to_list():
        sub = frame.filter(pl.col("layers") == n)
        times = dict(zip(sub["policy"], sub["iteration_s"], strict=True))
        if "zero-offload" in times and "synergyscale" in times:
            out.append(times["zero-offload"] / times["synergyscale"])
    return out


def _measured_cpu(cfg: GPTConfig, steps: int, seed: int) -> list[dict]:
    """Real runtime on this CPU with a device budget of ~35 % of the model states."""
    hw = measure_local()
    states = problem_for(cfg, hw).params * 16
    batches = synthetic_batches(cfg, steps + 1, seed)
    rows = []
    for policy, host in (("zero-offload", 4 * states), ("synergyscale", 4 * states),
                         ("zero-infinity", 4 * states)):
        try:
            report = train(cfg, batches, policy, int(0.35 * states), host, hardware=hw,
                           seed=seed)
        except SchedlabError:
            continue
        s = report.summary()
        rows.append(dict(setting="cpu (measured)", layers=cfg.n_layer, policy=policy,
                         params=states // 16, iteration_s=s["median_step_s"],
                         device_idle=s["device_idle"], h2d_bytes=s["moved_h2d"],
                         d2h_bytes=s["moved_d2h"], nvme_read_bytes=s["moved_nvme_read"],
                         nvme_write_bytes=s["moved_nvme_write"], device_need=s["device_peak"]))
    return rows


def _speed_figure(frame: pl.DataFrame) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    model = frame.filter(pl.col("setting") == "a100-80g (model)")
    for policy in POLICIES:
        sub = model.filter(pl.col("policy") == policy).sort("params")
        if sub.height:
            ax.plot((sub["params"] / 1e9).to_list(), sub["tflops"].to_list(), "o-", label=policy)
    ax.set_xlabel("model size (B params)")
    ax.set_ylabel("TFLOP/s (A100 model)")
    ax.set_xscale("log")
    ax.legend(fontsize=7)
    return Figure.from_matplotlib(fig, "throughput", "projected throughput per policy")


@register("synergyscale", quick=dict(model="gpt-tiny", steps=6),
          full=dict(model="gpt-small", steps=20))
def correctness(model: str, steps: int, seed: int) -> Result:
    """Offloaded training is bit-identical to in-memory training; no-offload fails past budget."""
    cfg = BUILTIN_MODELS[model]
    hw = measure_local()
    batches = synthetic_batches(cfg, steps, seed)
    reference, ref_params = train_reference(cfg, batches, seed)
    states = problem_for(cfg, hw).params * 16
    device = int(0.45 * states)
    cases = (("synergyscale", 4 * states), ("synergyscale", int(0.6 * states)),
             ("zero-offload", 4 * states), ("zero-infinity", int(0.6 * states)))
    rows = []
    for policy, host in cases:
        report = train(cfg, batches, policy, device, host, hardware=hw, seed=seed,
                       keep_params=True)
        same_params = all(
            bool((report.final_params[i][k] == ref_params[i][k]).all())
            for i in range(cfg.n_stages) for k in ref_params[i])
        s = report.summary()
        rows.append(dict(policy=policy, host_budget=host, identical=report.losses == reference
                         and same_params, device_peak=s["device_peak"], device_budget=device,
                         model_state_bytes=states, chunks_nvme=s["chunks_nvme"],
                         moved_h2d=s["moved_h2d"], last_loss=s["last_loss"]))
    try:
        train(cfg, batches[:1], "no-offload", device, 4 * states, hardware=hw)
        no_offload_failed = 0.0
    except SchedlabError:
        no_offload_failed = 1.0
    frame = pl.DataFrame(rows)
    within = frame.filter((pl.col("device_peak") <= pl.col("device_budget"))
                          & (pl.col("model_state_bytes") > pl.col("device_budget"))).height
    claims = [
        Claim(f"sanity check (the reference shares the stage code and the Adam): offloaded "
              f"losses and weights bit-identical to in-memory training ({steps} steps)",
              "identical runs", float(frame["identical"].sum()), float(len(cases)), ">=",
              "same training semantics", required=True, kind="sanity"),
        Claim("sanity check: device tier stays within its budget, below the model states",
              "runs within budget", float(within), float(len(cases)), ">=",
              "beyond the memory wall", required=True, kind="sanity"),
        Claim("sanity check: no offloading fails past the device budget", "no-offload refused",
              no_offload_failed, 1.0, ">=", "memory wall", required=True, kind="sanity"),
        Claim("training makes progress (last loss below first)", "loss drop",
              reference[0] - reference[-1], 0.0, ">", "trains", kind="sanity"),
    ]
    return Result(frame, claims=claims, data="generated")


_GPT2_CONFIGS = {
    "gpt2-tiny": dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1024, n_positions=128),
    "gpt2-small-ish": dict(n_layer=4, n_embd=256, n_head=8, vocab_size=2048, n_positions=128),
}


@register("synergyscale",
          quick=dict(fit_on=(dict(vocab=512, seq=32, d_model=128, n_layer=2, n_head=4,
                                  tie_weights=False),
                             dict(vocab=256, seq=32, d_model=32, n_layer=2, n_head=2,
                                  tie_weights=False)),
                     targets=("gpt2-tiny",), budget=0.35, steps=2),
          full=dict(fit_on=(dict(vocab=1024, seq=64, d_model=256, n_layer=4, n_head=8,
                                 tie_weights=False),
                            dict(vocab=512, seq=64, d_model=64, n_layer=4, n_head=4,
                                 tie_weights=False)),
                    targets=("gpt2-tiny", "gpt2-small-ish"), budget=0.35, steps=6))
def planner_check(fit_on: tuple[dict, ...], targets: tuple[str, ...], budget: float,
                  steps: int, seed: int) -> Result:
    """The planner's step-time prediction for ``initialize`` vs the measured step, on GPT-2
    models from transformers configs that its engine coefficients were not fitted on."""
    import tempfile
    from pathlib import Path

    from schedlab.synergyscale.predict import check, gpt2_workload, nanogpt_workload
    from schedlab.synergyscale.training import torch_threads

    try:
        import transformers  # noqa: F401
    except ImportError as exc:
        raise SchedlabError("planner_check needs transformers (pip install 'schedlab[hf]')",
                            field="transformers") from exc
    with torch_threads(1), tempfile.TemporaryDirectory(prefix="ss-planner-") as tmp:
        rows = check([nanogpt_workload(f) for f in fit_on],
                     [gpt2_workload(t, _GPT2_CONFIGS[t], batch=4 + seed % 2) for t in targets],
                     budget, Path(tmp), steps)
    frame = pl.DataFrame(rows)
    held_out = frame.filter(~pl.col("fitted"))
    offload = held_out.filter(pl.col("tier") != "fits")
    worst = float(offload["error"].abs().max())
    worst_all = float(held_out["error"].abs().max())
    within = frame.filter(pl.col("device_peak") <= pl.col("device_budget")).height
    claims = [
        Claim("the planner predicts the engine's step time within 25 % on models it was not "
              "fitted on, host and NVMe tiers (CPU time per step; yardstick: the measured step)",
              "worst |predicted / measured - 1| (held-out GPT-2, host + NVMe)", worst, 0.25,
              "<=", "issue 46: <= 25 % error"),
        Claim("... and with everything resident too", "worst |error| incl. everything-fits",
              worst_all, 0.25, "<=", "issue 46: <= 25 % error"),
        Claim("sanity check: every run's device peak within its budget", "runs within budget",
              float(within), float(frame.height), ">=", "budget enforced", kind="sanity"),
    ]
    return Result(frame, claims=claims, data="generated")
