"""Target back ends of the RedPanda IR.

RedPanda (../shared/papers/08-redpanda.md) lowers one shared IR to two targets. This package
holds the dataflow-CGRA back end (:mod:`.cgra`, :mod:`.modulo`) and the dynamic-HLS back end
(:mod:`.dhls`: elastic Verilog circuits), both behind :class:`.base.Backend`.
"""

from schedlab.redpanda.backends.base import BACKENDS, Backend
from schedlab.redpanda.backends.cgra import CGRA, CGRABackend, Mapping, map_graph

__all__ = ["BACKENDS", "CGRA", "Backend", "CGRABackend", "Mapping", "map_graph"]
