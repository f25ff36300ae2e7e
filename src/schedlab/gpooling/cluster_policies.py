"""Every node-level placement policy by CLI name: gPooling's (frag-aware, pooled-fgd), FGD and
the classic baselines."""

from __future__ import annotations

from collections.abc import Callable

from schedlab.core.registry import lookup
from schedlab.gpooling.fgd import (
    FGD,
    BestFit,
    ClusterPolicy,
    DotProduct,
    FirstFit,
    FragAware,
    GpuClustering,
    GpuPacking,
    RandomFit,
    WholeDevice,
    WorstFit,
)
from schedlab.gpooling.placement import PooledFGD

CLUSTER_POLICIES: dict[str, Callable[[], ClusterPolicy]] = {
    "frag-aware": FragAware,
    "pooled-fgd": PooledFGD,
    "fgd": FGD,
    "best-fit": BestFit,
    "dot-product": DotProduct,
    "gpu-packing": GpuPacking,
    "gpu-clustering": GpuClustering,
    "random": RandomFit,
    "first-fit": FirstFit,
    "worst-fit": WorstFit,
    "whole-device": WholeDevice,
}


def make_cluster_policy(name: str) -> ClusterPolicy:
    """A fresh node-level policy by CLI name."""
    return lookup(CLUSTER_POLICIES, "cluster placement policy", name)()
