"""Arcus's durable write side by side with the one-round-trip Halfmoon (issue 44), one run.

    python benchmarks/arcus/durable_write.py --rounds 5 --json out.json

One private redis-server and one 4-worker platform; every round runs every (storage delay,
workload, payload) cell under every protocol, in a shuffled order, on a fresh namespace:

* protocols: ``arcus`` (the default: the flush handed to a pipelined background flusher
  thread), ``arcus-inline`` (each write sent at once from the function's own thread, pipelined
  on the execution's own connection, the replies read by the same thread), ``arcus-sync``
  (write-through: one blocking round trip per write) and ``halfmoon`` (one round trip per log
  append, a write to a read-optimised object indexed by that append);
* workloads: ``rw`` (two stages of 4 operations, half of them writes, each stage a child
  invocation on another worker) and ``single-write`` (one write, then the result), each with
  values padded to several sizes;
* delays: loopback and injected storage round trips (``--rtts``).

Per run it records the p50/p99 of the **durable** write latency (from ``ctx.write`` until the
writing thread knows the value is in Redis; for a blocking write that is when it returns), the
mean end-to-end request latency, and the **CPU time** per request of every process involved
(the four workers, redis-server and this gateway; ``psutil``). The verdict per cell compares
Arcus with Halfmoon paired by round: the mean ratio with a 95% CI; **win** when the whole CI is
below 1 - ``--tie``, **lose** when it is above 1 + ``--tie``, **tie** otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

from schedlab.arcus.bench import run_bench
from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import protocol_class
from schedlab.arcus.store import RedisServer, find_redis_binary, redis_description
from schedlab.arcus.workloads import make_workload

PEER = "halfmoon"
METRICS = ("write_durable_p50_us", "write_durable_later_p50_us", "write_durable_p99_us",
           "e2e_mean_ms", "cpu_ms_per_request")


def _cpu_seconds(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += times.user + times.system
    return total


def _ci(values: list[float]) -> tuple[float, float]:
    mean = statistics.mean(values)
    half = 1.96 * statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0
    return mean, half


def verdict(ratios: list[float], tie: float) -> str:
    """win / tie / lose for lower-is-better ratios ours/peer, paired by round."""
    mean, half = _ci(ratios)
    if mean + half < 1.0 - tie:
        return "win"
    if mean - half > 1.0 + tie:
        return "lose"
    return "tie"


def run(rounds: int, requests: int, rtts: list[float], payloads: list[int],
        workloads: list[str], protocols: list[str], seed: int = 0,
        progress: bool = True, keys: int = 16) -> list[dict]:
    """Every cell under every protocol, ``rounds`` times; one row per run."""
    for name in protocols:
        protocol_class(name)
    rng = random.Random(seed)
    rows = []
    with RedisServer() as server, Platform(server.url, workers=4) as platform:
        for name in protocols:  # warm-up: connections, scripts, thread pools
            run_bench(platform, make_workload("ledger", 8, 0), name)
            run_bench(platform, make_workload("rw", 4, 0, keys=16), name)
        for round_ in range(rounds):
            for rtt in rtts:
                for workload in workloads:
                    for payload in payloads:
                        cell = make_workload(workload, requests, seed + round_, read_ratio=0.5,
                                             keys=keys, payload=payload)
                        order = list(protocols)
                        rng.shuffle(order)
                        for name in order:
                            pids = [*platform.worker_pids(), server.process.pid, os.getpid()]
                            cpu = _cpu_seconds(pids)
                            result = run_bench(platform, cell, name, rtt_ms=rtt,
                                               seed=seed + round_)
                            cpu = _cpu_seconds(pids) - cpu
                            rows.append(dict(
                                round=round_, rtt_ms=rtt, workload=workload, payload=payload,
                                protocol=name, requests=requests,
                                cpu_ms_per_request=1e3 * cpu / requests,
                                **{k: result[k] for k in (
                                    "write_durable_p50_us", "write_durable_later_p50_us",
                                    "write_durable_p99_us",
                                    "write_p50_us", "e2e_mean_ms", "rtts_per_request",
                                    "violations")}))
                        if progress:
                            got = {r["protocol"]: r for r in rows[-len(order):]}
                            print(f"round {round_} rtt {rtt} {workload} {payload} B: " + ", ".join(
                                f"{n} {got[n]['write_durable_p50_us']:.0f} us / "
                                f"{got[n]['cpu_ms_per_request']:.2f} ms cpu"
                                for n in protocols), file=sys.stderr, flush=True)
    return rows


def summarise(rows: list[dict], tie: float = 0.05) -> list[dict]:
    """Per cell and Arcus variant: the mean of each metric and the paired ratio to Halfmoon."""
    cells: dict[tuple, dict[str, dict[int, dict]]] = {}
    for row in rows:
        key = (row["rtt_ms"], row["workload"], row["payload"])
        cells.setdefault(key, {}).setdefault(row["protocol"], {})[row["round"]] = row
    out = []
    for (rtt, workload, payload), by_protocol in sorted(cells.items()):
        peer = by_protocol.get(PEER, {})
        for name, runs in sorted(by_protocol.items()):
            if name == PEER:
                continue
            entry = dict(rtt_ms=rtt, workload=workload, payload=payload, protocol=name,
                         rounds=len(runs))
            for metric in METRICS:
                ours = [runs[r][metric] for r in sorted(runs) if runs[r][metric] == runs[r][metric]]
                theirs = [peer[r][metric] for r in sorted(runs) if r in peer]
                ratios = [runs[r][metric] / peer[r][metric] for r in sorted(runs)
                          if r in peer and peer[r][metric] > 0
                          and runs[r][metric] == runs[r][metric]]  # NaN: no such write
                entry[metric] = statistics.mean(ours) if ours else float("nan")
                entry[f"{metric}_{PEER}"] = statistics.mean(theirs) if theirs else float("nan")
                if ratios:
                    mean, half = _ci(ratios)
                    entry[f"{metric}_ratio"] = mean
                    entry[f"{metric}_ratio_ci"] = half
                    entry[f"{metric}_verdict"] = verdict(ratios, tie)
            entry["violations"] = sum(r["violations"] for r in runs.values())
            out.append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=30, help="per run")
    parser.add_argument("--rtts", default="0,0.5,1", help="injected storage RTTs (ms)")
    parser.add_argument("--payloads", default="16,1024,16384", help="bytes added per value")
    parser.add_argument("--workloads", default="rw,single-write")
    parser.add_argument("--protocols", default="arcus,arcus-inline,arcus-sync,halfmoon")
    parser.add_argument("--keys", type=int, default=16,
                        help="distinct state keys per workload (few: every worker caches "
                             "every key, so every commit is pushed to every worker)")
    parser.add_argument("--tie", type=float, default=0.05,
                        help="a ratio within 1 +- this (95%% CI) is a tie")
    parser.add_argument("--json", default=None, help="write rows and summary here")
    args = parser.parse_args(argv)
    if find_redis_binary() is None:
        print("redis-server is not installed: nothing to measure", file=sys.stderr)
        return 0
    protocols = [p for p in args.protocols.split(",") if p]
    if PEER not in protocols:
        parser.error(f"--protocols must include {PEER}")
    start = time.monotonic()
    rows = run(args.rounds, args.requests, [float(x) for x in args.rtts.split(",")],
               [int(x) for x in args.payloads.split(",")],
               [w for w in args.workloads.split(",") if w], protocols, keys=args.keys)
    summary = summarise(rows, args.tie)
    print(f"{'rtt':>4} {'workload':12} {'pay':>6} {'protocol':13} "
          f"{'durable p50 us (ours/hm ratio verdict)':40} {'same, not 1st RTT':40} "
          f"{'cpu ms/req':30} e2e ms")
    for s in summary:
        def cell(metric: str, fmt: str, s: dict = s) -> str:
            return (f"{s[metric]:{fmt}}/{s[metric + '_' + PEER]:{fmt}} "
                    f"{s.get(metric + '_ratio', float('nan')):.2f}"
                    f"±{s.get(metric + '_ratio_ci', float('nan')):.2f} "
                    f"{s.get(metric + '_verdict', '?')}")
        print(f"{s['rtt_ms']:4} {s['workload']:12} {s['payload']:6} {s['protocol']:13} "
              f"{cell('write_durable_p50_us', '.0f'):40} "
              f"{cell('write_durable_later_p50_us', '.0f'):40} "
              f"{cell('cpu_ms_per_request', '.2f'):30} "
              f"{cell('e2e_mean_ms', '.2f')}")
    violations = sum(r["violations"] for r in rows)
    print(f"{len(rows)} runs, {violations} exactly-once violations, "
          f"{time.monotonic() - start:.0f} s, {redis_description()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(dict(rows=rows, summary=summary, tie=args.tie), handle, indent=1)
    return 1 if violations else 0


if __name__ == "__main__":  # the platform's fork server imports this module again
    raise SystemExit(main())
