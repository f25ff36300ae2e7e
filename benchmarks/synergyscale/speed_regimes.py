"""Per-regime step cost of ``initialize`` vs plain torch vs its offload-only schedule (issue 46),
side by side in one process, on transformers' GPT-2 built from configs.

Regimes: everything fits (no budget: every unit resident), 35 % of the 16 B/param states on the
host tier, and 35 % on the NVMe tier; each with the overlap schedule and the offload-only
baseline, next to plain torch + ``torch.optim.Adam``. Round-robin blocks of ``--block`` steps,
so machine load hits every run alike; each engine block ends with ``synchronize()``. Both CPU
time (``time.process_time``: all threads of the process, the less load-sensitive figure on a
shared machine) and wall time are recorded per step; medians over blocks.

What the ratios can show on a CPU-only machine: the "device", the host and the worker threads
are the same cores, so overlap cannot lower CPU time (it runs the same work), only wall time,
and only where something other than these cores is busy (the disk on the NVMe tier).

    PYTHONPATH=src python benchmarks/synergyscale/speed_regimes.py --blocks 6 \\
        --out benchmarks/synergyscale/speed_regimes_results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

CONFIGS = {
    "gpt2-tiny": dict(n_layer=2, n_embd=128, n_head=4, vocab_size=1024, n_positions=128),
    "gpt2-small-ish": dict(n_layer=4, n_embd=256, n_head=8, vocab_size=2048, n_positions=128),
}
BATCH, SEQ = 4, 64


def _model(config: dict):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(**config, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(cfg)


def runs_for(name: str, nvme_dir: Path, regimes: list[str]) -> dict:
    import torch

    from schedlab.synergyscale import initialize

    config = CONFIGS[name]
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, config["vocab_size"], (BATCH, SEQ), generator=g)
    out = {}
    model = _model(config)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def plain(model=model, opt=opt):
        opt.zero_grad()
        model(x, labels=x).loss.backward()
        opt.step()

    out["torch"] = (plain, None)
    engines = {
        "fits": dict(device_budget=None),
        "host35": dict(device_budget=0.35),
        "nvme35": dict(device_budget=0.35, tier="nvme", nvme_dir=str(nvme_dir)),
    }
    for regime in regimes:
        for schedule in ("overlap", "offload-only"):
            m = _model(config)
            settings = dict(engines[regime], schedule=schedule)
            if "nvme_dir" in settings:  # each engine its own files
                settings["nvme_dir"] = str(nvme_dir / schedule)
            engine = initialize(m, torch.optim.Adam(m.parameters(), lr=1e-3), settings)

            def step(engine=engine):
                engine.backward(engine(x, labels=x).loss)
                engine.step()

            out[f"{regime}-{schedule}"] = (step, engine)
    return out


def measure(name: str, blocks: int, block: int, nvme_dir: Path, regimes: list[str]) -> dict:
    runs = runs_for(name, nvme_dir, regimes)
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    wall: dict[str, list[float]] = {k: [] for k in runs}
    for b in range(blocks + 1):  # block 0 warms up (and the first, non-overlapped step)
        for key, (step, engine) in runs.items():
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(block):
                step()
            if engine is not None:
                engine.synchronize()
            if b:
                cpu[key].append(1e3 * (time.process_time() - c0) / block)
                wall[key].append(1e3 * (time.perf_counter() - w0) / block)
    for _, engine in runs.values():
        if engine is not None:
            engine.close(restore_model=False)
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    med_wall = {k: statistics.median(v) for k, v in wall.items()}
    ratios = {}
    for regime in regimes:
        ov, oo = f"{regime}-overlap", f"{regime}-offload-only"
        ratios[regime] = dict(
            overlap_vs_offload_only_cpu=med_cpu[oo] / med_cpu[ov],
            overlap_vs_offload_only_wall=med_wall[oo] / med_wall[ov],
            overlap_over_torch_cpu=med_cpu[ov] / med_cpu["torch"],
            overlap_over_torch_wall=med_wall[ov] / med_wall["torch"],
        )
    return dict(cpu_ms=med_cpu, wall_ms=med_wall, cpu_raw=cpu, wall_raw=wall, ratios=ratios)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=6)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--models", default="gpt2-tiny,gpt2-small-ish")
    ap.add_argument("--regimes", default="fits,host35,nvme35")
    ap.add_argument("--nvme-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import os

    import torch

    torch.set_num_threads(1)
    regimes = args.regimes.split(",")
    report = dict(load_before=os.getloadavg(), models={})
    with tempfile.TemporaryDirectory(dir=args.nvme_dir) as tmp:
        for name in args.models.split(","):
            got = measure(name, args.blocks, args.block, Path(tmp) / name, regimes)
            report["models"][name] = dict(config=CONFIGS[name], **got)
            print(name, "CPU ms:", {k: round(v, 1) for k, v in got["cpu_ms"].items()})
            print(name, "wall ms:", {k: round(v, 1) for k, v in got["wall_ms"].items()})
            for regime, r in got["ratios"].items():
                print(f"  {regime}: " + ", ".join(f"{k} {v:.2f}" for k, v in r.items()))
    report["load_after"] = os.getloadavg()
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
