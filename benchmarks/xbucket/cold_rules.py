"""Issue 51: which cold tasks should take the cold-start prior? Per (trace, type, mode, rule):
retries of cold tasks (the first ``sampling`` of their category), all retries, efficiency.

Rules (``Defaults.cold_quantile`` / ``Defaults.cold_prior``): ``none`` (no prior, no cold retry
cap: the former rule), ``sampling`` (the pool's 0.9 upper quantile for every fresh task of a
category in sampling: issue 51 item 3, the default until this script chose), ``q0.75`` /
``q0.5`` (the same, a lower quantile; 0.75 is the default now), ``first`` (the 0.9 prior only
while the category has no record of the type, then a pooled bucket as for a known category),
``own-above`` (the 0.9 prior while it has no record, then the pooled bucket at its largest own
record, or strictly above it when its records never repeat a value). Per-resource replay as
``replay --per-resource`` (Whole Machine = trace max, peak semantics, seed 0).

    python benchmarks/xbucket/cold_rules.py [--traces ccl|heldout] [--modes dg-bucket,de-bucket]
        [--rules none,sampling,first,own-above,q0.75,q0.5] [--jobs 3] [--out rows.csv]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import polars as pl

from schedlab.xbucket.coldstart import cold_mask
from schedlab.xbucket.compare import run_one
from schedlab.xbucket.metrics import summarise
from schedlab.xbucket.simulator import ReplayConfig
from schedlab.xbucket.types import RESOURCES, Defaults, Task

RULES = {"none": dict(cold_quantile=None), "sampling": dict(cold_quantile=0.9),
         "first": dict(cold_prior="first"), "own-above": dict(cold_prior="own-above"),
         "q0.75": dict(cold_quantile=0.75), "q0.5": dict(cold_quantile=0.5)}
# "first" and "own-above" with the 0.9 quantile, as they were measured
RULES["first"]["cold_quantile"] = RULES["own-above"]["cold_quantile"] = 0.9
ROOT = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def traces(which: str) -> dict[str, list[Task]]:
    if which == "ccl":
        from schedlab.xbucket.workloads import read_reports
        return {p.stem: read_reports(p) for p in sorted((ROOT / "xbucket").glob("*.txt"))}
    sys.path.insert(0, str(Path(__file__).parent))
    from heldout import alibaba, bitbrains  # noqa: PLC0415
    return {"bitbrains": bitbrains(ROOT / "bitbrains"),
            "alibaba-gpu2023": alibaba(ROOT / "alibaba" / "gpu2023_pod_list_default.csv", 2000)}


def _one(job: tuple[str, list[Task], str, str, str]) -> dict:
    name, tasks, mode, rule, resource = job
    replay = run_one(tasks, mode, ReplayConfig(only=resource), Defaults(**RULES[rule]))
    frame = replay.attempts
    failed = ~frame["success"].to_numpy()
    cold = cold_mask(tasks, Defaults().sampling)[frame["task"].to_numpy()]
    return dict(trace=name, resource=resource, algorithm=mode, rule=rule,
                cold_retries=int((failed & cold).sum()), retries=int(failed.sum()),
                efficiency=summarise(replay)[f"efficiency_{resource}"])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default="ccl", choices=("ccl", "heldout"))
    parser.add_argument("--modes", default="dg-bucket,de-bucket")
    parser.add_argument("--rules", default="none,sampling,q0.75,q0.5,first,own-above")
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    loaded = traces(args.traces)
    jobs = [(n, t, m, r, res) for n, t in loaded.items() for res in RESOURCES
            if any(x.peak.get(res) > 0 for x in t)
            for m in args.modes.split(",") for r in args.rules.split(",")]
    with ProcessPoolExecutor(args.jobs) as pool:
        frame = pl.DataFrame(list(pool.map(_one, jobs)))
    if args.out:
        frame.write_csv(args.out)
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200):
        print(frame.group_by("rule", maintain_order=True).agg(
            pl.col("cold_retries").sum(), pl.col("retries").sum(),
            pl.col("efficiency").mean().alias("mean_efficiency")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
