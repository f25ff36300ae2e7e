"""Long fault-injection run for Arcus (paper 12): kills, stalls, Redis restarts and log GC.

    python benchmarks/arcus/long_chaos.py --kills 10000 --out arcus-chaos.json

Rounds of :func:`schedlab.arcus.chaos.run_chaos` (4 concurrent clients, transfers and sagas,
random SIGKILLs of worker processes) cycle through every exactly-once protocol and through
variants: shared or disjoint accounts, all requests keyed or half retried without a key, and
every fourth round with Redis SIGKILLed and restarted (AOF always) twice. Every round also
stalls workers (SIGSTOP for ``--stall-s``, longer than the lease, then SIGCONT: the stalled
execution resumes after its message ran elsewhere) and runs log GC every ``--gc-interval`` s at
the shortest retention allowed (the lease), so stalled executions resume after their logs went
(issue 44). It stops once the kills reach ``--kills`` and the stalls ``--stalls``, and writes
per-round and total figures (kills, stalls, restarts, GC runs and collected logs, requests,
client retries, every invariant's violation count) as one JSON document.
Exit status 1 if any invariant was violated or any required request never finished.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from schedlab.arcus.chaos import ChaosConfig, run_chaos
from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import PROTOCOLS, VARIANTS
from schedlab.arcus.store import RedisServer

SAFE = [name for name, cls in PROTOCOLS.items() if cls.exactly_once]
#: selectable with --protocols too (Arcus's variants: inline flush, write-through, push by key)
ALSO = [name for name, cls in VARIANTS.items() if cls.exactly_once]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10_000, help="stop after this many kills")
    parser.add_argument("--protocols", default=",".join(SAFE))
    parser.add_argument("--requests", type=int, default=40, help="per client per round")
    parser.add_argument("--kill-interval", type=float, default=0.02, help="mean gap (s)")
    parser.add_argument("--stalls", type=int, default=0, help="also run until this many stalls")
    parser.add_argument("--stall-interval", type=float, default=0.2,
                        help="mean gap between stalls (s); 0: none")
    parser.add_argument("--stall-s", type=float, default=1.5, help="stall length (> lease)")
    parser.add_argument("--gc-interval", type=float, default=0.25,
                        help="log GC period (s) at retention = lease; 0: none")
    parser.add_argument("--lease", type=float, default=1.0, help="worker lease (s)")
    parser.add_argument("--stallers", type=int, default=1,
                        help="threads stalling workers at once (< 4 workers)")
    parser.add_argument("--faults", type=int, default=0,
                        help="also run until kills + stalls + Redis restarts reach this")
    parser.add_argument("--restart-every", type=int, default=0,
                        help="Redis SIGKILL + restart in every K-th round (0: every 4th "
                             "variant, twice)")
    parser.add_argument("--restarts-per-round", type=int, default=2)
    parser.add_argument("--per-request", type=float, default=2.0,
                        help="at most this many kills (and stalls) per answered request")
    parser.add_argument("--max-minutes", type=float, default=0.0,
                        help="start no new round after this long (0: no limit)")
    parser.add_argument("--first-round", type=int, default=0,
                        help="start the protocol x variant cycle here (15: Redis restarts)")
    parser.add_argument("--out", default=None, help="write the JSON document here too")
    args = parser.parse_args(argv)
    protocols = [p for p in args.protocols.split(",") if p]
    for name in protocols:
        if name not in SAFE + ALSO:
            parser.error(f"unknown or not exactly-once protocol '{name}'; valid: {SAFE + ALSO}")
    if args.stall_interval > 0 and args.stall_s <= args.lease:
        parser.error(f"--stall-s {args.stall_s} must exceed --lease {args.lease}")
    rounds, totals = [], dict(kills=0, stalls=0, redis_restarts=0, gc_runs=0, collected=0,
                              requests=0, attempts=0, client_retries=0, violations=0,
                              unfinished=0, completed_after_deadline=0, unsettled=0)
    start = time.monotonic()
    variants = [dict(shared=True, keyed=1.0), dict(shared=False, keyed=0.5),
                dict(shared=True, keyed=0.5), dict(shared=True, keyed=0.5, redis_restarts=2)]
    with RedisServer(aof="always") as server, Platform(
            server.url, workers=4, lease_s=args.lease, retention_s=args.lease) as platform:
        index = args.first_round
        def faults() -> int:
            return totals["kills"] + totals["stalls"] + totals["redis_restarts"]

        while (totals["kills"] < args.kills or totals["stalls"] < args.stalls
               or faults() < args.faults):
            if args.max_minutes and time.monotonic() - start > 60 * args.max_minutes:
                print("time budget spent: stopping before the targets", file=sys.stderr)
                break
            protocol = protocols[index % len(protocols)]
            variant = variants[(index // len(protocols)) % len(variants)]
            if args.restart_every > 0:
                variant = {**{k: v for k, v in variant.items() if k != "redis_restarts"},
                           "redis_restarts": args.restarts_per_round
                           if index % args.restart_every == args.restart_every - 1 else 0}
            cfg = ChaosConfig(protocol=protocol, requests=args.requests, accounts=8,
                              kill_interval_s=args.kill_interval, call_timeout_s=10.0,
                              stall_interval_s=args.stall_interval, stall_s=args.stall_s,
                              stallers=args.stallers, max_kills_per_request=args.per_request,
                              gc_interval_s=args.gc_interval, seed=index, **variant)
            report = run_chaos(cfg, server, platform).to_dict()
            report.update(round=index, **{k: v for k, v in variant.items()
                                          if k != "redis_restarts"})
            rounds.append(report)
            for key in totals:
                totals[key] += int(report[key])
            print(f"round {index:3d} {protocol:8s} {variant} kills={report['kills']} "
                  f"stalls={report['stalls']} restarts={report['redis_restarts']} "
                  f"gc={report['gc_runs']}/{report['collected']} "
                  f"violations={report['violations']} unfinished={report['unfinished']} "
                  f"completed-after-deadline={report['completed_after_deadline']} "
                  f"unsettled={report['unsettled']} "
                  f"total kills={totals['kills']} stalls={totals['stalls']} "
                  f"restarts={totals['redis_restarts']} faults={faults()} "
                  f"violations={totals['violations']} {time.monotonic() - start:.0f} s",
                  file=sys.stderr, flush=True)
            index += 1
    per_protocol = {p: dict(kills=sum(r["kills"] for r in rounds if r["protocol"] == p),
                            stalls=sum(r["stalls"] for r in rounds if r["protocol"] == p),
                            collected=sum(r["collected"] for r in rounds
                                          if r["protocol"] == p),
                            violations=sum(r["violations"] for r in rounds
                                           if r["protocol"] == p),
                            rounds=sum(r["protocol"] == p for r in rounds))
                    for p in protocols}
    totals["faults"] = totals["kills"] + totals["stalls"] + totals["redis_restarts"]
    document = dict(totals=totals, per_protocol=per_protocol,
                    duration_s=round(time.monotonic() - start, 1), rounds=rounds)
    text = json.dumps(document, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    return 1 if totals["violations"] or totals["unfinished"] else 0


if __name__ == "__main__":
    sys.exit(main())
