"""Mapping rules from intents to hardware tiers and software accelerators, and their compiler.

Paper: IFlux (../shared/papers/10-iflux.md) maps intents to accelerators at 3.5M intents/s. The
rules are written as readable data (:class:`Rule`: conditions, a tier fallback chain, software to
add or remove, a priority); :func:`interpret` evaluates them the obvious way, one intent at a
time. Because every feature is a small enum, the whole intent space has only a few thousand
points, so :func:`compile_rules` evaluates :func:`interpret` once per point and stores the answer
in a flat table. Mapping a batch is then one mixed-radix index computation and two gathers, and
the compiled table is checked against the interpreter on every point (a required claim).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntFlag, StrEnum

import numpy as np

from schedlab.core.io import write_text
from schedlab.iflux import fastpath
from schedlab.iflux.intents import (
    CARDINALITY,
    FEATURES,
    Consistency,
    Level,
    Mode,
    Pattern,
    Sharing,
    SizeClass,
    Usage,
)


class Tier(StrEnum):
    """Hardware I/O accelerators (``pfs`` = none: the shared parallel file system)."""

    PFS = "pfs"
    NVME = "nvme"            # node-local NVMe/SSD burst buffer
    RAMDISK = "ramdisk"      # tmpfs in node memory
    SHARED_BB = "shared-bb"  # shared (network) burst buffer, DataWarp-like
    GPU_DIRECT = "gpu-direct"  # pinned staging buffer next to the GPU (modelled)


class Soft(IntFlag):
    """Software I/O accelerators; a placement carries a bitmask of them."""

    NONE = 0
    STAGE_IN = 1
    STAGE_OUT = 2
    WRITE_BACK = 4
    PREFETCH = 8
    COMPRESS = 16
    AGGREGATE = 32


SOFT_NAMES = {s: s.name.lower().replace("_", "-") for s in Soft if s is not Soft.NONE}


def soft_list(mask: int) -> list[str]:
    return [name for flag, name in SOFT_NAMES.items() if mask & flag]


@dataclass(frozen=True)
class Rule:
    """When every condition matches, prefer ``tiers`` (in order) and add/remove software.

    ``when`` maps a feature name (see intents.FEATURES) to the values it may take; a missing
    feature matches anything. Among matching rules the highest priority's tier chain wins;
    software is the union of all matching rules' ``add`` minus their ``remove``.
    """

    name: str
    when: Mapping[str, frozenset]
    tiers: tuple[Tier, ...] = ()
    add: Soft = Soft.NONE
    remove: Soft = Soft.NONE
    priority: int = 0


def rule(name: str, priority: int, tiers: Sequence[Tier] = (), add: Soft = Soft.NONE,
         remove: Soft = Soft.NONE, **when: Iterable) -> Rule:
    conditions = {k: frozenset(v if isinstance(v, list | tuple | set | frozenset) else [v])
                  for k, v in when.items()}
    return Rule(name, conditions, tuple(tiers), add, remove, priority)


T, S = Tier, Soft
SMALLISH = [SizeClass.TINY, SizeClass.SMALL]

#: IFlux's default rule base. The tier chains encode "fastest tier that fits, then fall back".
DEFAULT_RULES: tuple[Rule, ...] = (
    rule("default-pfs", 0, [T.PFS]),
    rule("large-seq-input", 10, [T.NVME, T.SHARED_BB], S.STAGE_IN | S.PREFETCH,
         usage=Usage.INPUT, pattern=Pattern.LARGE_SEQUENTIAL),
    rule("small-random-input", 20, [T.RAMDISK, T.NVME, T.SHARED_BB], S.STAGE_IN | S.PREFETCH,
         usage=Usage.INPUT, pattern=Pattern.SMALL_RANDOM),
    rule("metadata-input", 20, [T.RAMDISK, T.NVME], S.STAGE_IN | S.PREFETCH,
         usage=Usage.INPUT, pattern=Pattern.METADATA_HEAVY),
    rule("metadata-output", 20, [T.RAMDISK, T.NVME], S.STAGE_OUT | S.AGGREGATE,
         usage=Usage.OUTPUT, pattern=Pattern.METADATA_HEAVY),
    rule("checkpoint", 30, [T.NVME, T.SHARED_BB], S.STAGE_OUT | S.WRITE_BACK,
         pattern=Pattern.CHECKPOINT, usage=[Usage.OUTPUT, Usage.TEMPORARY]),
    rule("seq-output", 10, [T.NVME, T.SHARED_BB], S.STAGE_OUT | S.WRITE_BACK | S.COMPRESS,
         usage=Usage.OUTPUT, pattern=Pattern.LARGE_SEQUENTIAL),
    rule("random-output", 10, [T.RAMDISK, T.NVME], S.STAGE_OUT | S.WRITE_BACK,
         usage=Usage.OUTPUT, pattern=Pattern.SMALL_RANDOM),
    rule("scratch", 15, [T.RAMDISK, T.NVME], usage=Usage.TEMPORARY),
    rule("scratch-big", 16, [T.NVME, T.SHARED_BB], usage=Usage.TEMPORARY,
         size_class=[SizeClass.MEDIUM, SizeClass.LARGE]),
    rule("ai-samples", 40, [T.GPU_DIRECT, T.RAMDISK, T.NVME], S.STAGE_IN | S.PREFETCH,
         data="sample", level=Level.OPERATION, usage=Usage.INPUT),
    rule("workflow-shared", 50, [T.SHARED_BB, T.NVME], level=Level.WORKFLOW,
         sharing=Sharing.SHARED),
    rule("big-data", 60, [T.SHARED_BB], size_class=SizeClass.LARGE),
    rule("medium-not-in-ram", 55, [T.NVME, T.SHARED_BB], size_class=SizeClass.MEDIUM,
         pattern=[Pattern.SMALL_RANDOM, Pattern.METADATA_HEAVY]),
    # only the PFS gives strong consistency to writers on many nodes: leave it there
    rule("strong-shared-writes", 100, [T.PFS], remove=S.WRITE_BACK | S.COMPRESS,
         consistency=Consistency.STRONG, sharing=Sharing.SHARED,
         mode=[Mode.WRITE_ONLY, Mode.READ_WRITE]),
    rule("strong-no-writeback", 90, remove=S.WRITE_BACK, consistency=Consistency.STRONG),
    rule("random-no-compress", 90, remove=S.COMPRESS, pattern=Pattern.SMALL_RANDOM),
    rule("read-only-no-flush", 95, remove=S.STAGE_OUT | S.WRITE_BACK | S.AGGREGATE,
         mode=Mode.READ_ONLY),
    rule("temporary-no-flush", 95, remove=S.STAGE_OUT | S.WRITE_BACK | S.COMPRESS | S.AGGREGATE,
         usage=Usage.TEMPORARY),
)


@dataclass(frozen=True)
class Decision:
    """The interpreter's answer for one intent: a tier chain and a software mask."""

    tiers: tuple[Tier, ...]
    soft: int
    rule: str = ""


