"""Request and trace types shared by every LLM-serving system in schedlab.

A prompt is described by its *block hashes* (Mooncake's ``hash_ids``): block i of a prompt has an
id that is equal across two prompts exactly when their first i+1 blocks are equal, so a prefix
cache can match prompts without storing text. Traces without hashes (Azure, BurstGPT) get fresh
ids per request, i.e. no reuse, which is what those traces can tell us.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from schedlab.core.errors import BadInputError


@dataclass(slots=True)
class Request:
    """One inference request; ``blocks`` are prefix-chained hashes of its prompt's token blocks."""

    rid: int
    tenant: int
    arrival: float  # seconds since the trace start
    input_len: int
    output_len: int
    blocks: tuple[int, ...] = ()

    def validate(self, block_tokens: int) -> None:
        if self.input_len < 0 or self.output_len < 1:
            raise BadInputError("input_len must be >= 0 and output_len >= 1", field="length")
        if self.arrival < 0 or not math.isfinite(self.arrival):
            raise BadInputError("arrival must be a finite non-negative time", field="arrival")
        if self.tenant < 0:
            raise BadInputError("tenant must be >= 0", field="tenant")
        need = math.ceil(self.input_len / block_tokens)
        if len(self.blocks) != need:
            raise BadInputError(f"has {len(self.blocks)} block hashes; input of "
                                f"{self.input_len} tokens needs {need}", field="hash_ids")


@dataclass
class Trace:
    """Requests sorted by arrival, the block size their hashes use, and the tenant count."""

    requests: list[Request]
    block_tokens: int = 16
    name: str = "trace"
    tenant_names: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise BadInputError("block_tokens must be >= 1", field="block_tokens")
        self.requests.sort(key=lambda r: (r.arrival, r.rid))
        if not self.tenant_names:
            count = 1 + max((r.tenant for r in self.requests), default=0)
            self.tenant_names = [f"t{i}" for i in range(count)]

    @property
    def n_tenants(self) -> int:
        return len(self.tenant_names)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[Request]:
        return iter(self.requests)

    def validate(self) -> None:
        for req in self.requests:
            req.validate(self.block_tokens)
            if req.tenant >= self.n_tenants:
                raise BadInputError(f"tenant {req.tenant} >= n_tenants {self.n_tenants}",
                                    field="tenant")


class BlockIds:
    """Hands out fresh block hashes (never equal to one a trace already uses)."""

    def __init__(self, start: int = 1 << 40) -> None:
        self._counter = itertools.count(start)

    def fresh(self, n: int) -> tuple[int, ...]:
        return tuple(next(self._counter) for _ in range(n))


def assign_tenants(requests: Iterable[Request], n_tenants: int, how: str = "prefix") -> None:
    """Map requests onto ``n_tenants`` tenants in place for traces that do not name tenants.

    ``prefix`` keeps requests with the same first block together (a tenant owns its prompts, as
    in a real multi-tenant service); ``round-robin`` deals requests out in arrival order.
    """
    if n_tenants < 1:
        raise BadInputError("must be >= 1", field="tenants")
    if how not in ("prefix", "round-robin"):
        raise BadInputError(f"unknown mapping '{how}' (prefix, round-robin)", field="how")
    for i, req in enumerate(requests):
        if how == "prefix" and req.blocks:
            req.tenant = hash(req.blocks[0]) % n_tenants
        else:
            req.tenant = i % n_tenants
