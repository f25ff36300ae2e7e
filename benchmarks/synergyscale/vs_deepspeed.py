"""SynergyScale's ``initialize`` side by side with DeepSpeed ZeRO-3 / ZeRO-Infinity (issue 37).

Same model (a nanoGPT-style 4-layer GPT, d_model 256, vocab 1024, untied head: 3.70M params),
same data (seeded random tokens, batch 4 x 64), same device budget (35 % of the 16 B/param model
states), Adam lr 1e-3, one PyTorch intra-op thread. Each run is its own process; the rounds are
interleaved (every run once, then again), and each run reports the median of its steps after
``--warmup`` warm-up steps. DeepSpeed runs with ``--ds-python`` (a venv that has it, never a
dependency of schedlab):

    python -m venv --system-site-packages /tmp/ds-venv
    /tmp/ds-venv/bin/pip install deepspeed==0.19.8      # torch stays 2.13.0+cpu
    apt-get install libaio-dev                          # for ZeRO-Infinity's NVMe op
    python benchmarks/synergyscale/vs_deepspeed.py --ds-python /tmp/ds-venv/bin/python \
        --nvme-dir /tmp/ss-bench-nvme --rounds 2 --steps 12 --out table.json

The first DeepSpeed run JIT-builds its CPU Adam and AIO ops (minutes; cached afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = [
    "torch",
    "ss-host",
    "ss-host-offload-only",
    "ss-nvme",
    "ss-nvme-offload-only",
    "ds-cpu",
    "ds-nvme",
]
MODEL = dict(vocab=1024, seq=64, d_model=256, n_layer=4, n_head=8, tie_weights=False)
BATCH = 4
LR = 1e-3
BUDGET_FRACTION = 0.35


def _batches(steps: int):
    import torch

    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        x = torch.randint(0, MODEL["vocab"], (BATCH, MODEL["seq"]), generator=g)
        y = torch.randint(0, MODEL["vocab"], (BATCH, MODEL["seq"]), generator=g)
        out.append((x, y))
    return out


def worker(run: str, steps: int, nvme_dir: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from schedlab.synergyscale.nanogpt import NanoGPT

    model = NanoGPT(dict(MODEL), seed=0)
    params = sum(p.numel() for p in model.parameters())
    budget = int(BUDGET_FRACTION * 16 * params)
    nvme = Path(nvme_dir) / run
    shutil.rmtree(nvme, ignore_errors=True)
    nvme.mkdir(parents=True, exist_ok=True)
    extra: dict = {}
    if run == "torch":
        opt = torch.optim.Adam(model.parameters(), lr=LR)

        def step(x, y):
            _, loss = model(x, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
    elif run.startswith("ss-"):
        from schedlab.synergyscale import initialize

        tier = "nvme" if "nvme" in run else "host"
        schedule = "offload-only" if run.endswith("offload-only") else "overlap"
        engine = initialize(
            model,
            torch.optim.Adam(model.parameters(), lr=LR),
            dict(device_budget=budget, tier=tier, nvme_dir=nvme, schedule=schedule),
        )

        def step(x, y):
            _, loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            return loss
    else:
        for key, value in dict(
            DS_ACCELERATOR="cpu",
            RANK="0",
            WORLD_SIZE="1",
            LOCAL_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(29500 + os.getpid() % 400),
        ).items():
            os.environ.setdefault(key, value)
        import deepspeed

        tier = "nvme" if run == "ds-nvme" else "cpu"
        zero = {
            "stage": 3,
            "offload_param": {"device": tier},
            "offload_optimizer": {"device": tier},
            "stage3_max_live_parameters": budget // 8,
            "stage3_prefetch_bucket_size": budget // 16,
            "stage3_param_persistence_threshold": 10_000,
        }
        if tier == "nvme":
            zero["offload_param"].update(
                nvme_path=str(nvme), pin_memory=False, buffer_count=5, buffer_size=int(1e6)
            )
            zero["offload_optimizer"].update(nvme_path=str(nvme), pin_memory=False)
        cfg = {
            "train_micro_batch_size_per_gpu": BATCH,
            "steps_per_print": 10**9,
            "optimizer": {"type": "Adam", "params": {"lr": LR}},
            "zero_optimization": zero,
        }
        engine, *_ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=cfg
        )
        extra["deepspeed"] = deepspeed.__version__

        def step(x, y):
            _, loss = engine(x, y)
            engine.backward(loss)
            engine.step()
            return loss

    seconds, cpu, losses = [], [], []
    for x, y in _batches(steps):
        wall, proc = time.perf_counter(), time.process_time()
        loss = step(x, y)
        losses.append(float(loss))
        seconds.append(time.perf_counter() - wall)
        cpu.append(time.process_time() - proc)
    if run.startswith("ss-"):
        extra.update(engine.stats())
        engine.close()
    shutil.rmtree(nvme, ignore_errors=True)
    return dict(
        run=run, params=params, budget=budget, seconds=seconds, cpu=cpu, losses=losses, **extra
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs", default=",".join(RUNS), help="comma-separated subset of " + ",".join(RUNS)
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--nvme-dir", default="/tmp/ss-bench-nvme")
    ap.add_argument("--ds-python", default=None, help="python of a venv with deepspeed")
    ap.add_argument("--out", default=None, help="write the table and raw runs as JSON")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, args.steps, args.nvme_dir)))
        return 0
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad:
        print(f"error: --runs: unknown run {bad[0]!r} (known: {', '.join(RUNS)})", file=sys.stderr)
        return 2
    if args.steps <= args.warmup:
        print("error: --steps must exceed --warmup", file=sys.stderr)
        return 2
    if any(r.startswith("ds-") for r in runs) and not args.ds_python:
        print("note: no --ds-python; skipping the DeepSpeed runs", file=sys.stderr)
        runs = [r for r in runs if not r.startswith("ds-")]
    results: dict[str, list[dict]] = {r: [] for r in runs}
    script = str(Path(__file__).resolve())
    for rnd in range(args.rounds):
        for run in runs:
            python = args.ds_python if run.startswith("ds-") else sys.executable
            cmd = [
                python,
                script,
                "--worker",
                run,
                "--steps",
                str(args.steps),
                "--nvme-dir",
                args.nvme_dir,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode or line is None:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
                print(f"error: run {run} failed: {tail[0][:200]}", file=sys.stderr)
                return 1
            results[run].append(json.loads(line[7:]))
            print(
                f"round {rnd + 1} {run}: median "
                f"{statistics.median(results[run][-1]['seconds'][args.warmup :]) * 1e3:.0f} ms",
                file=sys.stderr,
            )
    table = []

    def steady_ms(run: str) -> float:
        return statistics.median(s for r in results[run] for s in r["seconds"][args.warmup :]) * 1e3

    base = steady_ms("torch") if "torch" in results else None  # wherever --runs lists it
    for run in runs:
        cpu = [s for r in results[run] for s in r["cpu"][args.warmup :]]
        ms = steady_ms(run)
        table.append(
            dict(
                run=run,
                median_ms=round(ms, 1),
                cpu_ms=round(statistics.median(cpu) * 1e3, 1),
                x_torch=round(ms / base, 2) if base else None,
                loss_last=results[run][0]["losses"][-1],
            )
        )
    ref = results.get("torch")
    if ref:
        for row in table:
            row["max_loss_gap_vs_torch"] = max(
                abs(a - b)
                for a, b in zip(results[row["run"]][0]["losses"], ref[0]["losses"], strict=True)
            )
    by = {row["run"]: row for row in table}
    speedups = {}
    for tier in ("host", "nvme"):
        ss, oo = by.get(f"ss-{tier}"), by.get(f"ss-{tier}-offload-only")
        ds = by.get("ds-cpu" if tier == "host" else "ds-nvme")
        if ss and oo:
            speedups[f"{tier}_vs_offload_only"] = round(oo["median_ms"] / ss["median_ms"], 2)
        if ss and ds:
            speedups[f"{tier}_vs_deepspeed"] = round(ds["median_ms"] / ss["median_ms"], 2)
    print(f"{'run':<24}{'median ms':>10}{'cpu ms':>9}{'x torch':>9}{'loss gap':>11}")
    for row in table:
        gap = row.get("max_loss_gap_vs_torch")
        print(
            f"{row['run']:<24}{row['median_ms']:>10.1f}{row['cpu_ms']:>9.1f}"
            f"{row['x_torch'] if row['x_torch'] else '-':>9}"
            f"{(gap if gap is not None else float('nan')):>11.2e}"
        )
    for key, value in speedups.items():
        print(f"{key}: {value}x")
    if args.out:
        out = Path(args.out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(
            json.dumps(
                dict(
                    table=table,
                    speedups=speedups,
                    model=MODEL,
                    batch=BATCH,
                    budget_fraction=BUDGET_FRACTION,
                    runs=results,
                ),
                indent=1,
            )
        )
        os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
