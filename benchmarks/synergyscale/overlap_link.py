"""Issue 46, item 3: does the overlapped engine hide transfers behind compute, and does the
stream model (``schedlab.synergyscale.overlap``) predict what is measured?

One process, round-robin blocks (so machine load hits every runner alike): plain torch + Adam,
``initialize`` with ``schedule="overlap"`` and with ``schedule="offload-only"`` (both
``prefetch_depth="auto"``: each gets the window its own schedule's model picks), host tier,
35 % device budget, the 3.70M nanoGPT-style model of ``vs_deepspeed.py``. For each link:

* ``none``: copies are memcpy on this CPU (the "device" and the host are the same memory);
* a bandwidth (``--links 200MB,50MB``): ``link_bandwidth`` emulates a host<->device link of
  that many bytes/s per direction (one copy thread per direction, each copy slept up to
  bytes / bandwidth: a copy engine's DMA costs no compute). A CPU computes ~10^4 x slower
  than a GPU, so a 25 GB/s PCIe 4.0 x16 link next to an H100 is, relative to compute, a link
  of a few MB/s to a few hundred MB/s here, depending on tokens per step; the sweep spans it.

Reported per runner: median wall and CPU (``process_time``, all threads) ms per step, the
engine's planned depth and its model's predicted step (from the first step's measured per-unit
compute, transfer and optimizer times). Raw data: ``overlap_link_results.json``.

    PYTHONPATH=src python benchmarks/synergyscale/overlap_link.py --links none,200MB,50MB
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

MODEL = dict(vocab=1024, seq=64, d_model=256, n_layer=4, n_head=8, tie_weights=False)
MLP = dict(width=1024, layers=8)  # 8.4M params; at 8 rows per step its Adam outweighs compute


def workload(name: str, batch: int):
    """(make_model, loss(model_or_engine)) for ``nanogpt`` (3.70M, batch x 64 tokens) or
    ``mlp`` (8 x Linear(1024, 1024) + tanh, ``batch`` rows, MSE): the regime of an offloading
    GPU server, where the CPU's Adam step is as long as the device's compute or longer."""
    import torch

    g = torch.Generator().manual_seed(0)
    if name == "mlp":
        w = MLP["width"]
        x, y = torch.randn(batch, w, generator=g), torch.randn(batch, w, generator=g)

        def make():
            torch.manual_seed(0)
            nn = torch.nn
            return nn.Sequential(
                *[nn.Sequential(nn.Linear(w, w), nn.Tanh()) for _ in range(MLP["layers"])]
            )

        def loss(m):
            return torch.nn.functional.mse_loss(m(x), y)

        return make, loss
    from schedlab.synergyscale.nanogpt import NanoGPT

    x = torch.randint(0, MODEL["vocab"], (batch, MODEL["seq"]), generator=g)
    y = torch.randint(0, MODEL["vocab"], (batch, MODEL["seq"]), generator=g)
    return (lambda: NanoGPT(dict(MODEL), seed=0)), (lambda m: m(x, y)[1])


def run(
    link: str | None, blocks: int, block: int, budget: float, batch: int = 4, model_name="nanogpt"
) -> dict:
    import torch

    from schedlab.synergyscale import initialize

    make, compute_loss = workload(model_name, batch)
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses: dict[str, list[float]] = {}

    def plain():
        loss = compute_loss(model)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.setdefault("torch", []).append(loss.item())

    runners = {"torch": (plain, None)}
    for schedule in ("overlap", "offload-only"):
        m = make()
        engine = initialize(
            m,
            torch.optim.Adam(m.parameters(), lr=1e-3),
            dict(device_budget=budget, schedule=schedule, link_bandwidth=link),
        )

        def step(engine=engine, name=schedule):
            loss = compute_loss(engine)
            engine.backward(loss)
            engine.step()
            losses.setdefault(name, []).append(loss.item())

        runners[schedule] = (step, engine)
    wall: dict[str, list[float]] = {k: [] for k in runners}
    cpu: dict[str, list[float]] = {k: [] for k in runners}
    loads = []
    for b in range(blocks + 1):  # block 0: warm-up (an engine profiles and plans there)
        loads.append(os.getloadavg()[0])
        for name, (step, engine) in runners.items():
            w, c = time.perf_counter(), time.process_time()
            for _ in range(block if b else 2):
                step()
            if engine is not None:
                engine.synchronize()
            if b:
                wall[name].append((time.perf_counter() - w) / block)
                cpu[name].append((time.process_time() - c) / block)
    out = {"model": model_name, "link": link or "none", "batch": batch, "runners": {}}
    out["load"] = [round(v, 1) for v in loads]
    for name, (_, engine) in runners.items():
        entry = {
            "wall_ms": round(1e3 * statistics.median(wall[name]), 1),
            "cpu_ms": round(1e3 * statistics.median(cpu[name]), 1),
            "wall_blocks_ms": [round(1e3 * v, 1) for v in wall[name]],
        }
        if engine is not None:
            plan = engine.plan or {}
            entry["depth"] = engine.depth
            entry["resident_units"] = engine.stats()["resident_units"]
            if plan:
                entry["predicted_ms"] = round(1e3 * plan["predicted_step_s"], 1)
                entry["model_error"] = round(entry["predicted_ms"] / entry["wall_ms"] - 1, 3)
            engine.close()
        out["runners"][name] = entry
    base = losses["torch"]
    out["loss_gap"] = {
        k: max(abs(a - b) for a, b in zip(base, v, strict=True)) for k, v in losses.items()
    }
    r = out["runners"]
    out["overlap_vs_offload_only_wall"] = round(
        r["offload-only"]["wall_ms"] / r["overlap"]["wall_ms"], 2
    )
    out["overlap_vs_offload_only_cpu"] = round(
        r["offload-only"]["cpu_ms"] / r["overlap"]["cpu_ms"], 2
    )
    out["overlap_over_torch_wall"] = round(r["overlap"]["wall_ms"] / r["torch"]["wall_ms"], 2)
    out["overlap_over_torch_cpu"] = round(r["overlap"]["cpu_ms"] / r["torch"]["cpu_ms"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--links", default="none,200MB,50MB")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--budget", type=float, default=0.35)
    ap.add_argument("--batch", type=int, default=4, help="sequences of 64 tokens (or rows)")
    ap.add_argument("--model", choices=["nanogpt", "mlp"], default="nanogpt")
    ap.add_argument("--append", action="store_true", help="add to the results file")
    ap.add_argument("--out", default=str(Path(__file__).with_name("overlap_link_results.json")))
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    results = []
    for link in args.links.split(","):
        res = run(
            None if link == "none" else link,
            args.blocks,
            args.block,
            args.budget,
            args.batch,
            args.model,
        )
        results.append(res)
        r = res["runners"]
        print(
            f"{res['model']}, link {res['link']:>6}, batch {res['batch']} "
            f"(load {res['load'][0]}-{max(res['load'])}): "
            + ", ".join(
                f"{k} {v['wall_ms']:.0f} ms wall / {v['cpu_ms']:.0f} ms CPU"
                + (f" (depth {v['depth']}, model {v['predicted_ms']:.0f} ms)"
                   if "predicted_ms" in v else "")
                for k, v in r.items()
            ),
            flush=True,
        )
        print(
            f"  overlap vs offload-only {res['overlap_vs_offload_only_wall']}x wall "
            f"({res['overlap_vs_offload_only_cpu']}x CPU); overlap / torch "
            f"{res['overlap_over_torch_wall']} wall ({res['overlap_over_torch_cpu']} CPU); "
            f"loss gaps {res['loss_gap']}",
            flush=True,
        )
    out = Path(args.out)
    old = json.loads(out.read_text())["results"] if args.append and out.exists() else []
    models = {"nanogpt": MODEL, "mlp": MLP}
    out.write_text(json.dumps({"models": models, "results": old + results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
