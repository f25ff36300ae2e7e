"""Hydra-MCS: exact maximum common induced subgraph, McSplit's search with RC-driven sharing.

Paper: Hydra-MCS, hybrid CPU-GPU maximum common subgraph (../shared/papers/02-hydra_mcs.md),
built on McSplit (Trimble & McCreesh, IJCAI 2017).
"""

from schedlab.hydra_mcs.api import (
    MCSResult,
    maximum_common_induced_subgraph,
    solve,
    solve_files,
)
from schedlab.hydra_mcs.graph import Graph, GraphBuilder, from_networkx, to_networkx
from schedlab.hydra_mcs.policies import POLICIES, WorkPolicy, make_policy
from schedlab.hydra_mcs.readers import read_arg, read_dimacs, read_edges, read_graph, read_lad
from schedlab.hydra_mcs.verify import brute_force, check_mapping

__all__ = [
    "POLICIES", "Graph", "GraphBuilder", "MCSResult", "WorkPolicy", "brute_force",
    "check_mapping", "from_networkx", "make_policy", "maximum_common_induced_subgraph",
    "read_arg", "read_dimacs", "read_edges", "read_graph", "read_lad", "solve", "solve_files",
    "to_networkx",
]
