"""Hydra-MCS: exact maximum common induced subgraph, McSplit's search with RC-driven sharing.

Paper: Hydra-MCS, hybrid CPU-GPU maximum common subgraph (../shared/papers/02-hydra_mcs.md),
built on McSplit (Trimble & McCreesh, IJCAI 2017).
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "MCSResult": "api",
    "maximum_common_induced_subgraph": "api",
    "solve": "api",
    "solve_files": "api",
    "Graph": "graph",
    "GraphBuilder": "graph",
    "from_networkx": "graph",
    "to_networkx": "graph",
    "POLICIES": "policies",
    "WorkPolicy": "policies",
    "make_policy": "policies",
    "read_arg": "readers",
    "read_dimacs": "readers",
    "read_edges": "readers",
    "read_graph": "readers",
    "read_lad": "readers",
    "brute_force": "verify",
    "check_mapping": "verify",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
