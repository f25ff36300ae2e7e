"""Headline experiments for Arcus (paper 12), registered with ``schedlab reproduce arcus``.

Both start a private redis-server and a 4-worker platform, run seeded workloads under every
protocol, and turn the measurements into claims:

* ``state_io_latency`` - read/write latency on the rw microbenchmark and end-to-end latency on
  hotel, movie and retwis, on loopback and with an injected storage round trip (``rtt_ms`` and
  ``rtt_max_ms``); targets are the paper's figures (-80.4% read, -87.9% write, -60.3%
  end-to-end vs Halfmoon). The write yardstick is the *durable* write latency: from
  ``ctx.write`` until the value is in Redis (for Arcus's write-behind that includes the wait for
  the background flush or for ``finish``), never the time to append to an in-memory queue;
* ``exactly_once`` - random SIGKILLs during ledger and hotel workflows; every logging protocol
  must end with zero lost/duplicated writes and zero inconsistent reads (required), and unsafe
  direct access must show violations in the same harness.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import polars as pl

from schedlab.arcus.bench import run_bench
from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import PROTOCOLS
from schedlab.arcus.store import RedisServer, redis_description
from schedlab.arcus.workloads import APPS, make_workload
from schedlab.core import Claim, Figure, Result, register


@contextlib.contextmanager
def platform(workers: int = 4) -> Iterator[Platform]:
    """A private Redis plus a warmed-up platform on it, both torn down afterwards.

    Warm-up (connections, script loading, thread pools in every worker) is not what the paper
    measures, so a few unrecorded requests per protocol run first.
    """
    with RedisServer() as server, Platform(server.url, workers=workers) as running:
        for protocol in PROTOCOLS:
            run_bench(running, make_workload("ledger", 2 * workers, 0), protocol)
        yield running


def _reduction(frame: pl.DataFrame, metric: str, workloads: tuple[str, ...], rtt: float) -> float:
    """Mean over ``workloads`` of 100 * (1 - arcus / halfmoon) for ``metric``."""
    values = []
    for workload in workloads:
        rows = frame.filter((pl.col("workload") == workload) & (pl.col("rtt_ms") == rtt))
        ours = rows.filter(pl.col("protocol") == "arcus")[metric].mean()
        theirs = rows.filter(pl.col("protocol") == "halfmoon")[metric].mean()
        if ours is not None and theirs:
            values.append(100.0 * (1.0 - ours / theirs))
    return sum(values) / len(values) if values else float("nan")


def _head_to_head(frame: pl.DataFrame, metric: str, workloads: tuple[str, ...],
                  rtt: float) -> dict:
    """Claim fields with Arcus's and Halfmoon's own figures (means over ``workloads``)."""
    rows = frame.filter(pl.col("workload").is_in(workloads) & (pl.col("rtt_ms") == rtt))
    ours = rows.filter(pl.col("protocol") == "arcus")[metric].mean()
    theirs = rows.filter(pl.col("protocol") == "halfmoon")[metric].mean()
    nan = float("nan")
    return dict(baseline="Halfmoon (one-round-trip log appends)", lower_is_better=True,
                our_figure=nan if ours is None else float(ours),
                figure_metric=metric,
                peer_figure=nan if theirs is None else float(theirs))


def _plot(frame: pl.DataFrame) -> list[Figure]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loop = frame.filter(pl.col("rtt_ms") == 0.0)
    names = list(PROTOCOLS)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    micro = loop.filter(pl.col("workload") == "rw")
    for ax, metric in zip(axes, ("read_p50_us", "write_p50_us"), strict=True):
        values = [micro.filter(pl.col("protocol") == n)[metric].mean() or 0.0 for n in names]
        ax.bar(names, values, color=["tab:green" if n == "arcus" else "tab:gray" for n in names])
        ax.set_ylabel(metric.replace("_", " "))
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle("rw microbenchmark, loopback Redis: per-operation latency")
    latency = Figure.from_matplotlib(fig, "op-latency", "read and write p50 by protocol")
    fig, ax = plt.subplots(figsize=(10, 3.6))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        values = []
        for app in APPS:
            cell = frame.filter((pl.col("workload") == app) & (pl.col("protocol") == name)
                                & (pl.col("rtt_ms") == frame["rtt_ms"].max()))
            values.append(cell["e2e_mean_ms"].mean() or 0.0)
        ax.bar([j + i * width for j in range(len(APPS))], values, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(APPS))], APPS)
    ax.set_ylabel("mean end-to-end latency (ms)")
    ax.set_title(f"applications, injected storage RTT {frame['rtt_ms'].max()} ms")
    ax.legend(fontsize=7, ncols=3)
    apps = Figure.from_matplotlib(fig, "app-latency", "end-to-end latency by app and protocol")
    return [latency, apps]


@register("arcus", quick=dict(requests=10, rtt_ms=0.5, rtt_max_ms=1.0),
          full=dict(requests=200, rtt_ms=0.5, rtt_max_ms=1.0))
def state_io_latency(requests: int, rtt_ms: float, seed: int, rtt_max_ms: float = 1.0) -> Result:
    """Arcus cuts read, durable-write and end-to-end latency against Halfmoon's state I/O.

    The Halfmoon baseline appends to its log in one round trip, as Halfmoon does (issue 44:
    it used to spend two, which inflated every gain); each metric is compared at every delay."""
    rows = []
    rtts = sorted({0.0, rtt_ms, rtt_max_ms})
    with platform() as running:
        for rtt in rtts:
            for name in ("rw", *APPS):
                workload = make_workload(name, requests, seed, read_ratio=0.5, keys=16)
                for protocol in PROTOCOLS:
                    if rtt > 0 and protocol not in ("arcus", "halfmoon", "unsafe"):
                        continue  # the delay sweep compares the method with its main baseline
                    rows.append(run_bench(running, workload, protocol, rtt_ms=rtt, seed=seed))
    frame = pl.DataFrame(rows)
    claims = []
    for rtt in rtts:
        where = "loopback" if rtt == 0 else f"{rtt} ms injected storage RTT"
        claims += [
            Claim(f"Arcus lowers read latency vs Halfmoon (one-round-trip appends; rw micro, "
                  f"{where}, p50 of ctx.read; seeded generator)",
                  metric="read latency reduction %",
                  measured=_reduction(frame, "read_p50_us", ("rw",), rtt), target=80.4,
                  paper_figure="-80.4%", **_head_to_head(frame, "read_p50_us", ("rw",), rtt)),
            Claim(f"Arcus lowers durable write latency vs Halfmoon (one-round-trip appends; rw "
                  f"micro, {where}, p50 from ctx.write until the value is in Redis, incl. the "
                  "wait for the flush or finish; seeded generator)",
                  metric="durable write latency reduction %",
                  measured=_reduction(frame, "write_durable_p50_us", ("rw",), rtt),
                  target=87.9, paper_figure="-87.9%",
                  **_head_to_head(frame, "write_durable_p50_us", ("rw",), rtt)),
            Claim(f"Arcus lowers durable write latency vs Halfmoon, writes not in their "
                  f"execution's first round trip (rw micro, {where}; Halfmoon's first round "
                  "trip is always its init record, Arcus's is often a write, and a first round "
                  "trip costs about twice a later one here whatever it carries; seeded "
                  "generator)",
                  metric="durable write latency reduction %, position-matched",
                  measured=_reduction(frame, "write_durable_later_p50_us", ("rw",), rtt),
                  target=87.9, paper_figure="-87.9%",
                  **_head_to_head(frame, "write_durable_later_p50_us", ("rw",), rtt)),
            Claim(f"Arcus lowers end-to-end latency on hotel/movie/retwis vs Halfmoon "
                  f"(one-round-trip appends; {where}, mean request latency incl. the durable "
                  "finish, mean of the 3 apps; seeded generators)",
                  metric="e2e latency reduction %",
                  measured=_reduction(frame, "e2e_mean_ms", APPS, rtt), target=60.3,
                  paper_figure="-60.3%", **_head_to_head(frame, "e2e_mean_ms", APPS, rtt)),
        ]
    return Result(frame, claims=claims, figures=_plot(frame), ran_with=redis_description(),
                  data="generated",
                  notes="Sequential requests, 4 worker processes, Redis on 127.0.0.1; "
                        "write_p50_us (acknowledged to the function) is in the frame but is "
                        "not a claim: Arcus acknowledges before the write is durable.")


@register("arcus", quick=dict(requests=8, crash_rate=0.04, chaos_requests=6),
          full=dict(requests=60, crash_rate=0.04, chaos_requests=40))
def exactly_once(requests: int, crash_rate: float, seed: int, chaos_requests: int = 6) -> Result:
    """Under random worker SIGKILLs, logging protocols lose and duplicate nothing; unsafe does.

    Two harnesses: seeded crash points at the protocol's step boundaries (sequential requests,
    checked against the single-execution oracle), and outside SIGKILLs at arbitrary moments
    with 4 concurrent clients on shared bank accounts (transfers and sagas across workers;
    invariants read from Redis: balance sum, per-account journals, done-markers == 1).
    """
    from schedlab.arcus.chaos import ChaosConfig, run_chaos

    rows, chaos = [], []
    with RedisServer() as server, Platform(server.url, workers=4, lease_s=1.0) as running:
        for protocol in PROTOCOLS:
            run_bench(running, make_workload("ledger", 8, 0), protocol)  # warm-up
        for name in ("ledger", "hotel"):
            workload = make_workload(name, requests, seed)
            for protocol in PROTOCOLS:
                rows.append(run_bench(running, workload, protocol, crash_rate=crash_rate,
                                      seed=seed))
        for protocol in PROTOCOLS:
            report = run_chaos(ChaosConfig(protocol=protocol, clients=4,
                                           requests=chaos_requests, accounts=6,
                                           kill_interval_s=0.03, seed=seed), server, running)
            found = report.to_dict()
            chaos.append({k: found[k] for k in ("protocol", "kills", "requests", "violations",
                                                "unfinished", "sum_delta")})
    stalled = []  # issue 44: stalls past the lease while GC runs at retention == lease
    with RedisServer() as server, Platform(server.url, workers=4, lease_s=0.5,
                                           retention_s=0.5) as running:
        for protocol in ("arcus", "halfmoon"):
            report = run_chaos(ChaosConfig(protocol=protocol, clients=4,
                                           requests=chaos_requests, accounts=6,
                                           kill_interval_s=0.1, stall_interval_s=0.3,
                                           stall_s=0.8, gc_interval_s=0.2, seed=seed,
                                           call_timeout_s=5.0), server, running)
            found = report.to_dict()
            stalled.append({k: found[k] for k in ("protocol", "kills", "stalls", "gc_runs",
                                                  "collected", "violations", "unfinished")})
    frame = pl.DataFrame(rows)
    chaos_frame = pl.DataFrame(chaos)
    safe = frame.filter(pl.col("protocol") != "unsafe")
    unsafe = frame.filter(pl.col("protocol") == "unsafe")
    safe_chaos = chaos_frame.filter(pl.col("protocol") != "unsafe")
    unsafe_chaos = chaos_frame.filter(pl.col("protocol") == "unsafe")
    claims = [
        Claim("Exactly-once protocols: no lost/duplicated write, no inconsistent read (seeded "
              "crash points, sequential ledger/hotel requests vs the single-execution oracle)",
              metric="violations (all logging protocols)", measured=float(safe["violations"].sum()),
              target=0.0, comparison="==", paper_figure="0", required=True, kind="sanity"),
        Claim("Exactly-once with 4 concurrent clients on shared accounts and outside SIGKILLs "
              "at arbitrary moments (transfers + sagas; invariants read from Redis)",
              metric="invariant violations + unfinished (all logging protocols)",
              measured=float(safe_chaos["violations"].sum() + safe_chaos["unfinished"].sum()),
              target=0.0, comparison="==", paper_figure="0", required=True,
              kind="sanity"),
        Claim("Exactly-once with workers stalled (SIGSTOP) past their lease while log GC runs "
              "at retention == lease, plus SIGKILLs (arcus, halfmoon; 4 clients, shared "
              "accounts; invariants read from Redis)",
              metric="invariant violations + unfinished (stall + GC harness)",
              measured=float(sum(r["violations"] + r["unfinished"] for r in stalled)),
              target=0.0, comparison="==", paper_figure="0", required=True,
              kind="sanity"),
        Claim("Unsafe direct access violates exactly-once in the same harnesses (checker has "
              "teeth)", metric="violations (unsafe)",
              measured=float(unsafe["violations"].sum() + unsafe_chaos["violations"].sum()),
              target=0.0, comparison=">", paper_figure="> 0", kind="sanity"),
    ]
    kills = int(chaos_frame["kills"].sum())
    return Result(frame, claims=claims, ran_with=redis_description(), data="generated",
                  notes=f"{int(frame['crashes'].sum())} injected crashes at crash points, "
                        f"{kills} outside SIGKILLs in the concurrent-client harness; stall + GC "
                        f"harness: {sum(r['stalls'] for r in stalled)} stalls, "
                        f"{sum(r['kills'] for r in stalled)} kills, "
                        f"{sum(r['collected'] for r in stalled)} logs collected under them.")
