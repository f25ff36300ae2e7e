"""Do two samplers draw metapath neighbours from the same distribution? A chi-squared check.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) must not change *what* is sampled, only how much
memory traffic it costs. With fanout 1 every (seed, metapath) walk is one independent draw, in
naive and in trie sampling alike (the trie only correlates *different* metapaths of one seed), so
counting each seed's endpoints over many independent runs gives, per seed, two multinomial
samples that a two-sample chi-squared test of homogeneity can compare. Each seed is a stratum
with a fixed number of draws, so the statistics and degrees of freedom are summed over seeds
(pooling all (seed, endpoint) cells into one table would ignore the fixed per-seed totals and make
the test conservative).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import chi2, chi2_contingency

from schedlab.esr_hgnn.graph import HeteroGraph
from schedlab.esr_hgnn.policies import Sampler


def endpoint_counts(graph: HeteroGraph, sampler: Sampler, metapaths: Sequence[str],
                    seeds: np.ndarray, runs: int, seed: int) -> dict[str, np.ndarray]:
    """Per metapath, a (seed position, endpoint + 1) count matrix over ``runs`` runs.

    Column 0 counts dead walks (endpoint -1).
    """
    n_end = {mp: graph.node_counts[mp[-1]] + 1 for mp in metapaths}
    counts = {mp: np.zeros((seeds.size, n_end[mp]), dtype=np.int64) for mp in metapaths}
    position = np.arange(seeds.size)
    for run in range(runs):
        batch = sampler.sample(graph, metapaths, seeds, (1,), np.random.default_rng([seed, run]))
        for mp in metapaths:
            np.add.at(counts[mp], (position, batch.endpoints[mp][:, 0] + 1), 1)
    return counts


def _table(a: np.ndarray, b: np.ndarray, min_expected: float) -> np.ndarray:
    """A 2 x C table; categories whose pooled count is below ``2 * min_expected`` are merged."""
    total = a + b
    keep = total >= 2 * min_expected
    table = np.vstack([a[keep], b[keep]])
    other = np.array([[a[~keep].sum()], [b[~keep].sum()]])
    if other.sum() > 0:
        table = np.hstack([table, other])
    return table[:, table.sum(axis=0) > 0]


def homogeneity_pvalue(a: np.ndarray, b: np.ndarray, min_expected: float = 5.0) -> float:
    """Chi-squared homogeneity p-value of two count vectors (or stratified count matrices).

    Sparse categories are pooled into one "other" bin so every expected cell count is at least
    ``min_expected`` (the usual validity rule). With 2-D inputs each row is a stratum: the
    statistics and degrees of freedom of the rows are summed.
    """
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    statistic, dof = 0.0, 0
    for row_a, row_b in zip(a, b, strict=True):
        table = _table(row_a, row_b, min_expected)
        if table.shape[1] < 2 or (table.sum(axis=1) == 0).any():
            continue  # one category (or an empty side): nothing to compare in this stratum
        result = chi2_contingency(table, correction=False)
        statistic += float(result.statistic)
        dof += int(result.dof)
    return float(chi2.sf(statistic, dof)) if dof else 1.0


def compare_samplers(graph: HeteroGraph, first: Sampler, second: Sampler,
                     metapaths: Sequence[str], seeds: np.ndarray, runs: int,
                     seed: int) -> dict[str, float]:
    """Per-metapath p-values of "``first`` and ``second`` sample the same neighbours"."""
    a = endpoint_counts(graph, first, metapaths, seeds, runs, seed)
    b = endpoint_counts(graph, second, metapaths, seeds, runs, seed + 1_000_003)
    return {mp: homogeneity_pvalue(a[mp], b[mp]) for mp in metapaths}