def interpret(codes: Sequence[int], rules: Sequence[Rule] = DEFAULT_RULES) -> Decision:
    """The reference mapper: evaluate every rule on one encoded intent."""
    values = {name: list(enum)[c] for (name, enum), c in zip(FEATURES, codes, strict=True)}
    matching = [r for r in rules
                if all(values[k] in allowed for k, allowed in r.when.items())]
    with_tiers = [r for r in matching if r.tiers]
    best = max(with_tiers, key=lambda r: r.priority) if with_tiers else None
    tiers = best.tiers if best else (Tier.PFS,)
    add = remove = 0
    for r in matching:
        add |= int(r.add)
        remove |= int(r.remove)
    soft = add & ~remove
    if tiers == (Tier.PFS,):
        soft = 0  # staging/caching onto the PFS itself is meaningless
    return Decision(tiers, soft, best.name if best else "")


@dataclass
class CompiledRules:
    """Flat lookup tables over the whole intent space (mixed-radix index of the codes)."""

    chains: list[tuple[Tier, ...]]          # chain id -> tier chain
    chain_of: np.ndarray                    # point -> chain id (uint8)
    soft_of: np.ndarray                     # point -> software mask (uint8)
    strides: np.ndarray = field(default_factory=lambda: _strides())

    def index(self, codes: np.ndarray) -> np.ndarray:
        """Mixed-radix index of each row of ``codes`` (n x features, uint8)."""
        return codes.astype(np.int32) @ self.strides

    def lookup_numpy(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chain ids, software masks) for a batch of encoded intents, vectorised NumPy."""
        idx = self.index(codes)
        return self.chain_of[idx], self.soft_of[idx]

    def lookup(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Same as :meth:`lookup_numpy`, fused into one pass (Numba): no index temporary."""
        try:
            kernel = _fused_lookup()
        except ImportError:  # Numba is optional: the NumPy path gives the same answer
            return self.lookup_numpy(codes)
        codes = np.ascontiguousarray(codes, dtype=np.uint8)
        chain = np.empty(len(codes), dtype=np.uint8)
        soft = np.empty(len(codes), dtype=np.uint8)
        kernel(codes, self.strides, self.chain_of, self.soft_of, chain, soft)
        return chain, soft


