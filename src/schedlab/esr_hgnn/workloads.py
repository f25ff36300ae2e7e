"""Seeded heterogeneous graphs with the schemas and statistics of DBLP, ACM and IMDB.

ESR-HGNN (../shared/papers/05-esr_hgnn.md) is evaluated on the standard HGNN benchmarks; they
cannot be downloaded here, so we generate graphs with the same node types, relations, node and
edge counts (at ``scale=1``) and skewed degree distributions. Counts are those of the
preprocessed datasets used by HAN (ACM) and MAGNN (DBLP, IMDB):

=======  ===============================================  ==========================================
dataset  nodes                                            edges
=======  ===============================================  ==========================================
DBLP     A 4,057  P 14,328  T 7,723  C 20                 A-P 19,645  P-T 85,810  P-C 14,328
ACM      P 3,025  A 5,835  S 56                           P-A 9,744   P-S 3,025
IMDB     M 4,278  D 2,081  A 5,257                        M-D 4,278   M-A 12,828
=======  ===============================================  ==========================================

Every paper has exactly one venue (DBLP) or subject (ACM) and every movie one director, as in the
data; every movie has exactly 3 distinct actors (12,834 M-A edges where the data has 12,828). The
other side of each relation draws its endpoint from a Zipf-like popularity (weights
``rank ** -alpha``), which reproduces the heavy tails (prolific authors, popular terms, big
venues) that make metapath sampling irregular. ``scale`` multiplies every count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import BadInputError, UnknownNameError
from schedlab.esr_hgnn.graph import HeteroGraph


@dataclass(frozen=True)
class RelationSpec:
    """One undirected relation: ``per_src`` fixed (1) or spread by popularity when None."""

    src: str
    dst: str
    edges: int
    per_src: int | None = None  # each src node has exactly this many edges
    src_alpha: float = 0.6  # skew of how many edges a src node gets (when per_src is None)
    dst_alpha: float = 0.8  # skew of which dst node an edge lands on


@dataclass(frozen=True)
class Schema:
    """A dataset's node types, relations, HGNN target type and its published metapaths."""

    name: str
    types: dict[str, tuple[str, int]]  # code -> (long name, count at scale 1)
    relations: tuple[RelationSpec, ...]
    target: str
    han_metapaths: tuple[str, ...]  # the metapaths HAN/MAGNN use on this dataset


SCHEMAS: dict[str, Schema] = {
    "dblp": Schema(
        "dblp",
        {"A": ("author", 4057), "P": ("paper", 14328), "T": ("term", 7723), "C": ("venue", 20)},
        (RelationSpec("P", "A", 19645, src_alpha=0.3, dst_alpha=0.7),
         RelationSpec("P", "T", 85810, src_alpha=0.2, dst_alpha=0.9),
         RelationSpec("P", "C", 14328, per_src=1, dst_alpha=0.5)),
        "A", ("APA", "APCPA", "APTPA"),
    ),
    "acm": Schema(
        "acm",
        {"P": ("paper", 3025), "A": ("author", 5835), "S": ("subject", 56)},
        (RelationSpec("P", "A", 9744, src_alpha=0.3, dst_alpha=0.6),
         RelationSpec("P", "S", 3025, per_src=1, dst_alpha=0.7)),
        "P", ("PAP", "PSP"),
    ),
    "imdb": Schema(
        "imdb",
        {"M": ("movie", 4278), "D": ("director", 2081), "A": ("actor", 5257)},
        (RelationSpec("M", "D", 4278, per_src=1, dst_alpha=0.6),
         RelationSpec("M", "A", 12828, per_src=3, dst_alpha=0.7)),
        "M", ("MAM", "MDM"),
    ),
}


def schema(name: str) -> Schema:
    key = name.lower()
    if key not in SCHEMAS:
        raise UnknownNameError("schema", name, sorted(SCHEMAS))
    return SCHEMAS[key]


