"""Work-sharing policies: Hydra-MCS's RC-driven sharing and offload, and the baselines.

The engine asks the policy, at every checkpoint of a searcher, which open levels to hand to
other threads, and once which RC band to offload to an accelerator. It never looks at the
policy's name. Paper: ../shared/papers/02-hydra_mcs.md (Hydra-MCS); baselines: sequential
McSplit and McSplit-style parallel splitting (every node near the root becomes a task, RC or
not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from schedlab.core.registry import lookup


@dataclass(frozen=True)
class OpenLevel:
    """What a policy sees of one open level of a searcher's stack."""

    depth: int  # levels below the searcher's own root
    rc: float  # log2 estimate of the remaining computation below it
    gap: int = 0  # bound - incumbent there (what RC is built on)


class WorkPolicy(Protocol):
    """Decides which subproblems leave a searcher (to idle threads, or to the GPU)."""

    name: str
    threads: int
    checkpoint_nodes: int  # how many nodes a searcher runs between two looks at its stack

    def share(self, levels: list[OpenLevel], idle: int) -> list[int]:
        """Indices (into ``levels``, shallowest first) of the levels to hand over now."""
        ...

    def offload_band(self) -> tuple[float, float] | None:
        """RC band whose nodes are batched to the GPU; None to keep everything on the CPU."""
        ...


@dataclass
class Sequential:
    """McSplit: one thread, nothing shared (the deterministic, node-count-exact mode)."""

    name: str = "mcsplit"
    threads: int = 1
    checkpoint_nodes: int = 1 << 18

    def __post_init__(self) -> None:
        self.threads = 1  # sequential by definition, whatever the caller asked for

    def share(self, levels: list[OpenLevel], idle: int) -> list[int]:
        return []

    def offload_band(self) -> tuple[float, float] | None:
        return None


@dataclass
class NaiveSplit:
    """McSplit-style parallel search: every open level near the root becomes a task.

    No RC: work is split whether or not the subtree is worth it, and whether or not another
    thread is waiting, so many tiny tasks are queued and copied.
    """

    threads: int = 2
    split_depth: int = 3
    name: str = "naive-parallel"
    checkpoint_nodes: int = 1 << 12

    def share(self, levels: list[OpenLevel], idle: int) -> list[int]:
        return [i for i, lv in enumerate(levels) if lv.depth < self.split_depth]

    def offload_band(self) -> tuple[float, float] | None:
        return None


@dataclass
class RCShare:
    """Hydra-MCS CPU: share only when a thread is idle, and only subtrees whose RC is large.

    The shallowest level with RC >= ``min_rc`` is handed over, one per idle thread.
    """

    threads: int = 2
    min_rc: float = 12.0
    name: str = "hydra-cpu"
    checkpoint_nodes: int = 1 << 12

    def share(self, levels: list[OpenLevel], idle: int) -> list[int]:
        chosen = [i for i, lv in enumerate(levels) if lv.rc >= self.min_rc]
        return chosen[:idle]

    def offload_band(self) -> tuple[float, float] | None:
        return None


@dataclass
class GapShare:
    """Ablation of Hydra-MCS CPU: the same rule (share only when a thread is idle, the
    shallowest level that qualifies, one per idle thread) with the plain gap (bound -
    incumbent) in place of RC, to measure what RC adds over the quantity it is built on.
    ``min_gap`` = 3 is our choice (RC >= 12 is a gap of about 3-4 at this size).
    """

    threads: int = 2
    min_gap: int = 3
    name: str = "gap-cpu"
    checkpoint_nodes: int = 1 << 12

    def share(self, levels: list[OpenLevel], idle: int) -> list[int]:
        chosen = [i for i, lv in enumerate(levels) if lv.gap >= self.min_gap]
        return chosen[:idle]

    def offload_band(self) -> tuple[float, float] | None:
        return None


@dataclass
class Hybrid(RCShare):
    """Hydra-MCS CPU+GPU: RC sharing, plus nodes whose RC is in the band go to the GPU."""

    band_lo: float = 8.0
    band_hi: float = 16.0
    name: str = "hydra-gpu"

    def offload_band(self) -> tuple[float, float] | None:
        return (self.band_lo, self.band_hi)


POLICIES: dict[str, Callable[..., WorkPolicy]] = {
    "mcsplit": Sequential,
    "naive-parallel": NaiveSplit,
    "hydra-cpu": RCShare,
    "hydra-gpu": Hybrid,
    "gap-cpu": GapShare,
}


def make_policy(name: str, threads: int = 1, **kwargs) -> WorkPolicy:
    """Build a policy by CLI name (``threads`` is ignored by the sequential one)."""
    return lookup(POLICIES, "policy", name)(threads=threads, **kwargs)
