"""Seeded request streams for the evaluation, and an in-process reference executor (paper 12).

Workloads: ``single-read``, ``single-write``, ``rw`` (two-stage workflow with a read-ratio knob),
the three applications ``hotel``, ``movie``, ``retwis``, and ``ledger`` (counters and
append-only lists: the sharpest exactly-once check). Users bring their own as a JSON-lines file
of ``{"fn": ..., "arg": {...}}`` records (:func:`read_requests`).

:func:`reference_run` executes a workload in this process on a dict with no storage, no
protocol and no crashes: it is the oracle the exactly-once checker compares against, and it
counts reads and writes per key (the profile Halfmoon-style uses to pick each object's mode).
"""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schedlab.arcus.apps import FUNCTIONS
from schedlab.arcus.iobase import dumps
from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.core.io import json_record, parse_lines

Request = tuple[str, Any]


@dataclass
class Workload:
    """Initial state plus an ordered list of requests ``(function, argument)``."""

    name: str
    initial: dict[str, Any]
    requests: list[Request]
    meta: dict[str, Any] = field(default_factory=dict)


def _rw(n: int, rng: random.Random, read_ratio: float, keys: int, payload: int = 0) -> Workload:
    pad = {"pad": "x" * payload} if payload > 0 else {}
    requests = []
    for i in range(n):
        chosen = rng.sample(range(keys), 4)
        stages = []
        for stage in range(2):
            ops = []
            for k in chosen:
                if rng.random() < read_ratio:
                    ops.append(["r", f"k{k}"])
                else:
                    ops.append(["w", f"k{k}", {"req": i, "stage": stage, **pad}])
            stages.append(ops)
        requests.append(("chain", {"stages": stages}))
    initial = {f"k{k}": {"req": -1} for k in range(keys)}
    return Workload("rw", initial, requests, {"read_ratio": read_ratio, "payload": payload})


def _single(n: int, rng: random.Random, write: bool, keys: int, payload: int = 0) -> Workload:
    if write:
        requests = [("write", {"key": f"k{rng.randrange(keys)}",
                               "value": {"i": i, "pad": "x" * payload} if payload > 0 else i})
                    for i in range(n)]
    else:
        requests = [("read", {"key": f"k{rng.randrange(keys)}"}) for _ in range(n)]
    name = "single-write" if write else "single-read"
    return Workload(name, {f"k{k}": 0 for k in range(keys)}, requests)


def _hotel(n: int, rng: random.Random) -> Workload:
    hotels, users = 12, 30
    initial: dict[str, Any] = {f"hotel:{h}:avail": rng.randint(2, 6) for h in range(hotels)}
    initial.update({f"hotel:{h}:rate": 80 + 10 * h for h in range(hotels)})
    initial.update({f"user:{u}:profile": {"name": f"u{u}"} for u in range(users)})
    requests: list[Request] = []
    for i in range(n):
        if rng.random() < 0.6:
            requests.append(("hotel_search", {"hotels": rng.sample(range(hotels), 3)}))
        else:
            requests.append(("hotel_reserve", {"hotel": rng.randrange(hotels),
                                               "user": rng.randrange(users), "id": i}))
    return Workload("hotel", initial, requests)


def _movie(n: int, rng: random.Random) -> Workload:
    movies, users = 8, 30
    initial: dict[str, Any] = {f"movie:{m}:info": {"title": f"m{m}"} for m in range(movies)}
    requests: list[Request] = []
    for _ in range(n):
        movie = rng.randrange(movies)
        if rng.random() < 0.5:
            requests.append(("compose_review", {"movie": movie, "user": rng.randrange(users),
                                                "rating": rng.randint(1, 5)}))
        else:
            requests.append(("read_reviews", {"movie": movie}))
    return Workload("movie", initial, requests)


def _retwis(n: int, rng: random.Random) -> Workload:
    users = 20
    initial: dict[str, Any] = {f"user:{u}:profile": {"name": f"u{u}"} for u in range(users)}
    initial.update({f"followers:{u}": rng.sample(range(users), 3) for u in range(users)})
    requests: list[Request] = []
    for i in range(n):
        draw, user = rng.random(), rng.randrange(users)
        if draw < 0.4:
            requests.append(("post_tweet", {"user": user, "text": f"t{i}"}))
        elif draw < 0.9:
            requests.append(("timeline", {"user": user}))
        else:
            requests.append(("follow", {"user": user, "target": rng.randrange(users)}))
    return Workload("retwis", initial, requests)


