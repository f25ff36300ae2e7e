"""Fault injection from outside the platform: concurrent bank clients, random SIGKILLs of worker
processes, Redis SIGKILL + restart, client retries with and without an idempotency key
(Arcus, paper 12), worker stalls (SIGSTOP past the lease, then SIGCONT) and log GC at the shortest
retention allowed.

This is the harness the exactly-once claims are checked with; unlike the seeded crash points of
:mod:`schedlab.arcus.runtime` (which sit at the protocol's own step boundaries), the kills here
land at arbitrary moments: inside a Lua round trip, between a reply and its acknowledgement,
during a redelivery, while a worker is starting. The invariants are read straight from Redis
(:func:`schedlab.arcus.policies.final_state`):

* **sum** - the balance sum equals the initial sum (no lost or duplicated debit/credit);
* **journal** - each account's balance equals its initial balance plus the deltas in its journal
  (a stale read or a lost update breaks this), and every journal entry appears exactly once;
* **markers** - every request leg's done-marker is exactly 1 (0: lost, 2: applied twice), and
  every leg has exactly one journal entry per account it touched;
* **results** - a retry with the same idempotency key after the request finished returns the
  same result as the first answer.

Workload: ``clients`` threads, each issuing ``requests`` transfers. A share ``saga`` are sagas
(``bank_saga``: the debit and the credit are child invocations on other workers), the rest
``bank_transfer`` (both accounts in one instance). ``shared=True`` lets every client touch every
account (the concurrency-control test: it needs the per-key serialisation that ``bank_*``
declare); ``shared=False`` gives each client its own accounts. A share ``keyed`` of requests
carries an idempotency key (a failed call is retried with the same key); the others are retried
without one, i.e. as a new request (each attempt is then its own leg with its own marker, and
all of them must complete exactly once).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from redis import RedisError

from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import final_state, load_state, protocol_class
from schedlab.arcus.runtime import InvocationError
from schedlab.arcus.store import RedisServer
from schedlab.core.errors import ConfigError, MissingServiceError

INITIAL_BALANCE = 1000


@dataclass
class ChaosConfig:
    protocol: str = "arcus"
    clients: int = 4
    requests: int = 25  # per client
    accounts: int = 8
    shared: bool = True
    saga: float = 0.5
    keyed: float = 1.0
    kill_interval_s: float = 0.05  # mean gap between worker SIGKILLs (0: none)
    #: at most this many kills per answered request (so that a loaded machine, where requests
    #: slow down, sees proportionally fewer kills instead of a livelock of retries)
    max_kills_per_request: float = 2.0
    min_kills: int = 0  # clients keep issuing requests (up to 20x) until this many kills
    min_stalls: int = 0  # ... and this many stalls (a fast machine finishes before they come)
    # (and until every Redis restart is done)
    redis_restarts: int = 0  # Redis SIGKILL + restart during the run
    redis_down_s: float = 0.3
    call_timeout_s: float = 10.0  # a client gives up waiting and retries after this
    settle_s: float = 60.0  # after the clients, how long to wait for abandoned attempts
    seed: int = 0
    workers: int = 4
    lease_s: float = 2.0
    locks: bool = True  # False: the same functions without declared keys (control run)
    http: bool = False  # clients go through the HTTP gateway (Idempotency-Key header)
    #: mean gap between stalls (0: none): a random worker is SIGSTOPped for ``stall_s`` (longer
    #: than the platform's lease, so its messages are redelivered and run elsewhere) and then
    #: SIGCONTinued, when the execution it was in resumes as if nothing happened
    stall_interval_s: float = 0.0
    stall_s: float = 1.5
    stallers: int = 1  # threads stalling workers independently (several stalled at once)
    #: log GC every ``gc_interval_s`` (0: only the platform's own) at the shortest retention the
    #: platform allows (its lease): the stalled executions above resume after their logs went
    gc_interval_s: float = 0.0

    def validate(self) -> None:
        protocol_class(self.protocol)
        if self.clients < 1 or self.requests < 1 or self.workers < 2:
            raise ConfigError("need >= 1 client, >= 1 request and >= 2 workers",
                              field="clients")
        if self.accounts < (2 if self.shared else 2 * self.clients):
            raise ConfigError("need 2 accounts per client (disjoint) or 2 in all (shared)",
                              field="accounts")
        for name in ("saga", "keyed"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError("must be in [0, 1]", field=name)
        if self.stall_interval_s < 0 or self.gc_interval_s < 0:
            raise ConfigError("must be >= 0", field="stall_interval_s")
        if not 1 <= self.stallers < self.workers:
            raise ConfigError(f"must be in [1, workers - 1 = {self.workers - 1}]",
                              field="stallers")


@dataclass
class ChaosReport:
    protocol: str
    requests: int = 0
    attempts: int = 0
    client_retries: int = 0
    kills: int = 0
    redis_restarts: int = 0
    redelivered: int = 0
    stalls: int = 0  # SIGSTOP + SIGCONT of a worker, longer than its lease
    gc_runs: int = 0
    collected: int = 0  # instance logs deleted by those GC runs
    duration_s: float = 0.0
    sum_delta: int = 0
    journal_mismatches: int = 0  # accounts whose balance != initial + journal
    duplicate_entries: int = 0  # journal entries present more than once
    missing_entries: int = 0  # legs with no journal entry on an account they touched
    marker_violations: int = 0  # markers != 1
    unfinished: int = 0  # attempts still not finished after settle_s (and a keyed retry)
    #: required legs unfinished at the deadline that a retry with their key then completed
    completed_after_deadline: int = 0
    #: 1 if the platform was still busy when the invariants were read (after 5x settle_s):
    #: the figures may then count transfers in flight
    unsettled: int = 0
    result_mismatches: int = 0  # same key, different answer
    errors: list[str] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return (abs(self.sum_delta) + self.journal_mismatches + self.duplicate_entries
                + self.missing_entries + self.marker_violations + self.result_mismatches)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["violations"] = self.violations
        out["errors"] = self.errors[:5]
        return out


@dataclass
class _Leg:
    marker: str
    touches: dict[str, int]  # account -> delta
    #: must have run exactly once: keyed requests (retried until answered) and answered
    #: attempts; a no-key attempt whose call failed may never have been accepted (0 or 1)
    required: bool = True
    #: a keyed request's (function, argument, key): a client that did not give up at the
    #: round's deadline retries it with that key (see ``_check``)
    request: tuple[str, Any, str] | None = None


class _Killer(threading.Thread):
    """SIGKILLs a random live worker at exponential intervals."""

    def __init__(self, platform: Platform, mean_s: float, rng: random.Random,
                 report: ChaosReport, per_request: float) -> None:
        super().__init__(daemon=True, name="chaos-killer")
        self.platform, self.mean_s, self.rng = platform, mean_s, rng
        self.report, self.per_request = report, per_request
        self.stop = threading.Event()
        self.kills = 0

    def run(self) -> None:
        while not self.stop.wait(self.rng.expovariate(1.0 / self.mean_s)):
            if self.kills >= self.per_request * (self.report.requests + 1):
                continue
            pids = self.platform.worker_pids()
            if pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.rng.choice(pids), signal.SIGKILL)
                    self.kills += 1


class _Staller(threading.Thread):
    """SIGSTOPs a random live worker for ``stall_s`` (past its lease), then SIGCONTs it."""

    def __init__(self, platform: Platform, cfg: ChaosConfig, rng: random.Random,
                 report: ChaosReport, stalled: set[int] | None = None,
                 lock: threading.Lock | None = None) -> None:
        super().__init__(daemon=True, name="chaos-staller")
        self.platform, self.cfg, self.rng, self.report = platform, cfg, rng, report
        self.stop = threading.Event()
        self.stalls = 0
        # shared by the stallers of one round: who is stopped now, and every stall so far
        self.stalled = stalled if stalled is not None else set()
        self.lock = lock or threading.Lock()
        self.total = [0]

    def run(self) -> None:
        while not self.stop.wait(self.rng.expovariate(1.0 / self.cfg.stall_interval_s)):
            if self.total[0] >= self.cfg.max_kills_per_request * (self.report.requests + 1):
                continue
            with self.lock:
                pids = [p for p in self.platform.worker_pids() if p not in self.stalled]
                if not pids:
                    continue
                pid = self.rng.choice(pids)
                try:
                    os.kill(pid, signal.SIGSTOP)
                except ProcessLookupError:
                    continue
                self.stalled.add(pid)
                self.total[0] += 1
            self.stalls += 1
            self.stop.wait(self.cfg.stall_s)  # cut short at the end; always continued below
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            with self.lock:
                self.stalled.discard(pid)


class _Collector(threading.Thread):
    """Runs log GC on the chaos namespace at the shortest retention allowed (the lease)."""

    def __init__(self, platform: Platform, ns: str, every_s: float) -> None:
        super().__init__(daemon=True, name="chaos-gc")
        self.platform, self.ns, self.every_s = platform, ns, every_s
        self.stop = threading.Event()
        self.runs = self.collected = 0

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            try:
                self.collected += self.platform.gc(self.ns, retention_s=self.platform.lease_s)
                self.runs += 1
            except RedisError:  # a Redis restart: GC is retried at the next tick
                continue


class _HttpClient:
    """A client of the HTTP gateway (in-process ASGI transport): 503/504 mean retry."""

    def __init__(self, platform: Platform) -> None:
        from fastapi.testclient import TestClient

        from schedlab.arcus.gateway import make_app

        self.client = TestClient(make_app(platform))

    def invoke(self, fn: str, arg: Any, *, protocol: str, ns: str,
               idempotency_key: str | None, timeout: float) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        answer = self.client.post(f"/invoke/{fn}", json={"arg": arg, "protocol": protocol,
                                                          "ns": ns}, headers=headers)
        if answer.status_code in (503, 504):
            raise MissingServiceError(f"HTTP {answer.status_code}: {answer.text[:120]}")
        if answer.status_code != 200:
            raise InvocationError(f"HTTP {answer.status_code}: {answer.text[:120]}")
        return answer.json()


def _accounts_for(cfg: ChaosConfig, client: int) -> list[str]:
    if cfg.shared:
        return [f"acct:{a}" for a in range(cfg.accounts)]
    per = cfg.accounts // cfg.clients
    return [f"acct:{client * per + a}" for a in range(per)]


def _client(platform: Platform, cfg: ChaosConfig, ns: str, client: int, legs: list[_Leg],
            answers: dict[str, Any], report: ChaosReport, lock: threading.Lock,
            deadline: float, killer: _Killer | None, staller: _Staller | None = None) -> None:
    rng = random.Random(cfg.seed * 1000 + client)
    mine = _accounts_for(cfg, client)
    caller: Any = _HttpClient(platform) if cfg.http else platform
    i = -1
    while True:
        i += 1
        wanted = ((killer is not None and killer.kills < cfg.min_kills)
                  or (staller is not None and staller.total[0] < cfg.min_stalls)
                  or report.redis_restarts < cfg.redis_restarts)
        if i >= cfg.requests and not (wanted and i < 20 * cfg.requests):
            break
        src, dst = rng.sample(mine, 2)
        amount = rng.randint(1, 50)
        saga = rng.random() < cfg.saga
        keyed = rng.random() < cfg.keyed
        rid = f"c{client}r{i}"
        attempt = 0
        while time.monotonic() < deadline:
            tag = rid if keyed else f"{rid}a{attempt}"
            arg = {"src": src, "dst": dst, "amount": amount, "id": tag}
            fn = "bank_saga" if saga else "bank_transfer"
            if not cfg.locks:
                fn = fn if saga else "bank_transfer_unlocked"
                arg["locks"] = False
            with lock:
                report.attempts += 1
                if attempt == 0 or not keyed:  # a new leg set: each no-key attempt is one
                    request = (fn, dict(arg), rid) if keyed else None
                    if saga:
                        new = [_Leg(f"{tag}-d", {src: -amount}, keyed, request),
                               _Leg(f"{tag}-c", {dst: amount}, keyed, request)]
                    else:
                        new = [_Leg(tag, {src: -amount, dst: amount}, keyed, request)]
                    legs.extend(new)
            try:
                reply = caller.invoke(fn, arg, protocol=cfg.protocol, ns=ns,
                                      idempotency_key=rid if keyed else None,
                                      timeout=cfg.call_timeout_s)
                for leg in new:
                    leg.required = True  # answered: it ran
            except (MissingServiceError, InvocationError) as exc:
                with lock:
                    report.client_retries += 1
                    if len(report.errors) < 20:
                        report.errors.append(f"{rid}: {exc}"[:200])
                attempt += 1
                time.sleep(0.05 + 0.1 * rng.random())
                continue
            if keyed:
                answers[rid] = (fn, arg, reply["value"])
            break
        with lock:
            report.requests += 1


def _idle(platform: Platform) -> bool:
    """No message in any worker queue or processing list of ``platform`` (nothing in flight)."""
    try:
        for pattern in (f"{platform.plat}:q:*", f"{platform.plat}:proc:*"):
            for key in platform.client.scan_iter(pattern, count=1000):
                if platform.client.llen(key):
                    return False
    except RedisError:
        return False
    return True


def _check(platform: Platform, cfg: ChaosConfig, ns: str, legs: list[_Leg],
           answers: dict[str, Any], report: ChaosReport) -> None:
    client = platform.client
    accounts = sorted({a for c in range(cfg.clients) for a in _accounts_for(cfg, c)})
    markers = [f"done:{leg.marker}" for leg in legs]
    journals = [f"journal:{a}" for a in accounts]
    required = [f"done:{leg.marker}" for leg in legs if leg.required]
    keys = [*accounts, *journals, *markers]
    deadline = time.monotonic() + cfg.settle_s
    # past ``settle_s`` the check waits on (up to 5x) while anything is still queued or being
    # processed: reading the accounts then would count transfers in flight as violations (the
    # soak's round at load ~290 reported 526 such; read once settled, its state was consistent)
    hard = time.monotonic() + 5 * cfg.settle_s
    previous, stable_since = None, time.monotonic()
    settled = False
    while True:  # abandoned attempts (no-key retries, timeouts) finish in the background
        state = final_state(cfg.protocol, client, ns, keys)
        unfinished = sum(state.get(m) is None for m in required)
        if state != previous:
            previous, stable_since = state, time.monotonic()
        # every leg that may still be running is a required one: once they are all done, only
        # replays (which write nothing) can be left; otherwise wait for a quiet second *and* an
        # idle platform (no message queued or being processed anywhere): an abandoned attempt
        # waiting for its redelivery can be quiet for a second half-way through a transfer,
        # and reading the accounts then sees a debit without its credit (issue 44 soak)
        settled = all(leg.required for leg in legs) or (
            time.monotonic() - stable_since > 1.0 and _idle(platform))
        now = time.monotonic()
        if (unfinished == 0 and settled) or now > hard or (
                now > deadline and (settled or _idle(platform))):
            break
        time.sleep(0.2)
    report.unsettled = int(not settled)
    if unfinished:
        # keyed requests still unfinished: their clients gave up at the round's deadline
        # (600 s), possibly half-way through a saga. A client that keeps its key retries; do
        # that now (faults have stopped) and count what it completes: a request that finishes
        # then was cut off by the deadline, one that does not is a real bug (still unfinished)
        pending = {leg.request[2]: leg.request for leg in legs if leg.required
                   and leg.request is not None and state.get(f"done:{leg.marker}") is None}
        for fn, arg, rid in pending.values():
            for _ in range(3):
                try:
                    platform.invoke(fn, arg, protocol=cfg.protocol, ns=ns, idempotency_key=rid,
                                    timeout=cfg.call_timeout_s * 3)
                    break
                except (MissingServiceError, InvocationError) as exc:
                    report.errors.append(f"deadline retry {rid}: {exc}"[:200])
        state = final_state(cfg.protocol, client, ns, keys)
        after = sum(state.get(m) is None for m in required)
        report.completed_after_deadline = unfinished - after
        unfinished = after
    report.unfinished = unfinished
    balances = {a: int(state.get(a) or 0) for a in accounts}
    report.sum_delta = sum(balances.values()) - INITIAL_BALANCE * len(accounts)
    entries: dict[tuple[str, str], int] = {}
    for account in accounts:
        journal = state.get(f"journal:{account}") or []
        if INITIAL_BALANCE + sum(int(delta) for _, delta in journal) != balances[account]:
            report.journal_mismatches += 1
        for marker, _ in journal:
            entries[(account, marker)] = entries.get((account, marker), 0) + 1
    report.duplicate_entries = sum(n - 1 for n in entries.values() if n > 1)
    for leg in legs:
        if state.get(f"done:{leg.marker}") not in (1, None):
            report.marker_violations += 1
        if state.get(f"done:{leg.marker}") == 1:
            report.missing_entries += sum((a, leg.marker) not in entries for a in leg.touches)
    # a retry with the same key returns the first answer and changes nothing
    rng = random.Random(cfg.seed)
    for rid in rng.sample(sorted(answers), min(10, len(answers))):
        fn, arg, first = answers[rid]
        try:
            again = platform.invoke(fn, arg, protocol=cfg.protocol, ns=ns, idempotency_key=rid,
                                    timeout=cfg.call_timeout_s)["value"]
        except (MissingServiceError, InvocationError) as exc:
            report.errors.append(f"recheck {rid}: {exc}"[:200])
            continue
        report.result_mismatches += again != first


def run_chaos(cfg: ChaosConfig, redis: RedisServer, platform: Platform) -> ChaosReport:
    """Run one chaos round on a started ``platform`` over ``redis`` (AOF on for restarts)."""
    cfg.validate()
    if cfg.redis_restarts and redis.aof == "off":
        raise ConfigError("Redis restarts need persistence (RedisServer(aof='always'))",
                          field="redis_restarts")
    rng = random.Random(cfg.seed)
    ns = f"chaos-{cfg.protocol}-{cfg.seed}-{random.Random().getrandbits(32):08x}"
    accounts = sorted({a for c in range(cfg.clients) for a in _accounts_for(cfg, c)})
    load_state(cfg.protocol, platform.client, ns, {a: INITIAL_BALANCE for a in accounts})
    report = ChaosReport(cfg.protocol)
    legs: list[_Leg] = []
    answers: dict[str, Any] = {}
    lock = threading.Lock()
    redelivered_before = platform.redelivered
    killer = (_Killer(platform, cfg.kill_interval_s, rng, report, cfg.max_kills_per_request)
              if cfg.kill_interval_s > 0 else None)
    stallers: list[_Staller] = []
    if cfg.stall_interval_s > 0:
        stalled: set[int] = set()
        stall_lock = threading.Lock()
        for index in range(cfg.stallers):
            stallers.append(_Staller(platform, cfg, random.Random(cfg.seed + 7 + 1000 * index),
                                     report, stalled, stall_lock))
        for one in stallers[1:]:
            one.total = stallers[0].total  # one cap on stalls per answered request
    staller = stallers[0] if stallers else None
    collector = _Collector(platform, ns, cfg.gc_interval_s) if cfg.gc_interval_s > 0 else None
    helpers = [h for h in (*stallers, collector) if h is not None]
    start = time.monotonic()
    deadline = start + 600.0
    threads = [threading.Thread(target=_client, daemon=True, name=f"chaos-client-{c}",
                                args=(platform, cfg, ns, c, legs, answers, report, lock,
                                      deadline, killer, staller))
               for c in range(cfg.clients)]
    if killer is not None:
        killer.start()
    for helper in helpers:
        helper.start()
    for thread in threads:
        thread.start()
    restarts = 0
    while any(t.is_alive() for t in threads):
        if restarts < cfg.redis_restarts:
            time.sleep(rng.uniform(0.2, 0.8))
            if not any(t.is_alive() for t in threads):
                break
            redis.kill()
            time.sleep(cfg.redis_down_s)
            redis.restart()
            restarts += 1
            report.redis_restarts = restarts
        else:
            time.sleep(0.05)
    for thread in threads:
        thread.join()
    if killer is not None:
        killer.stop.set()
        killer.join()
        report.kills = killer.kills
    for helper in helpers:
        helper.stop.set()
        helper.join()
    report.stalls = sum(one.stalls for one in stallers)
    if collector is not None:
        report.gc_runs, report.collected = collector.runs, collector.collected
    report.redis_restarts = restarts
    _check(platform, cfg, ns, legs, answers, report)
    report.duration_s = time.monotonic() - start
    report.redelivered = platform.redelivered - redelivered_before
    return report
