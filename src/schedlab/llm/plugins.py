"""The protocols an LLM serving engine drives its plug-ins through: a request ``Scheduler``
and a host-tier ``CacheManager``, plus what the engine tells them (``EngineView``,
``AdmitUsage``).

Why here, in ``llm/``: the engines (the simulator of ``schedlab.faircache`` and the real CPU
engine ``schedlab.llm.engine``) must not know which policy they run, and the shared engine must
not import the system whose policies plug into it. FairCache, VTC, FCFS, LPM, DLPM and every
cache manager implement these protocols in their own packages.

The call order: ``on_arrival`` when a request comes in, ``pick`` to choose what to admit
(``unpick`` if it does not fit), ``on_admit`` with what the prefill used, ``on_iteration`` after
every batch step, ``on_finish`` at completion; the host tier is offered each block the GPU
evicts (``admit``) and told of hits (``on_access``) and removals (``on_remove``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from schedlab.llm.accounting import BlockCost, BlockUse, CostWeights
from schedlab.llm.radix import Node

if TYPE_CHECKING:
    import numpy as np

    from schedlab.llm.requests import Request


class EngineView(Protocol):
    """What a scheduler may ask the engine: cache matches and the prices in force."""

    n_tenants: int
    weights: CostWeights
    # optional: ``tenant_weights`` (n_tenants shares > 0, VTC-style weighted fairness)

    def cached_tokens(self, req: Request) -> int: ...


@dataclass
class AdmitUsage:
    """What admitting one request cost: executed prefill, reused/computed blocks, PCIe bytes.

    ``computed``: blocks it prefilled, ``(block_hash, cost)``; ``reused``: cached blocks it used,
    ``(block_hash, computing tenant, cost)`` (the simulator passes its radix ``Node`` objects).
    """

    tenant: int
    computed_tokens: int
    computed: list[Node | BlockCost] = field(default_factory=list)
    reused: list[Node | BlockUse] = field(default_factory=list)
    load_bytes: float = 0.0
    #: tokens the request had generated before this admission (a recompute after preemption:
    #: ``computed_tokens`` then counts them, they are not new output)
    generated: int = 0


class Scheduler(Protocol):
    """Chooses which queued request the engine admits next and keeps its own accounting."""

    name: str

    def bind(self, view: EngineView) -> None: ...
    def on_arrival(self, req: Request, now: float) -> None: ...
    def pick(self, now: float) -> Request | None: ...
    def unpick(self, req: Request) -> None: ...
    def on_admit(self, req: Request, usage: AdmitUsage) -> None: ...
    def on_iteration(
        self,
        out_tokens: np.ndarray,
        kv_byte_s: np.ndarray,
        host_byte_s: np.ndarray,
        io_bytes: np.ndarray,
    ) -> None: ...
    def on_finish(self, req: Request, now: float) -> None: ...
    # an admitted request was preempted (its KV freed): queue it again, at its tenant's head
    def on_preempt(self, req: Request) -> None: ...
    def forget(self, block: Node | Hashable) -> None: ...  # a cached block is gone
    def queued(self) -> np.ndarray: ...  # per-tenant count of waiting requests
    def remove(self, req: Request) -> bool: ...  # an abort of a queued request


class CacheManager(Protocol):
    """Decides which blocks the host tier keeps."""

    name: str

    def bind(
        self, capacity_blocks: int, n_tenants: int, block_tokens: int, attn_ratio: float
    ) -> None: ...
    def namespace(self, tenant: int) -> int: ...
    def on_access(self, path: list[Node], tenant: int, now: float) -> None: ...
    def admit(self, node: Node, now: float) -> list[Node] | None: ...
    def on_remove(self, node: Node) -> None: ...
    def usage(self) -> np.ndarray: ...  # host blocks held per owner tenant