@functools.cache
def _fused_lookup():
    """Compile the fused lookup on first use (Numba import and JIT cost paid once)."""
    from numba import njit

    @njit(cache=True, nogil=True)
    def kernel(codes, strides, chain_of, soft_of, chain, soft):  # pragma: no cover - JIT
        for i in range(codes.shape[0]):
            idx = 0
            for j in range(codes.shape[1]):
                idx += np.int32(codes[i, j]) * strides[j]
            chain[i] = chain_of[idx]
            soft[i] = soft_of[idx]

    return kernel


def _strides() -> np.ndarray:
    strides = np.ones(len(CARDINALITY), dtype=np.int32)
    for i in range(len(CARDINALITY) - 2, -1, -1):
        strides[i] = strides[i + 1] * CARDINALITY[i + 1]
    return strides


def all_points() -> np.ndarray:
    """Every point of the intent space, in index order."""
    return np.array(list(itertools.product(*(range(c) for c in CARDINALITY))), dtype=np.uint8)


def compile_rules(rules: Sequence[Rule] = DEFAULT_RULES) -> CompiledRules:
    """Evaluate :func:`interpret` on every point once and keep the answers as arrays."""
    points = all_points()
    chains: list[tuple[Tier, ...]] = []
    chain_ids: dict[tuple[Tier, ...], int] = {}
    chain_of = np.zeros(len(points), dtype=np.uint8)
    soft_of = np.zeros(len(points), dtype=np.uint8)
    for i, point in enumerate(points):
        decision = interpret(point.tolist(), rules)
        if decision.tiers not in chain_ids:
            chain_ids[decision.tiers] = len(chains)
            chains.append(decision.tiers)
        chain_of[i] = chain_ids[decision.tiers]
        soft_of[i] = decision.soft
    return CompiledRules(chains, chain_of, soft_of)


def write_table(path: str | os.PathLike) -> None:
    """Compile the default rules (full package: NumPy) into a JSON table at ``path``."""
    if [(n, tuple(e)) for n, e in FEATURES] != list(fastpath.FEATURES):
        raise RuntimeError("fastpath.FEATURES is out of step with intents.FEATURES")
    table = compile_rules()
    write_text(path, json.dumps(dict(
        chains=[[str(t) for t in chain] for chain in table.chains],
        chain_of=table.chain_of.tobytes().hex(), soft_of=table.soft_of.tobytes().hex())))