def _popularity(n: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Zipf-like weights ``rank ** -alpha`` over a random permutation of the nodes."""
    weights = np.arange(1, n + 1, dtype=float) ** -alpha
    rng.shuffle(weights)
    return weights / weights.sum()


def _relation_edges(spec: RelationSpec, n_src: int, n_dst: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Edges where every src and (where edges allow) every dst node has at least one edge."""
    if spec.per_src is not None:
        src = np.repeat(np.arange(n_src), spec.per_src)
    else:
        extra = max(0, spec.edges - n_src)
        counts = 1 + rng.multinomial(extra, _popularity(n_src, spec.src_alpha, rng))
        src = np.repeat(np.arange(n_src), counts)
    m = src.size
    dst = rng.choice(n_dst, size=m, p=_popularity(n_dst, spec.dst_alpha, rng))
    if m >= n_dst:  # nobody isolated: the first n_dst slots (random ones) cover every dst once
        slots = rng.permutation(m)[:n_dst]
        dst[slots] = rng.permutation(n_dst)
    if spec.per_src is not None and spec.per_src > 1:
        dst = _distinct_per_row(dst.reshape(n_src, spec.per_src), n_dst, rng).ravel()
    pairs = np.unique(np.column_stack([src, dst]), axis=0)  # a paper lists an author once
    return pairs[:, 0], pairs[:, 1]


def _distinct_per_row(dst: np.ndarray, n_dst: int, rng: np.random.Generator) -> np.ndarray:
    """Redraw repeated entries within a row (a movie casts an actor once) until none remain.

    Only a *second* copy is redrawn, so a value keeps at least one slot and coverage holds.
    """
    if dst.shape[1] > n_dst:
        raise BadInputError(f"{dst.shape[1]} distinct neighbours asked of {n_dst} nodes",
                            field="per_src")
    while True:
        ordered = np.sort(dst, axis=1)
        dup_rows = np.nonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))[0]
        if dup_rows.size == 0:
            return dst
        for r in dup_rows:
            _, first = np.unique(dst[r], return_index=True)
            repeat = np.setdiff1d(np.arange(dst.shape[1]), first)
            dst[r, repeat] = rng.integers(0, n_dst, size=repeat.size)


def generate(name: str, scale: float = 1.0, seed: int = 0) -> HeteroGraph:
    """A seeded graph with ``name``'s schema and ``scale`` times its node and edge counts."""
    spec = schema(name)
    if not scale > 0:
        raise BadInputError(f"scale must be positive, got {scale}", field="scale")
    rng = np.random.default_rng([seed, 0xE5])
    counts = {code: max(1, round(n * scale)) for code, (_, n) in spec.types.items()}
    edges = {}
    for rel in spec.relations:
        scaled = RelationSpec(rel.src, rel.dst, max(1, round(rel.edges * scale)), rel.per_src,
                              rel.src_alpha, rel.dst_alpha)
        edges[(rel.src, rel.dst)] = _relation_edges(scaled, counts[rel.src], counts[rel.dst], rng)
    names = {code: long for code, (long, _) in spec.types.items()}
    return HeteroGraph.from_edges(counts, edges, names)


def symmetric_metapaths(graph: HeteroGraph, target: str, max_hops: int) -> list[str]:
    """Every palindromic metapath from ``target`` with at most ``max_hops`` hops, shortest first.

    HGNNs use symmetric metapaths (the seed's neighbours are of its own type); with many of them
    ("semantic parallelism") prefixes overlap heavily, the case the trie and grouping target.
    """
    found: list[str] = []
    frontier = [target]
    for _ in range(max_hops):
        frontier = [p + rel[1] for p in frontier for rel in sorted(graph.relations)
                    if rel[0] == p[-1]]
        found.extend(p for p in frontier if p == p[::-1] and p[-1] == target)
    return found


def metapath_set(graph: HeteroGraph, schema_name: str, which: str) -> list[str]:
    """Named metapath sets: ``han`` (the published ones), ``sym4``/``sym6`` (all symmetric)."""
    spec = schema(schema_name)
    if which == "han":
        return list(spec.han_metapaths)
    if which in ("sym4", "sym6"):
        return symmetric_metapaths(graph, spec.target, int(which[3:]))
    raise UnknownNameError("metapath set", which, ["han", "sym4", "sym6"])


