"""Per-tenant measurements an LLM serving engine keeps, independent of the scheduler in use
(both FairCache's simulator and the real engine ``llm.engine`` keep one).

The same numbers let us compare schedulers: *compute-only* service is what VTC counts; *unified*
service prices memory and I/O too and splits shared prefixes over their users (``accounting``).
"""

from __future__ import annotations

import numpy as np

from schedlab.llm.accounting import CostWeights, PrefixLedger

FIELDS = (
    "executed",
    "attributed",
    "decode",
    "kv_byte_s",
    "host_byte_s",
    "load_bytes",
    "offload_bytes",
    "gpu_hit_tokens",
    "host_hit_tokens",
    "miss_tokens",
    "input_tokens",
    "admitted",
    "finished",
)


class TenantLedger:
    """Running per-tenant totals; ``service()`` turns them into the two service figures."""

    def __init__(self, n_tenants: int, weights: CostWeights) -> None:
        self.n = n_tenants
        self.weights = weights
        self.prefix = PrefixLedger(n_tenants)
        for name in FIELDS:
            setattr(self, name, np.zeros(n_tenants))

    def compute_service(self) -> np.ndarray:
        w = self.weights
        return w.w_in * self.executed + w.w_out * self.decode

    def unified_service(self) -> np.ndarray:
        w = self.weights
        return (
            w.w_in * self.attributed
            + w.w_out * self.decode
            + w.p_kv * self.kv_byte_s
            + w.p_host * self.host_byte_s
            + w.p_io * (self.load_bytes + self.offload_bytes)
        )

    def as_rows(self, names: list[str]) -> list[dict]:
        compute, unified = self.compute_service(), self.unified_service()
        rows = []
        for t in range(self.n):
            hits = self.gpu_hit_tokens[t] + self.host_hit_tokens[t]
            total = hits + self.miss_tokens[t]
            rows.append(
                dict(
                    tenant=names[t],
                    compute_service=float(compute[t]),
                    unified_service=float(unified[t]),
                    **{name: float(getattr(self, name)[t]) for name in FIELDS},
                    hit_rate=float(hits / total) if total else 0.0,
                    gpu_hit_rate=float(self.gpu_hit_tokens[t] / total) if total else 0.0,
                    host_hit_rate=float(self.host_hit_tokens[t] / total) if total else 0.0,
                )
            )
        return rows
