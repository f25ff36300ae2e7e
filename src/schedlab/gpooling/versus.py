"""gPooling's FGD-based policy head to head with FGD under FGD's own inflation (same draws)."""

from __future__ import annotations

from collections.abc import Sequence

from schedlab.gpooling.fgd import FGD


def versus_fgd(trace, nodes, *, policy: str | FGD = "pooled-fgd", seeds: int = 3,
               levels: Sequence[float] | None = None, tie: float = 1e-6,
               limit: int | None = None):
    """Head to head with FGD under its own inflation, same draws (seed) for both: one row per
    seed and level (``full``: no pod type fits anywhere) with both allocations, their ratio and
    ``win``/``tie``/``lose`` (a tie: ratio within ``tie`` of 1); ``limit``: the first nodes
    only. A Polars frame."""
    import polars as pl

    from schedlab.core.errors import BadInputError
    from schedlab.gpooling.inflation import LEVELS, inflate, read_nodes, read_pods

    if seeds < 1:
        raise BadInputError(f"must be at least 1, got {seeds}", field="seeds")
    pods, pool = read_pods(trace), read_nodes(nodes, limit)
    name = policy if isinstance(policy, str) else policy.name
    rows = []
    for seed in range(seeds):
        ours, theirs = (inflate(pods, pool, name, seed=seed, levels=levels or LEVELS,
                                until_full=True) for name in (policy, "fgd"))
        for a, b in zip(ours, theirs, strict=True):
            ratio = a["utilisation"] / b["utilisation"]
            verdict = "tie" if abs(ratio - 1) <= tie else ("win" if ratio > 1 else "lose")
            rows.append(dict(seed=seed, load="full" if a["load"] == float("inf")
                             else f"{a['load']:g}", policy=name,
                             utilisation=a["utilisation"], fgd=b["utilisation"],
                             ratio=ratio, verdict=verdict,
                             unallocated=a["unallocated"], fgd_unallocated=b["unallocated"]))
    return pl.DataFrame(rows)
