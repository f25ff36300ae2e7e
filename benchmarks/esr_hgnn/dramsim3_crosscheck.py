"""Cross-check our DRAM replay (memsys.replay_shared) against DRAMsim3 on the same traces.

DRAMsim3 (github.com/umd-memsys/DRAMsim3) is not a package; build it once and point at it:

    git clone https://github.com/umd-memsys/DRAMsim3 && cd DRAMsim3 && mkdir build && cd build
    cmake .. -DCMAKE_BUILD_TYPE=Release && make dramsim3main
    python benchmarks/esr_hgnn/dramsim3_crosscheck.py --dramsim3 DRAMsim3 [--reads 40000]

For each of HBM2_8Gb_x128.ini and DDR4_8Gb_x8_3200.ini (one channel: ``channels = 1`` in a
copy of the config) and three traces (sequential 64 B reads; random 64 B reads over 256 MiB; an
ESR-HGNN trie-sampling channel trace on DBLP-like data, 7 metapaths) it runs DRAMsim3 with every
read available at cycle 0 for a fixed window, takes its reads done, and times the same first reads
in our replay (same timing preset, one memory channel, 32 outstanding). It also runs a sparse
trace (one random read every 400 clocks) for DRAMsim3's idle read latency, next to ours (tRP +
tRCD + CL + burst on a row conflict, tRCD + CL + burst on an idle bank). Prints JSON rows.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from schedlab.core.errors import SchedlabError
from schedlab.esr_hgnn import dramsim3
from schedlab.esr_hgnn.engine import sample_channels
from schedlab.esr_hgnn.memsys import PRESETS, replay_channels
from schedlab.esr_hgnn.policies import make_sampler
from schedlab.esr_hgnn.workloads import generate, metapath_set, seed_batches


def traces(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    g = generate("dblp", 4.0, seed)
    mps = metapath_set(g, "dblp", "sym6")
    seeds = seed_batches(g, "A", 1024, 1, seed)[0]
    sampled = sample_channels(g, make_sampler("trie"), [mps], seeds, (10,), seed)[0].trace
    return {
        "sequential": np.arange(n, dtype=np.int64) * 64,
        "random": rng.integers(0, (256 << 20) // 64, n) * 64,
        "esr-trie-trace": (sampled[:n] // 64) * 64,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dramsim3", type=Path, required=True, help="DRAMsim3 source directory")
    ap.add_argument("--reads", type=int, default=40000)
    args = ap.parse_args()
    try:
        dramsim3.binary(args.dramsim3)
    except SchedlabError as exc:  # one line, not a traceback
        raise SystemExit(f"error: {exc}") from None
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for mem in dramsim3.CONFIGS:
            timing = PRESETS[mem]
            config = dramsim3.one_channel_config(args.dramsim3, mem, work / f"{mem}.ini")
            for name, addrs in traces(args.reads).items():
                window = 20000  # DRAMsim3 clocks; every trace here keeps its queue full
                ds = dramsim3.run(args.dramsim3, config, addrs, window, 0, work)
                done = ds["reads_done"]
                ours = replay_channels(
                    [addrs[:done]], timing, "partitioned", 1, timing.row_bytes, 1000, 32
                )
                ds_ns = window * timing.tck_ps / 1000
                rows.append(
                    dict(
                        memory=mem,
                        trace=name,
                        reads=done,
                        dramsim3_gbs=round(done * 64 / ds_ns, 2),
                        ours_gbs=round(done * 64 / (ours["seconds"] * 1e9), 2),
                        ratio_ours_over_dramsim3=round(ds_ns / (ours["seconds"] * 1e9), 3),
                        dramsim3_read_cmds=ds["read_cmds"],
                        ours_dram_reads=ours["row_hits"] + ours["row_misses"],
                        dramsim3_row_hit=round(ds["row_hits"] / max(1, ds["read_cmds"]), 3),
                        ours_row_hit=round(
                            ours["row_hits"] / max(1, ours["row_hits"] + ours["row_misses"]), 3
                        ),
                    )
                )
            sparse = np.random.default_rng(1).integers(0, (256 << 20) // 64, 200) * 64
            ds = dramsim3.run(args.dramsim3, config, sparse, 200 * 400 + 1000, 400, work)
            t = timing
            rows.append(
                dict(
                    memory=mem,
                    trace="idle latency (1 read / 400 clocks)",
                    dramsim3_latency_clocks=ds["latency"],
                    ours_conflict_clocks=t.rp + t.rcd + t.cl + t.burst,
                    ours_closed_bank_clocks=t.rcd + t.cl + t.burst,
                )
            )
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