def _ledger(n: int, rng: random.Random) -> Workload:
    requests = [("ledger_flow", {"counter": f"c{rng.randrange(3)}", "list": f"l{rng.randrange(3)}",
                                 "list2": f"m{rng.randrange(3)}", "id": str(i)})
                for i in range(n)]
    return Workload("ledger", {}, requests)


WORKLOADS = ("single-read", "single-write", "rw", "hotel", "movie", "retwis", "ledger")
APPS = ("hotel", "movie", "retwis")


def make_workload(name: str, requests: int, seed: int, read_ratio: float = 0.5,
                  keys: int = 64, payload: int = 0) -> Workload:
    """A seeded workload by name (see :data:`WORKLOADS`); ``payload`` pads every value the
    ``rw`` and ``single-write`` workloads write with that many bytes."""
    if not 0.0 <= read_ratio <= 1.0:
        raise BadInputError("must be in [0, 1]", field="read_ratio")
    if requests < 1 or keys < 4:
        raise BadInputError("need at least 1 request and 4 keys", field="requests")
    if payload < 0:
        raise BadInputError("must be >= 0 bytes", field="payload")
    rng = random.Random(seed)
    builders = {
        "single-read": lambda: _single(requests, rng, False, keys),
        "single-write": lambda: _single(requests, rng, True, keys, payload),
        "rw": lambda: _rw(requests, rng, read_ratio, keys, payload),
        "hotel": lambda: _hotel(requests, rng), "movie": lambda: _movie(requests, rng),
        "retwis": lambda: _retwis(requests, rng), "ledger": lambda: _ledger(requests, rng),
    }
    if name not in builders:
        raise UnknownNameError("workload", name, WORKLOADS)
    return builders[name]()


def _parse_request(line: str, lineno: int) -> Request | None:
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    record = json_record(line, lineno)
    fn = record.get("fn")
    if not isinstance(fn, str):
        raise BadInputError("missing or non-string function name", line=lineno, field="fn")
    if fn not in FUNCTIONS:
        raise BadInputError(f"unknown function '{fn}'; valid: {', '.join(sorted(FUNCTIONS))}",
                            line=lineno, field="fn")
    if "arg" not in record:
        raise BadInputError("missing argument", line=lineno, field="arg")
    return fn, record["arg"]


def read_requests(path: str | Path, initial: dict[str, Any] | None = None) -> Workload:
    """A workload from a JSON-lines file; every bad line is a BadInputError naming file:line."""
    requests = list(parse_lines(path, _parse_request))
    if not requests:
        raise BadInputError("contains no requests", path=path)
    return Workload(Path(path).stem, dict(initial or {}), requests)


class LocalCtx:
    """``ctx`` for :func:`reference_run`: a dict, nested calls in-process, op counts per key."""

    def __init__(self, state: dict[str, Any], counts: Counter) -> None:
        self.state, self.counts = state, counts

    def read(self, key: str) -> Any:
        self.counts[("r", key)] += 1
        return copy.deepcopy(self.state.get(key))

    def write(self, key: str, value: Any) -> None:
        self.counts[("w", key)] += 1
        self.state[key] = json.loads(dumps(value))  # what a JSON store would give back

    def invoke(self, fn: str, arg: Any) -> Any:
        return json.loads(dumps(FUNCTIONS[fn](self, arg)))


@dataclass
class Reference:
    state: dict[str, Any]
    outputs: list[Any]
    read_ratio: dict[str, float]


def reference_run(workload: Workload) -> Reference:
    """Run ``workload`` sequentially in-process: the crash-free, single-execution oracle."""
    state = copy.deepcopy(workload.initial)
    counts: Counter = Counter()
    ctx = LocalCtx(state, counts)
    outputs = [ctx.invoke(fn, arg) for fn, arg in workload.requests]
    keys = {key for _, key in counts}
    ratio = {k: counts[("r", k)] / max(1, counts[("r", k)] + counts[("w", k)]) for k in keys}
    return Reference(state, outputs, ratio)
