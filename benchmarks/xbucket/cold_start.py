"""Cold start of new categories: retries and efficiency with and without the upper-quantile prior.

A category with fewer than ``sampling`` completed tasks predicts from the pooled
(category-blind) buckets (``Defaults.pooled_fallback``). Its first attempt per type used to be a
bucket chosen as for a known category (a low one, often); ``Defaults.cold_quantile`` = q takes
the pooled buckets' q upper quantile instead. This replays each real trace one resource at a
time (as ``schedlab xbucket replay --per-resource``: Whole Machine = trace max, one task at a
time, peak semantics) for every X-Bucket mode and q, and counts the retries of *cold* tasks
(among the first ``sampling`` of their category) next to all retries and the efficiency.

Usage: python benchmarks/xbucket/cold_start.py [--out cold.csv] [--quantiles none,0.5,0.75,0.9]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

from schedlab.xbucket.coldstart import cold_start_table
from schedlab.xbucket.workloads import read_reports, staggered

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "xbucket"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quantiles", default="none,0.5,0.75,0.9,1.0")
    parser.add_argument("--semantics", default="peak", choices=("peak", "allocation"))
    parser.add_argument("--synthetic-only", action="store_true")
    args = parser.parse_args(argv)
    quantiles = [None if q == "none" else float(q) for q in args.quantiles.split(",")]
    rows = cold_start_table("staggered-synthetic", staggered(), quantiles, args.semantics)
    if not args.synthetic_only:
        for path in sorted(DATA.glob("*.txt")):
            rows += cold_start_table(path.stem, read_reports(path), quantiles, args.semantics)
    frame = pl.DataFrame(rows).with_columns(pl.col("cold_quantile").cast(pl.Utf8))
    if args.out:
        frame.write_csv(args.out)
    totals = (frame.group_by(["trace", "algorithm", "cold_quantile"], maintain_order=True)
              .agg(pl.col("cold_retries").sum(), pl.col("retries").sum(),
                   pl.col("efficiency").mean().alias("mean_efficiency")))
    with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=200):
        print(totals)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
