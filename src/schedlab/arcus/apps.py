"""Functions the platform can run: micro-benchmarks and three applications (Arcus, paper 12).

The paper evaluates hotel reservation and movie review (DeathStarBench) and Retwis. Each is
ported here as small deterministic Python functions over ``ctx``: the same body runs under every
state-I/O protocol. Functions return what they read, so the exactly-once checker can compare a
crashy run's observations with a crash-free run's. Counters and append-only lists make a write
applied twice (or lost) visible in the final state.

Register your own with ``@function("name")``; worker processes import the modules named in
``Platform(modules=...)`` so they see it too. ``@function("name", keys=...)`` declares the state
keys an invocation reads and writes (argument field names, or a callable ``arg -> keys``): the
runtime then serialises invocations per key (one instance at a time holds each key, like a
Restate virtual object or a Durable Functions entity), which makes read-modify-write safe under
concurrent clients. See :mod:`schedlab.arcus.runtime`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from schedlab.core.errors import BadInputError, ConfigError

Fn = Callable[[Any, Any], Any]
KeySpec = str | Iterable[str] | Callable[[Any], Iterable[str]]

#: every function the workers can run, by name
FUNCTIONS: dict[str, Fn] = {}


def function(name: str, keys: KeySpec | None = None) -> Callable[[Fn], Fn]:
    """Register ``fn(ctx, arg)`` under ``name`` (plain functions: deterministic given reads).

    ``keys`` (optional) names the state keys one invocation owns while it runs: a field name of
    the argument (``"account"``), several (``("src", "dst")``), or a callable ``arg -> keys``.
    Invocations whose key sets overlap then run one after another (all keys are taken at once,
    so two of them cannot deadlock); a retry of the same instance, and the instance's own
    children, pass through.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError("a function name is a non-empty string", field="name")
    if keys is not None and not (callable(keys) or isinstance(keys, str | tuple | list)):
        raise ConfigError("keys must be a field name, a tuple of field names or a callable",
                          field="keys")

    def decorate(fn: Fn) -> Fn:
        fn.arcus_keys = keys  # type: ignore[attr-defined]
        FUNCTIONS[name] = fn
        return fn

    return decorate


def lock_keys(fn: Fn, arg: Any) -> list[str]:
    """The state keys ``fn`` declared for this argument (sorted, unique); [] when none."""
    spec = getattr(fn, "arcus_keys", None)
    if spec is None:
        return []
    try:
        if callable(spec):
            found = list(spec(arg))
        else:
            fields = [spec] if isinstance(spec, str) else list(spec)
            found = [arg[f] for f in fields]
    except (KeyError, TypeError, IndexError) as exc:
        raise BadInputError(f"argument {arg!r:.60} does not name the function's keys "
                            f"({type(exc).__name__}: {exc})", field="arg") from None
    keys = sorted({str(k) for k in found})
    if any(not k or "|" in k for k in keys):
        raise BadInputError(f"state keys are non-empty strings without '|', got {keys!r:.60}",
                            field="keys")
    return keys


# --- micro-benchmarks ------------------------------------------------------------------------
@function("read")
def single_read(ctx: Any, arg: dict) -> Any:
    return ctx.read(arg["key"])


@function("write")
def single_write(ctx: Any, arg: dict) -> None:
    ctx.write(arg["key"], arg["value"])


@function("ops")
def ops(ctx: Any, arg: dict) -> list:
    """Run ``[["r", key] | ["w", key, value] | ["i", key]]`` in order (i = increment)."""
    seen = []
    for op in arg["ops"]:
        if op[0] == "r":
            seen.append(ctx.read(op[1]))
        elif op[0] == "w":
            ctx.write(op[1], op[2])
        else:
            value = (ctx.read(op[1]) or 0) + 1
            ctx.write(op[1], value)
            seen.append(value)
    return seen


@function("chain")
def chain(ctx: Any, arg: dict) -> list:
    """A workflow: each stage is an ``ops`` call on another worker (dispersed invocations)."""
    return [ctx.invoke("ops", {"ops": stage}) for stage in arg["stages"]]


