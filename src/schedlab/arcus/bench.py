"""Run a workload on the platform under one protocol; measure it and check exactly-once.

The checker compares the run with :func:`~schedlab.arcus.workloads.reference_run` (one crash-free
execution in-process), key by key and request by request:

* **duplicated writes** - list elements present more often than in the reference, counter
  increments beyond it (a write applied twice);
* **lost writes** - list elements or increments missing (a write never applied);
* **inconsistent reads** - requests whose returned observations differ from the reference (the
  function saw something no single execution would have seen, e.g. its own earlier write);
* **state mismatches** - any other key whose final value differs.

Requests are issued one at a time so that the reference is the unique correct outcome.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from schedlab.arcus.platform import Platform
from schedlab.arcus.policies import final_state, load_state, protocol_class
from schedlab.arcus.store import IOStats
from schedlab.arcus.workloads import LocalCtx, Reference, Workload, reference_run
from schedlab.core.errors import BadInputError, ConfigError


@dataclass
class Violations:
    lost_writes: int = 0
    duplicated_writes: int = 0
    inconsistent_reads: int = 0
    state_mismatches: int = 0

    @property
    def total(self) -> int:
        return (self.lost_writes + self.duplicated_writes + self.inconsistent_reads
                + self.state_mismatches)


def compare_value(expected: Any, actual: Any, found: Violations) -> None:
    """Add the differences between one key's expected and actual final value to ``found``."""
    if isinstance(expected, list) and isinstance(actual, list):
        want = Counter(map(repr, expected))
        got = Counter(map(repr, actual))
        found.lost_writes += sum((want - got).values())
        found.duplicated_writes += sum((got - want).values())
    elif isinstance(expected, int) and isinstance(actual, int) and not isinstance(expected, bool):
        if actual > expected:
            found.duplicated_writes += actual - expected
        else:
            found.lost_writes += expected - actual
    elif expected != actual:
        if actual is None:
            found.lost_writes += 1
        else:
            found.state_mismatches += 1


def check(workload: Workload, outputs: list[Any], state: dict[str, Any]) -> Violations:
    """Exactly-once violations of one run against the single-execution reference."""
    reference = checked_reference(workload)
    found = Violations()
    for key, expected in reference.state.items():
        compare_value(expected, state.get(key), found)
    found.inconsistent_reads = sum(a != b for a, b in zip(reference.outputs, outputs, strict=True))
    return found


def _pct(values: list[float], q: float, scale: float) -> float:
    return float(np.percentile(values, q) * scale) if values else float("nan")


def checked_reference(workload: Workload) -> Reference:
    """:func:`reference_run`, but a request whose argument its function cannot take (a string
    where a dict is needed, a missing key) is a BadInputError naming the request, not a
    TypeError from inside the application code."""
    try:
        return reference_run(workload)
    except (TypeError, KeyError, IndexError, ValueError, AttributeError) as exc:
        ctx = LocalCtx(dict(workload.initial), Counter())
        for index, (fn, arg) in enumerate(workload.requests, 1):
            try:
                ctx.invoke(fn, arg)
            except (TypeError, KeyError, IndexError, ValueError, AttributeError) as bad:
                raise BadInputError(f"request #{index} ('{fn}'): argument {arg!r:.60} does not "
                                    f"fit the function ({type(bad).__name__}: {bad})",
                                    field="arg") from None
        raise BadInputError(f"the requests fail in the reference run ({type(exc).__name__}: "
                            f"{exc})", field="arg") from None


def run_bench(platform: Platform, workload: Workload, protocol: str, *, rtt_ms: float = 0.0,
              crash_rate: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """Run ``workload`` under ``protocol`` on a fresh namespace; metrics and checker counts."""
    protocol_class(protocol)
    if platform.client is None:
        raise ConfigError("start the platform first")
    ns = f"{workload.name}-{protocol}-{uuid.uuid4().hex[:8]}"
    reference = checked_reference(workload)
    load_state(protocol, platform.client, ns, workload.initial)
    protocol_class(protocol).prepare(platform.client, ns, reference.read_ratio)
    crashes_before = platform.crashes
    stats, outputs, latencies = IOStats(), [], []
    for index, (fn, arg) in enumerate(workload.requests):
        # instance ids derived from the request index make the crash points reproducible
        reply = platform.invoke(fn, arg, protocol=protocol, ns=ns, rtt_ms=rtt_ms,
                                crash_rate=crash_rate, crash_seed=seed, instance=f"r{index}")
        outputs.append(reply["value"])
        latencies.append(reply["latency_s"])
        stats.merge(reply["stats"])
    state = final_state(protocol, platform.client, ns, sorted(reference.state))
    found = check(workload, outputs, state)
    _drop_namespace(platform, ns)
    n = len(workload.requests)
    lookups = stats.hits + stats.misses
    return dict(
        workload=workload.name, protocol=protocol, rtt_ms=rtt_ms, crash_rate=crash_rate,
        requests=n, crashes=platform.crashes - crashes_before,
        read_p50_us=_pct(stats.reads, 50, 1e6), read_p99_us=_pct(stats.reads, 99, 1e6),
        write_p50_us=_pct(stats.writes, 50, 1e6), write_p99_us=_pct(stats.writes, 99, 1e6),
        # a write is only safe once durable: for write-behind (Arcus) that includes the wait
        # for the background flush or for ``finish``; for the others it equals write_p50_us
        write_durable_p50_us=_pct(stats.durable or stats.writes, 50, 1e6),
        write_durable_p99_us=_pct(stats.durable or stats.writes, 99, 1e6),
        # the same for writes whose round trip was not their execution's first
        write_durable_later_p50_us=_pct(stats.durable_later, 50, 1e6),
        finish_p50_us=_pct(stats.finishes, 50, 1e6),
        e2e_p50_ms=_pct(latencies, 50, 1e3), e2e_p99_ms=_pct(latencies, 99, 1e3),
        e2e_mean_ms=float(np.mean(latencies) * 1e3), throughput_rps=n / float(np.sum(latencies)),
        rtts_per_request=stats.rtts / n, log_records_per_request=stats.log_records / n,
        log_bytes_per_request=stats.log_bytes / n,
        cache_hit_rate=stats.hits / lookups if lookups else float("nan"),
        **asdict(found), violations=found.total,
    )


def _drop_namespace(platform: Platform, ns: str) -> None:
    keys = list(platform.client.scan_iter(f"{ns}:*", count=2000))
    for start in range(0, len(keys), 500):
        platform.client.delete(*keys[start:start + 500])
