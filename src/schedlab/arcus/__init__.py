"""Arcus: fast, exactly-once function state I/O for stateful serverless (paper 12).

CFLog (coordination-free per-step logging) and FCCache (a per-worker cache for dispersed
invocations) over a real Redis, a small serverless runtime with real worker processes and
injected crashes, the baselines the paper compares with (Halfmoon-, Boki-, Beldi-style and
unsafe direct access), and an exactly-once checker.

    from schedlab.arcus import Platform, RedisServer, function

    @function("greet")
    def greet(ctx, arg):
        n = (ctx.read("count") or 0) + 1
        ctx.write("count", n)
        return n

    with RedisServer() as redis, Platform(redis.url, modules=("mymodule",)) as platform:
        platform.invoke("greet", None, protocol="arcus")
"""

from schedlab.arcus.apps import FUNCTIONS, function
from schedlab.arcus.bench import Violations, check, run_bench
from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import (
    PROTOCOLS,
    StateIO,
    final_state,
    load_state,
    make_protocol,
    protocol_class,
)
from schedlab.arcus.store import RedisServer, Store, connect
from schedlab.arcus.workloads import (
    WORKLOADS,
    Workload,
    make_workload,
    read_requests,
    reference_run,
)

__all__ = [
    "FUNCTIONS", "PROTOCOLS", "WORKLOADS", "Platform", "RedisServer", "StateIO", "Store",
    "Violations", "Workload", "check", "connect", "final_state", "function", "load_state",
    "make_protocol", "make_workload", "protocol_class", "read_requests", "reference_run",
    "run_bench",
]
