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

    @function("transfer", keys=("src", "dst"))   # serialised per account
    def transfer(ctx, arg): ...

    if __name__ == "__main__":
        with RedisServer(aof="always") as redis, \
                Platform(redis.url, modules=("mymodule",)) as platform:
            platform.invoke("greet", None, idempotency_key="req-1")   # a retry is the same call
            job = platform.submit("greet", None)
            platform.status(job)
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "FUNCTIONS": "apps", "function": "apps", "Violations": "bench", "check": "bench",
    "run_bench": "bench", "Platform": "platform", "PROTOCOLS": "policies", "StateIO": "policies",
    "final_state": "policies", "load_state": "policies", "make_protocol": "policies",
    "protocol_class": "policies", "RedisServer": "store", "Store": "store", "connect": "store",
    "WORKLOADS": "workloads", "Workload": "workloads", "make_workload": "workloads",
    "read_requests": "workloads", "reference_run": "workloads",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
