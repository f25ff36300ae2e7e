"""gPooling: hardware-agnostic accelerator pooling by driver-level interception.

Paper: ../shared/papers/14-gpooling.md. Control plane (:class:`Pool`, HTTP API in ``api``),
data plane (the LD_PRELOAD shim in ``csrc/``, built by :func:`build`), placement policies
(:data:`POLICIES`) and a trace-driven simulator (:func:`simulate`).
"""

from schedlab.gpooling.devices import (
    CATALOGUE,
    AcceleratorSpec,
    PhysicalDevice,
    StaticBackend,
    discover,
    parse_size,
    read_node_list,
)
from schedlab.gpooling.native import NativeBuild, build, shim_environment
from schedlab.gpooling.policies import POLICIES, PlacementPolicy, make_policy
from schedlab.gpooling.pool import NoRoomError, Pool, VirtualDevice
from schedlab.gpooling.simulator import Job, SimResult, simulate
from schedlab.gpooling.state import ClusterState, Grant, Request
from schedlab.gpooling.workloads import (
    heterogeneous_cluster,
    read_pod_trace,
    synthetic_trace,
    write_pod_trace,
)

__all__ = [
    "CATALOGUE", "POLICIES", "AcceleratorSpec", "ClusterState", "Grant", "Job", "NativeBuild",
    "NoRoomError", "PhysicalDevice", "PlacementPolicy", "Pool", "Request", "SimResult",
    "StaticBackend", "VirtualDevice", "build", "discover", "heterogeneous_cluster",
    "make_policy", "parse_size", "read_node_list", "read_pod_trace", "shim_environment",
    "simulate", "synthetic_trace", "write_pod_trace",
]
