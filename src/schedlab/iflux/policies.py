"""IFlux's mapper and the baselines it is compared with, behind one Protocol, plus allocation.

Paper: IFlux (../shared/papers/10-iflux.md). A :class:`Mapper` turns a batch of encoded intents
into a tier fallback chain and a software-accelerator mask per intent. IFlux is the compiled
rule table; ``iflux-interp`` is the same rules interpreted one intent at a time (the reference);
``pfs`` is "no accelerators" (what users get without IFlux); ``manual-nvme`` and ``manual-tmpfs``
are what a user does by hand today: request one burst buffer for everything and stage data in
and out, with no software accelerators. :func:`allocate` (the engine) then fits the chosen tiers
into the node's capacity; it never looks at which mapper produced the chains.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from schedlab.core.errors import BadInputError
from schedlab.core.registry import lookup
from schedlab.iflux.intents import FEATURES, Intent, Usage, encode
from schedlab.iflux.rules import (
    DEFAULT_RULES,
    CompiledRules,
    Rule,
    Soft,
    Tier,
    compile_rules,
    interpret,
    soft_list,
)
from schedlab.iflux.storage import has_gpu

USAGE_COL = [name for name, _ in FEATURES].index("usage")


@dataclass
class MapResult:
    """Per intent: an index into ``chains`` and a software mask (uint8 arrays)."""

    chains: list[tuple[Tier, ...]]
    chain_ids: np.ndarray
    soft: np.ndarray


class Mapper(Protocol):
    """Maps encoded intents (n x features, uint8) to tier chains and software accelerators."""

    name: str

    def map(self, codes: np.ndarray) -> MapResult: ...


class IFluxMapper:
    """The paper's method: rules compiled once into a table, mapping is two gathers."""

    name = "iflux"

    def __init__(self, rules: Sequence[Rule] = DEFAULT_RULES) -> None:
        self.table: CompiledRules = compile_rules(rules)

    def map(self, codes: np.ndarray) -> MapResult:
        chain_ids, soft = self.table.lookup(codes)
        return MapResult(self.table.chains, chain_ids, soft)


class InterpretedMapper:
    """The same rules evaluated intent by intent: the reference the table is checked against."""

    name = "iflux-interp"

    def __init__(self, rules: Sequence[Rule] = DEFAULT_RULES) -> None:
        self.rules = tuple(rules)

    def map(self, codes: np.ndarray) -> MapResult:
        chains: list[tuple[Tier, ...]] = []
        index: dict[tuple[Tier, ...], int] = {}
        ids = np.zeros(len(codes), dtype=np.uint8)
        soft = np.zeros(len(codes), dtype=np.uint8)
        for i, row in enumerate(codes.tolist()):
            decision = interpret(row, self.rules)
            ids[i] = index.setdefault(decision.tiers, len(index))
            if ids[i] == len(chains):
                chains.append(decision.tiers)
            soft[i] = decision.soft
        return MapResult(chains, ids, soft)


class StaticMapper:
    """One tier chain for every intent, staging by usage only: the manual, intent-blind way."""

    def __init__(self, name: str, tiers: tuple[Tier, ...]) -> None:
        self.name, self.tiers = name, tiers

    def map(self, codes: np.ndarray) -> MapResult:
        n = len(codes)
        soft = np.zeros(n, dtype=np.uint8)
        if self.tiers != (Tier.PFS,):
            usage = codes[:, USAGE_COL] if n else np.zeros(0, dtype=np.uint8)
            soft[usage == list(Usage).index(Usage.INPUT)] = Soft.STAGE_IN
            soft[usage == list(Usage).index(Usage.OUTPUT)] = Soft.STAGE_OUT
        return MapResult([self.tiers], np.zeros(n, dtype=np.uint8), soft)


MAPPERS: dict[str, Callable[[], Mapper]] = {
    "iflux": IFluxMapper,
    "iflux-interp": InterpretedMapper,
    "pfs": lambda: StaticMapper("pfs", (Tier.PFS,)),
    "manual-nvme": lambda: StaticMapper("manual-nvme", (Tier.NVME,)),
    "manual-tmpfs": lambda: StaticMapper("manual-tmpfs", (Tier.RAMDISK,)),
}


def make_mapper(name: str) -> Mapper:
    return lookup(MAPPERS, "mapper", name)()


@functools.cache
def shared_mapper(name: str) -> Mapper:
    """One long-lived mapper per name, as a scheduler plugin keeps it: rules compiled once."""
    return make_mapper(name)


#: free bytes per tier on one node; PFS capacity is treated as unlimited; gpu-direct has room
#: only on a node with a GPU (otherwise its intents fall back along their chains)
DEFAULT_CAPACITY: dict[Tier, int] = {
    Tier.RAMDISK: 4 << 30, Tier.NVME: 64 << 30, Tier.SHARED_BB: 2 << 40,
    Tier.GPU_DIRECT: (1 << 30) if has_gpu() else 0, Tier.PFS: 1 << 62,
}


@dataclass(frozen=True)
class Placement:
    """Where one intent's data lives during the job, and which software serves it."""

    intent: Intent
    tier: Tier
    soft: int
    chain: tuple[Tier, ...]

    def to_dict(self) -> dict:
        return dict(path=self.intent.path, name=self.intent.name, tier=str(self.tier),
                    software=soft_list(self.soft), chain=[str(t) for t in self.chain],
                    size=self.intent.size)


@dataclass
class Allocation:
    """A job's placements and what is left of each tier afterwards."""

    placements: list[Placement]
    mapper: str
    free: dict[Tier, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(mapper=self.mapper, placements=[p.to_dict() for p in self.placements],
                    free={str(k): v for k, v in self.free.items() if k is not Tier.PFS})


def allocate(intents: list[Intent], mapper: Mapper,
             capacity: dict[Tier, int] | None = None) -> Allocation:
    """Map ``intents`` and fit each into the first tier of its chain with room left.

    Largest first (first-fit decreasing), so a big dataset is not squeezed out of the NVMe by
    small scratch directories. Raises BadInputError naming the intent when no tier of its chain
    can hold it, before anything is deployed.
    """
    free = dict(DEFAULT_CAPACITY if capacity is None else capacity)
    result = mapper.map(encode(intents))
    order = sorted(range(len(intents)), key=lambda i: -intents[i].size)
    placed: dict[int, Placement] = {}
    for i in order:
        intent, chain = intents[i], result.chains[int(result.chain_ids[i])]
        tier = next((t for t in chain if free.get(t, 0) >= intent.size), None)
        if tier is None:
            room = ", ".join(f"{t}: {free.get(t, 0) / 2**30:.2f} GiB" for t in chain)
            raise BadInputError(
                f"capacity cannot be met: {intent.path} needs {intent.size / 2**30:.2f} GiB on "
                f"one of ({room}) free", field=f"intents[{i}].size")
        free[tier] -= intent.size
        soft = int(result.soft[i]) if tier is not Tier.PFS else 0
        placed[i] = Placement(intent, tier, soft, chain)
    return Allocation([placed[i] for i in range(len(intents))], mapper.name, free)