@function("ledger")
def ledger(ctx: Any, arg: dict) -> dict:
    """Read-modify-write a counter and append the request id: duplicates and losses show."""
    count = (ctx.read(arg["counter"]) or 0) + 1
    ctx.write(arg["counter"], count)
    entries = ctx.read(arg["list"]) or []
    ctx.write(arg["list"], [*entries, arg["id"]])
    return {"count": count, "length": len(entries) + 1}


@function("ledger_flow")
def ledger_flow(ctx: Any, arg: dict) -> list:
    """Two ledger steps on two workers plus a read of both: crash anywhere in a workflow."""
    first = ctx.invoke("ledger", {**arg, "id": f"{arg['id']}a"})
    second = ctx.invoke("ledger", {**arg, "list": arg["list2"], "id": f"{arg['id']}b"})
    return [first, second, ctx.read(arg["counter"])]


# --- hotel reservation (DeathStarBench) -------------------------------------------------------
@function("hotel_check")
def hotel_check(ctx: Any, arg: dict) -> int:
    return int(ctx.read(f"hotel:{arg['hotel']}:avail") or 0)


@function("hotel_book")
def hotel_book(ctx: Any, arg: dict) -> bool:
    avail = int(ctx.read(f"hotel:{arg['hotel']}:avail") or 0)
    if avail < 1:
        return False
    ctx.write(f"hotel:{arg['hotel']}:avail", avail - 1)
    booked = ctx.read(f"user:{arg['user']}:bookings") or []
    ctx.write(f"user:{arg['user']}:bookings", [*booked, arg["id"]])
    return True


@function("hotel_reserve")
def hotel_reserve(ctx: Any, arg: dict) -> dict:
    ctx.read(f"user:{arg['user']}:profile")
    avail = ctx.invoke("hotel_check", arg)
    booked = ctx.invoke("hotel_book", arg) if avail > 0 else False
    return {"avail": avail, "booked": booked}


@function("hotel_search")
def hotel_search(ctx: Any, arg: dict) -> list:
    rates = [ctx.read(f"hotel:{h}:rate") for h in arg["hotels"]]
    return [ctx.invoke("hotel_check", {"hotel": h}) for h in arg["hotels"][:2]] + rates


# --- movie review (DeathStarBench media service) ----------------------------------------------
@function("unique_id")
def unique_id(ctx: Any, arg: dict) -> int:
    value = int(ctx.read("review:next") or 0) + 1
    ctx.write("review:next", value)
    return value


@function("append_review")
def append_review(ctx: Any, arg: dict) -> int:
    reviews = ctx.read(arg["list"]) or []
    ctx.write(arg["list"], [*reviews, arg["review"]][-50:])
    return len(reviews) + 1


@function("compose_review")
def compose_review(ctx: Any, arg: dict) -> dict:
    ctx.read(f"movie:{arg['movie']}:info")
    review = ctx.invoke("unique_id", {})
    ctx.write(f"review:{review}", {"user": arg["user"], "rating": arg["rating"]})
    user_n = ctx.invoke("append_review", {"list": f"user:{arg['user']}:reviews", "review": review})
    movie_n = ctx.invoke("append_review", {"list": f"movie:{arg['movie']}:reviews",
                                           "review": review})
    return {"review": review, "user_reviews": user_n, "movie_reviews": movie_n}


@function("read_reviews")
def read_reviews(ctx: Any, arg: dict) -> list:
    ctx.read(f"movie:{arg['movie']}:info")
    ids = ctx.read(f"movie:{arg['movie']}:reviews") or []
    return [ctx.read(f"review:{i}") for i in ids[-3:]]


