"""In-process, interleaved step times: plain torch vs ``initialize`` (overlap) vs its
offload-only schedule, host tier, 35 % budget, on the 3.70M nanoGPT-style model of
``vs_deepspeed.py``. One process and round-robin blocks of 4 consecutive steps, so machine load
hits all three alike; an engine's block ends with ``synchronize()`` (overlap may spill into the
next forward inside a block, never past it).

    PYTHONPATH=src python benchmarks/synergyscale/interleaved_ab.py --blocks 8
"""

from __future__ import annotations

import argparse
import statistics
import time

MODEL = dict(vocab=1024, seq=64, d_model=256, n_layer=4, n_head=8, tie_weights=False)
BLOCK = 4


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--budget", type=float, default=0.35)
    args = ap.parse_args(argv)
    import torch

    from schedlab.synergyscale import initialize
    from schedlab.synergyscale.nanogpt import NanoGPT

    torch.set_num_threads(1)
    params = sum(p.numel() for p in NanoGPT(dict(MODEL), seed=0).parameters())
    steppers = {}
    model = NanoGPT(dict(MODEL), seed=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def plain(x, y, model=model, opt=opt):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    steppers["torch"] = (plain, None)
    for schedule in ("overlap", "offload-only"):
        m = NanoGPT(dict(MODEL), seed=0)
        engine = initialize(
            m,
            torch.optim.Adam(m.parameters(), lr=1e-3),
            dict(device_budget=int(args.budget * 16 * params), schedule=schedule),
        )

        def step(x, y, engine=engine):
            _, loss = engine(x, y)
            engine.backward(loss)
            engine.step()

        steppers[schedule] = (step, engine)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, MODEL["vocab"], (4, MODEL["seq"]), generator=g)
    y = torch.randint(0, MODEL["vocab"], (4, MODEL["seq"]), generator=g)
    times: dict[str, list[float]] = {k: [] for k in steppers}
    for block in range(args.blocks + 1):  # block 0 warms up
        for name, (step, engine) in steppers.items():
            started = time.perf_counter()
            for _ in range(BLOCK):
                step(x, y)
            if engine is not None:
                engine.synchronize()
            if block:
                times[name].append((time.perf_counter() - started) / BLOCK)
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    print(", ".join(f"{k} {v:.1f} ms" for k, v in med.items()))
    print(
        f"overlap vs offload-only {med['offload-only'] / med['overlap']:.2f}x, "
        f"overlap / plain torch {med['overlap'] / med['torch']:.2f}"
    )
    for _, engine in steppers.values():
        if engine is not None:
            engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