def seed_batches(graph: HeteroGraph, node_type: str, batch: int, n_batches: int,
                 seed: int) -> list[np.ndarray]:
    """Mini-batches of target nodes, as an inference server would draw them (no repeats within)."""
    if batch <= 0 or n_batches <= 0:
        raise BadInputError("batch size and batch count must be positive", field="batch")
    n = graph.node_counts[node_type]
    if batch > n:
        raise BadInputError(f"batch {batch} is larger than the {n} seed nodes of type "
                            f"{node_type}; use a batch of at most {n}", field="batch")
    rng = np.random.default_rng([seed, 0xBA7C])
    return [rng.choice(n, size=batch, replace=False) for _ in range(n_batches)]


#: OGB-MAG's node and edge counts (Hu et al., NeurIPS'20, ogbn-mag): node type -> count, and
#: (src, relation, dst) -> edges, with the degree skews of the generators above
MAG_NODES = {"paper": 736_389, "author": 1_134_649, "institution": 8_740,
             "field_of_study": 59_965}
MAG_RELATIONS = (
    (("author", "writes", "paper"), 7_145_660, 0.6, 0.5),
    (("author", "affiliated_with", "institution"), 1_043_998, 0.2, 0.9),
    (("paper", "cites", "paper"), 5_416_271, 0.5, 0.8),
    (("paper", "has_topic", "field_of_study"), 7_505_078, 0.3, 0.9),
)
_P, _A, _I, _F = "paper", "author", "institution", "field_of_study"
_PA, _AP = (_P, "rev_writes", _A), (_A, "writes", _P)
_AI, _IA = (_A, "affiliated_with", _I), (_I, "rev_affiliated_with", _A)
_PF, _FP = (_P, "has_topic", _F), (_F, "rev_has_topic", _P)
_PP, _PPr = (_P, "cites", _P), (_P, "rev_cites", _P)
#: paper-rooted metapath sets on :func:`mag_like` (edge-type sequences): ``mag4`` shares one
#: prefix hop (PAP/PAIAP), ``mag7`` adds three metapaths that extend existing prefixes
MAG_METAPATHS = {
    "mag4": [[_PA, _AP], [_PF, _FP], [_PA, _AI, _IA, _AP], [_PP, _PPr]],
    "mag7": [[_PA, _AP], [_PF, _FP], [_PA, _AI, _IA, _AP], [_PP, _PPr],
             [_PP, _PA, _AP], [_PP, _PF, _FP], [_PA, _AP, _PA, _AP]],
}


def mag_like(scale: float = 0.18, seed: int = 0):
    """A seeded :class:`typed.TypedGraph` with OGB-MAG's schema and ``scale`` times its counts.

    Relation names are OGB-MAG's plus ``ToUndirected``'s ``rev_`` reverses (``rev_cites`` too),
    so ``paper -rev_writes-> author -writes-> paper`` is a metapath. Degrees follow the same
    Zipf-like popularity as :func:`generate`. ``scale=0.18`` gives about 346k nodes and 7.6M
    directed edges, the shape of the outside check in issue 50.
    """
    from schedlab.esr_hgnn.typed import TypedGraph

    if not scale > 0:
        raise BadInputError(f"scale must be positive, got {scale}", field="scale")
    rng = np.random.default_rng([seed, 0x3A6])
    counts = {t: max(2, round(n * scale)) for t, n in MAG_NODES.items()}
    edges = {}
    for (s, r, d), m, src_alpha, dst_alpha in MAG_RELATIONS:
        spec = RelationSpec(s, d, max(1, round(m * scale)), None, src_alpha, dst_alpha)
        src, dst = _relation_edges(spec, counts[s], counts[d], rng)
        if s == d:  # no self-citations
            keep = src != dst
            src, dst = src[keep], dst[keep]
        edges[(s, r, d)] = np.vstack([src, dst])
    return TypedGraph.from_edge_index(counts, edges).add_reverse()
