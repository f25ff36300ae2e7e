"""ESR-HGNN: redundancy-aware metapath sampling for HGNN inference.

Paper: ../shared/papers/05-esr_hgnn.md. A metapath trie lets a sampler walk every prefix shared by
several metapaths once per seed batch; reusability-driven grouping assigns metapaths to the
channels of a (modelled) multi-channel sampling unit so that each channel's trie reuses the most.

Library use::

    from schedlab.esr_hgnn import generate, make_sampler, parse_metapaths
    graph = generate("dblp", scale=1.0, seed=0)          # or read_graph_dir("my_graph/")
    mps = parse_metapaths("APA,APCPA,APTPA", graph)
    batch = make_sampler("trie").sample(graph, mps, seeds, (10,), np.random.default_rng(0))
    batch.endpoints["APCPA"]   # (len(seeds), 10) metapath neighbours, -1 for dead walks
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "SamplerMeasure": "engine", "measure_sampler": "engine", "sample_channels": "engine",
    "HeteroGraph": "graph", "Relation": "graph", "address_layout": "graph",
    "from_heterodata": "graph", "parse_metapaths": "graph", "read_graph_dir": "graph",
    "write_graph_dir": "graph", "GROUPERS": "grouping", "Grouper": "grouping",
    "brute_force_grouping": "grouping", "fanout_hop_cost": "grouping", "make_grouper": "grouping",
    "total_cost": "grouping", "HardwareConfig": "hwmodel", "SOURCES": "hwmodel",
    "UnitEstimate": "hwmodel", "estimate_unit": "hwmodel", "gpu_seconds": "hwmodel",
    "load_config": "hwmodel", "NaiveSampler": "policies", "SAMPLERS": "policies",
    "SampleBatch": "policies", "Sampler": "policies", "TrieSampler": "policies",
    "make_sampler": "policies", "compare_samplers": "stats", "compare_sampling": "study",
    "hardware_comparison": "study", "MetapathTrie": "trie", "SCHEMAS": "workloads",
    "generate": "workloads", "metapath_set": "workloads", "seed_batches": "workloads",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