# --- Retwis (Redis's Twitter clone) ------------------------------------------------------------
@function("post_tweet")
def post_tweet(ctx: Any, arg: dict) -> int:
    tweet = int(ctx.read("tweet:next") or 0) + 1
    ctx.write("tweet:next", tweet)
    ctx.write(f"tweet:{tweet}", {"user": arg["user"], "text": arg["text"]})
    followers = ctx.read(f"followers:{arg['user']}") or []
    ctx.invoke("fanout", {"tweet": tweet, "followers": followers[:3]})
    return tweet


@function("fanout")
def fanout(ctx: Any, arg: dict) -> int:
    for follower in arg["followers"]:
        timeline = ctx.read(f"timeline:{follower}") or []
        ctx.write(f"timeline:{follower}", [*timeline, arg["tweet"]][-20:])
    return len(arg["followers"])


@function("timeline")
def timeline(ctx: Any, arg: dict) -> list:
    ctx.read(f"user:{arg['user']}:profile")
    ids = ctx.read(f"timeline:{arg['user']}") or []
    return [ctx.read(f"tweet:{t}") for t in ids[-3:]]


@function("follow")
def follow(ctx: Any, arg: dict) -> int:
    followers = ctx.read(f"followers:{arg['target']}") or []
    if arg["user"] not in followers:
        ctx.write(f"followers:{arg['target']}", [*followers, arg["user"]])
    return len(followers)


# --- bank: transfers and sagas (the fault-injection suite's workload) -------------------------
# Balances ``acct:N``, one journal per account ``journal:acct:N`` (list of [request, delta]),
# and a done-marker per request leg ``done:REQ`` that every leg increments: after any number of
# crashes and retries, the balance sum is conserved, each account's balance equals its initial
# balance plus its journal, and every marker is exactly 1.
def _post(ctx: Any, account: str, delta: int, marker: str) -> int:
    balance = int(ctx.read(account) or 0) + delta
    ctx.write(account, balance)
    journal = ctx.read(f"journal:{account}") or []
    ctx.write(f"journal:{account}", [*journal, [marker, delta]])
    return balance


def _mark(ctx: Any, marker: str) -> None:
    ctx.write(f"done:{marker}", int(ctx.read(f"done:{marker}") or 0) + 1)


@function("bank_transfer", keys=lambda arg: (arg["src"], arg["dst"], f"journal:{arg['src']}",
                                              f"journal:{arg['dst']}", f"done:{arg['id']}"))
def bank_transfer(ctx: Any, arg: dict) -> dict:
    """Move ``amount`` from ``src`` to ``dst`` in one instance (a transaction over both keys)."""
    src = _post(ctx, arg["src"], -int(arg["amount"]), arg["id"])
    dst = _post(ctx, arg["dst"], int(arg["amount"]), arg["id"])
    _mark(ctx, arg["id"])
    return {"src": src, "dst": dst}


@function("bank_post", keys=lambda arg: (arg["account"], f"journal:{arg['account']}",
                                          f"done:{arg['id']}"))
def bank_post(ctx: Any, arg: dict) -> int:
    """One saga leg: add ``delta`` to ``account`` and journal it (one key, serialised)."""
    balance = _post(ctx, arg["account"], int(arg["delta"]), arg["id"])
    _mark(ctx, arg["id"])
    return balance


@function("bank_saga")
def bank_saga(ctx: Any, arg: dict) -> list:
    """A saga across workers: the debit and the credit are child invocations (no lock here)."""
    amount = int(arg["amount"])
    leg = "bank_post" if arg.get("locks", True) else "bank_post_unlocked"
    debit = ctx.invoke(leg, {"account": arg["src"], "delta": -amount, "id": f"{arg['id']}-d"})
    credit = ctx.invoke(leg, {"account": arg["dst"], "delta": amount, "id": f"{arg['id']}-c"})
    return [debit, credit]


# the same bodies with no declared keys: what concurrent clients do to them is the control
# experiment for per-key serialisation (lost updates)
function("bank_transfer_unlocked")(lambda ctx, arg: bank_transfer(ctx, arg))
function("bank_post_unlocked")(lambda ctx, arg: bank_post(ctx, arg))
