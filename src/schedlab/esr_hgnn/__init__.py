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

from schedlab.esr_hgnn.engine import SamplerMeasure, measure_sampler, sample_channels
from schedlab.esr_hgnn.graph import (
    HeteroGraph,
    Relation,
    address_layout,
    from_heterodata,
    parse_metapaths,
    read_graph_dir,
    write_graph_dir,
)
from schedlab.esr_hgnn.grouping import (
    GROUPERS,
    Grouper,
    brute_force_grouping,
    fanout_hop_cost,
    make_grouper,
    total_cost,
)
from schedlab.esr_hgnn.hwmodel import (
    SOURCES,
    HardwareConfig,
    UnitEstimate,
    estimate_unit,
    gpu_seconds,
    load_config,
)
from schedlab.esr_hgnn.policies import (
    SAMPLERS,
    NaiveSampler,
    SampleBatch,
    Sampler,
    TrieSampler,
    make_sampler,
)
from schedlab.esr_hgnn.stats import compare_samplers
from schedlab.esr_hgnn.study import compare_sampling, hardware_comparison
from schedlab.esr_hgnn.trie import MetapathTrie
from schedlab.esr_hgnn.workloads import SCHEMAS, generate, metapath_set, seed_batches

__all__ = [
    "GROUPERS", "SAMPLERS", "SCHEMAS", "SOURCES", "Grouper", "HardwareConfig", "HeteroGraph",
    "MetapathTrie", "NaiveSampler", "Relation", "SampleBatch", "Sampler", "SamplerMeasure",
    "TrieSampler", "UnitEstimate", "address_layout", "brute_force_grouping", "compare_samplers",
    "compare_sampling", "estimate_unit", "fanout_hop_cost", "from_heterodata", "generate",
    "gpu_seconds", "hardware_comparison", "load_config", "make_grouper", "make_sampler",
    "measure_sampler", "metapath_set", "parse_metapaths", "read_graph_dir", "sample_channels",
    "seed_batches", "total_cost", "write_graph_dir",
]
