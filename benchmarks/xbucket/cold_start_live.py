"""Cold start, live: retries of categories that appear late in a real run under XBucketExecutor.

Three categories of small apps (10, 20, 40 MB held) run first; then two new categories arrive
(150 and 400 MB), while the pool is past sampling. Each configuration runs the same apps under
``de-bucket`` (deterministic, so both runs see the same choices) with the sampling default of
1000 MB, once with ``Defaults(cold_quantile=None)`` (the former rule: a pooled bucket chosen as
for a known category, then one kill per pooled bucket and per doubling) and once with the
default (the pool's 0.9 upper quantile; retries never past the category's own sampling step).
Prints the new categories' attempts per task and their retries.

Usage: python benchmarks/xbucket/cold_start_live.py [--parallel 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from schedlab.xbucket.parsl import XBucketExecutor
from schedlab.xbucket.types import Defaults

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "xbucket"))
import xbucket_tasks as tasks  # noqa: E402  (stdlib-only helpers the child imports)

OLD = [("a", 10)] * 12 + [("b", 20)] * 12 + [("c", 40)] * 12
NEW = [("d", 150)] * 6 + [("e", 400)] * 6


def run(cold_quantile: float | None, parallel: int) -> dict[str, list[int]]:
    executor = XBucketExecutor(algorithm="de-bucket", parallel=parallel,
                               defaults=Defaults(cold_quantile=cold_quantile))
    executor.start()
    try:
        for category, mb in OLD:  # settle the pool first
            executor.submit(tasks.hold_memory, {"category": category}, mb, 0.05).result(600)
        futures = [executor.submit(tasks.hold_memory, {"category": c}, mb, 0.05)
                   for c, mb in NEW]
        assert [f.result(600) for f in futures] == [mb for _, mb in NEW]
    finally:
        executor.shutdown()
    attempts: dict[str, list[int]] = {}
    for record in executor.records.values():
        category = record.task_id.rsplit("-", 1)[0]
        if category in ("d", "e"):
            attempts.setdefault(category, []).append(len(record.attempts))
    return attempts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args(argv)
    for label, q in (("former rule (cold_quantile=None)", None), ("cold_quantile=0.9", 0.9)):
        attempts = run(q, args.parallel)
        retries = sum(n - 1 for counts in attempts.values() for n in counts)
        print(f"{label}: attempts per task {attempts}; retries of the new categories {retries}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
