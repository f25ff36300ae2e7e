"""Issue 51 item 4: per (trace, resource), the best of the paper's four, of the time-weighted four
and of the five alternatives; whole real traces, per-resource replay as ``replay --per-resource``
ships it (Whole Machine = trace max, peak semantics, kill fraction 1, pooled fallback, seed 0).

    python benchmarks/xbucket/family_rows.py ['{"cold_quantile": null}']   # Defaults(**json)
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ProcessPoolExecutor

import polars as pl

from schedlab.xbucket.compare import compare
from schedlab.xbucket.experiment import real_traces
from schedlab.xbucket.policies import ALTERNATIVES, TIME_WEIGHTED, XBUCKET_FAMILY
from schedlab.xbucket.types import RESOURCES, Defaults

KW = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}


def one(name: str) -> pl.DataFrame:
    return compare(real_traces()[name], [*XBUCKET_FAMILY, *TIME_WEIGHTED, *ALTERNATIVES],
                   defaults=Defaults(**KW), per_resource=True, labels={"workflow": name})


def best(group: pl.DataFrame, names: tuple[str, ...], column: str) -> tuple[str, float]:
    row = group.filter(pl.col("algorithm").is_in(list(names))).sort(
        column, descending=True).row(0, named=True)
    return row["algorithm"], row[column]


def main() -> None:
    names = sorted(real_traces())
    if not names:
        raise SystemExit("no traces under <data dir>/xbucket")
    with ProcessPoolExecutor(2) as pool:
        frame = pl.concat(list(pool.map(one, names)))
    held = 0
    print("trace | type | paper | time-weighted | best alternative | paper >= alternative")
    for name in names:
        group = frame.filter(pl.col("workflow") == name)
        for resource in RESOURCES:
            column = f"efficiency_{resource}"
            (pa, pv), (ta, tv), (aa, av) = (best(group, family, column) for family in
                                            (XBUCKET_FAMILY, TIME_WEIGHTED, ALTERNATIVES))
            ok = pv >= av - 1e-9
            held += ok
            print(f"{name} | {resource} | {pa} {pv:.4f} | {ta} {tv:.4f} | {aa} {av:.4f} | "
                  f"{'yes' if ok else 'no'}")
    print(f"rows where the paper's four >= the best alternative: {held} of {3 * len(names)}")


if __name__ == "__main__":
    main()
