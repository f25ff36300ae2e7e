"""The unified cost of LLM serving and the shared-prefix ledger: the yardstick every serving
engine here reports, whichever scheduler runs.

Why in ``llm/``: both engines (FairCache's simulator and the real engine ``llm.engine``) keep a
per-tenant ledger in these units, and the real engine may not import a system. FairCache's
scheduler *charges* by the same figure; VTC and FCFS are measured by it.

Unified cost of a tenant (FairCache, §"unified scheduling metric") in *token units*, so that with
memory and I/O priced at zero it is exactly VTC's service (input price 1, output price 2)::

    compute = w_in · prefill tokens actually executed (shared prefixes split, below)
            + w_out · decode tokens
    memory  = p_kv · running KV bytes · seconds  +  p_host · host-cache bytes · seconds
    io      = p_io · host<->GPU bytes

Why these prices: one GPU-second is worth ``1000 / prefill_b`` token units (the tokens it
prefills). We charge ``hbm_share`` of that value to the GPU's KV memory (the simulator's default
derives it from the hardware, ``kv_memory_share``: the KV pool's share of GPU memory), so one
byte-second of KV costs ``hbm_share · tokens_per_s / kv_capacity_bytes``; a host byte-second costs
``host_ratio`` (default 0.1, DRAM vs HBM price per GB) of that; a PCIe byte costs the GPU time
the transfer stalls, ``tokens_per_s / pcie_bytes_per_s``.

The ledger takes ``(block_hash, computing tenant, cost)`` triples, so an engine without a radix
tree (vLLM's hash-keyed blocks, ``schedlab.llm.engine``) uses it as it is.

Shared prefixes: the first tenant to compute a block pays its full prefill cost; when a *new*
tenant reuses it, the cost is re-split evenly over the k tenants that used it — the newcomer pays
cost/k and each earlier payer is refunded cost/(k-1) - cost/k. The final charges are cost/k each,
whatever the arrival order, and they always sum to the cost (conservation).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import numpy as np

from schedlab.core.errors import ConfigError
from schedlab.llm.costmodel import CostModel
from schedlab.llm.radix import Node

BlockCost = tuple[Hashable, float]  # (block hash, prefill tokens it took)
BlockUse = tuple[Hashable, int, float]  # (block hash, computing tenant, prefill tokens)


@dataclass(frozen=True)
class CostWeights:
    """Prices turning compute, memory and I/O into one token-unit service figure."""

    w_in: float = 1.0
    w_out: float = 2.0
    p_kv: float = 0.0  # per byte-second of running KV
    p_host: float = 0.0  # per byte-second of host cache
    p_io: float = 0.0  # per host<->GPU byte

    def __post_init__(self) -> None:
        for name in ("w_in", "w_out", "p_kv", "p_host", "p_io"):
            if getattr(self, name) < 0:
                raise ConfigError("prices must be >= 0", field=name)

    @classmethod
    def from_cost_model(
        cls,
        cost: CostModel,
        kv_capacity_tokens: int,
        hbm_share: float = 0.5,
        host_ratio: float = 0.1,
    ) -> CostWeights:
        """Derive memory and I/O prices from the hardware (see the module docstring)."""
        tokens_per_s = 1000.0 / cost.prefill_b
        kv_bytes = kv_capacity_tokens * cost.kv_bytes_per_token
        p_kv = hbm_share * tokens_per_s / kv_bytes
        pcie = cost.gpu.pcie_gbs * 1e9 * cost.tp
        return cls(p_kv=p_kv, p_host=host_ratio * p_kv, p_io=tokens_per_s / pcie)

    @property
    def compute_only(self) -> bool:
        return self.p_kv == 0 and self.p_host == 0 and self.p_io == 0


def kv_memory_share(cost: CostModel, kv_capacity_tokens: int) -> float:
    """``hbm_share`` read from the hardware: the KV pool's share of the GPUs' memory (what the
    weights and activations leave of it goes to KV), i.e. the part of a GPU-second's price
    that the KV pool occupies. Llama-3-8B on an A10G with a 40k-token pool: 0.109."""
    kv_bytes = kv_capacity_tokens * cost.kv_bytes_per_token
    return float(kv_bytes / (cost.gpu.memory_gb * 1e9 * cost.tp))


class PrefixLedger:
    """Splits each cached block's prefill cost evenly over every tenant that used it.

    Only blocks used by two or more tenants get an entry, so memory stays proportional to the
    shared part of the cache.
    """

    def __init__(self, n_tenants: int) -> None:
        self.n_tenants = n_tenants
        self._payers: dict[int, list[int]] = {}

    def charge(
        self, tenant: int, computed: Iterable[Node | BlockCost], reused: Iterable[Node | BlockUse]
    ) -> np.ndarray:
        """Per-tenant charges (refunds negative) for one request's prefill, in prefill tokens.

        ``computed``: the blocks this request prefilled, as ``(block_hash, cost)``;
        ``reused``: the cached blocks it used, as ``(block_hash, computing tenant, cost)``.
        Radix-tree ``Node`` objects are accepted too (the simulator's; keyed by node id).
        """
        delta = np.zeros(self.n_tenants)
        for block in computed:
            delta[tenant] += block.cost if isinstance(block, Node) else block[1]
        for block in reused:
            key, computer, cost = (
                (block.uid, block.computer, block.cost) if isinstance(block, Node) else block
            )
            if computer == tenant or computer < 0:
                continue
            payers = self._payers.get(key)
            if payers is None:
                payers = self._payers[key] = [computer]
            elif tenant in payers:
                continue
            k = len(payers) + 1
            refund = cost / (k - 1) - cost / k
            for p in payers:
                delta[p] -= refund
            delta[tenant] += cost / k
            payers.append(tenant)
        return delta

    def forget(self, block: Node | Hashable) -> None:
        """The block was removed; a recomputation starts a new split."""
        self._payers.pop(block.uid if isinstance(block, Node) else block, None)

    def shares(self, node: Node) -> list[int]:
        return list(self._payers.get(node.uid, [node.computer]))


def computed_cost(blocks: Iterable[Node | BlockCost]) -> float:
    """Prefill tokens represented by ``blocks`` (nodes or ``(block_hash, cost)`` pairs)."""
    return sum(b.cost if isinstance(b, Node) else b[1] for b in blocks)
