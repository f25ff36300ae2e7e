"""gPooling: hardware-agnostic accelerator pooling by driver-level interception.

Paper: ../shared/papers/14-gpooling.md. Control plane (:class:`Pool`, HTTP API in ``api``),
data plane (the LD_PRELOAD shim in ``csrc/``, built by :func:`build`), placement policies
(:data:`POLICIES`) and a trace-driven simulator (:func:`simulate`).
"""

from schedlab.core.lazy import lazy_exports

_EXPORTS = {
    "AcceleratorSpec": "devices", "CATALOGUE": "devices", "PhysicalDevice": "devices",
    "StaticBackend": "devices", "discover": "devices", "parse_size": "devices",
    "read_node_list": "devices", "NativeBuild": "native", "build": "native",
    "shim_environment": "native", "POLICIES": "policies", "PlacementPolicy": "policies",
    "make_policy": "policies", "NoRoomError": "pool", "Pool": "pool", "VirtualDevice": "pool",
    "Job": "simulator", "SimResult": "simulator", "simulate": "simulator", "ClusterState": "state",
    "Grant": "state", "Request": "state", "heterogeneous_cluster": "workloads",
    "read_pod_trace": "workloads", "synthetic_trace": "workloads", "write_pod_trace": "workloads",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
